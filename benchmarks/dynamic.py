"""Dynamic shapes (issue 19): split tail strategies on one kernel, and whole models with a
symbolic dimension, one dynamic build against a build specialised per shape and onnxruntime
running the same dynamic ONNX model.

* **Tail strategies**: ``B[r, i] = A[r, i]*2 + 1`` over ``[64, n]`` with a symbolic ``n``,
  ``i`` split by 16 and vectorized, one build per ``split(..., tail=...)`` (the naive guard,
  the default, partition, predicate, shift_inwards, dispatch with the cost model's widths
  and with the paths 8, 4, 2 fixed): compile time, code size (bytes of machine code of the
  entry function, which the C compiler inlines the kernel into, from ``nm``; lines of the
  kernel's C function) and run time at each n against a build for that n;
* **ResNet-18** with a dynamic batch (``dim_param`` ``"batch"``), at batch 1, 3, 8 and 16
  (``--quick``: 1 and 16, 64x64 images instead of 224x224);
* a transformer's **MLP block** (``kiln.relay.testing.mlp_block``, ``[seq, 64] -> [seq, 64]``
  through a 256-wide hidden layer) and **attention block**
  (``kiln.relay.testing.attention_block``, single-head self-attention on ``[seq, 64]``, both
  of its products with symbolic operands) with a dynamic sequence length, at 7, 64, 128 and
  500.

For each model: the compile time of the dynamic build (once) and of each specialised build
(each with an empty compile cache);
for each size: the run time of the three (medians of interleaved repeats; onnxruntime's
worker threads, which spin after a call, let settle before the next measurement), the
fastest whole run of each kiln build over :data:`SHORT_ROUNDS` short interleaved rounds, the
sum of the kernel calls of each kiln build (each call the fastest of the repeats of
``GraphModule.profile``; per call in the JSON details), and the largest difference of
kiln's outputs from onnxruntime's. On a machine busy with other work a measurement of many
calls shares the cores and reads several times the time of one burst of a few calls; the
fastest short rounds and the kernel minima are what compares the builds there. Nothing here
is a pass/fail criterion (docs/dynamic.md discusses the numbers). ``--only PART ...`` runs
some of the parts (:data:`PARTS`: ``tails``, ``resnet18``, ``mlp``, ``attention``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/dynamic.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import Figure  # noqa: E402

NAME = "dynamic"
DESCRIPTION = ("dynamic shapes: split tail strategies on one kernel (compile time, code size, "
               "run time); ResNet-18 (dynamic batch), an MLP and an attention block (dynamic "
               "sequence length), one dynamic build vs specialised builds vs onnxruntime")

#: the tail strategies measured: label -> (``tail=``, the widths a dispatch split's paths are
#: fixed to; None: the cost model's choice)
STRATEGIES: dict[str, tuple[str | None, tuple[int, ...] | None]] = {
    "guard (naive)": ("guard", None), "default": (None, None), "partition": ("partition", None),
    "predicate": ("predicate", None), "shift_inwards": ("shift_inwards", None),
    "dispatch (cost model)": ("dispatch", None), "dispatch 8/4/2": ("dispatch", (8, 4, 2)),
}
#: rows of the tail-strategy kernel (each row runs the tail once)
KERNEL_ROWS = 64
#: rounds, and seconds per measurement, of the fastest whole runs of the two kiln builds
SHORT_ROUNDS, SHORT_S = 15, 0.002
#: seconds to sleep after a measurement of onnxruntime (its worker threads keep spinning
#: after a call and would slow down the kiln build measured next)
ORT_SETTLE_S = 0.05


def settings(quick: bool) -> dict[str, Any]:
    return {"resnet_hw": 64 if quick else 224, "batches": [1, 16] if quick else [1, 3, 8, 16],
            "seqs": [7, 64, 128, 500],
            "kernel_sizes": [7, 64, 500, 1003], "repeat": 3 if quick else 10,
            "min_time": 0.02 if quick else 0.1}


#: the parts of the suite ``--only`` chooses from: the tail strategies, then each model
PARTS = ("tails", "resnet18", "mlp", "attention")


def _models(cfg: dict[str, Any], parts: Sequence[str]
            ) -> list[tuple[str, Any, str, list[int], Any]]:
    """``(label, dynamic ONNX model, input name, sizes, input shape of a size)`` of the
    models among ``parts``."""
    from kiln.relay import testing

    hw = cfg["resnet_hw"]
    models = {
        "resnet18": lambda: (f"resnet18 {hw}x{hw}", testing.resnet18(hw=hw, batch="batch"),
                             "input", cfg["batches"], lambda b: (b, 3, hw, hw)),
        "mlp": lambda: ("mlp_block d=64", testing.mlp_block(seq="seq"), "x", cfg["seqs"],
                        lambda s: (s, 64)),
        "attention": lambda: ("attention_block d=64", testing.attention_block(seq="seq"), "x",
                              cfg["seqs"], lambda s: (s, 64)),
    }
    return [make() for part, make in models.items() if part in parts]


@contextmanager
def _empty_compile_cache() -> Iterator[None]:
    """A compile cache of its own, empty (a build would otherwise reuse the C objects of an
    identical kernel built before, e.g. a specialised build the dynamic build's 1-row
    kernels)."""
    old = os.environ.get("KILN_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="kiln-bench-dynamic-") as cache:
        os.environ["KILN_CACHE_DIR"] = cache
        try:
            yield
        finally:
            if old is None:
                del os.environ["KILN_CACHE_DIR"]
            else:
                os.environ["KILN_CACHE_DIR"] = old


# ---- tail strategies on one kernel ------------------------------------------------------------
def _strategy_kernel(n, tail: str | None):
    """``B[r, i] = A[r, i]*2 + 1`` over ``[KERNEL_ROWS, n]``, ``i`` split by 16 with ``tail``
    and vectorized: its schedule and arguments."""
    from kiln import te

    A = te.placeholder((KERNEL_ROWS, n), name="A")
    B = te.compute((KERNEL_ROWS, n), lambda r, i: A[r, i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[1], factor=16, tail=tail)
    s[B].vectorize(inner)
    return s, [A, B]


def _kernel_c_lines(source: str) -> int:
    """Lines of the kernel's C function (``*_compute``) in a module's source."""
    lines = source.splitlines()
    start = next(k for k, line in enumerate(lines) if "_compute(" in line and "{" in line)
    end = next(k for k in range(start + 1, len(lines)) if lines[k] == "}")
    return end - start + 1


def _code_bytes(library: str, function: str) -> int | None:
    """Bytes of machine code of ``function`` in a shared library (``nm -S``; None without
    binutils)."""
    try:
        out = subprocess.run(["nm", "-S", "--defined-only", library], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    sizes = {f[3]: int(f[1], 16) for f in (line.split() for line in out.splitlines())
             if len(f) == 4}
    return sizes.get(function)


def _build_kernel(n, tail: str | None, widths: tuple[int, ...] | None):
    """The built kernel, its build seconds (with an empty compile cache), the bytes of its
    entry function's machine code and the widths of its dispatch paths (None without a
    dispatch split)."""
    import kiln
    from kiln.ir.transform import PassContext
    from kiln.te.schedule import Split

    config = {} if widths is None else {"tir.DispatchRemainder": {"widths": widths}}
    s, args = _strategy_kernel(n, tail)
    with _empty_compile_cache(), PassContext(config=config):
        t = time.perf_counter()
        mod = kiln.build(s, args)
        seconds = time.perf_counter() - t
        code = _code_bytes(mod.library_path, mod.entry_name)
    split = next(r for st in s.stages for r in st.relations if isinstance(r, Split))
    return mod, seconds, code, split.dispatch_widths


def bench_strategies(cfg: dict[str, Any], say) -> tuple[list[Figure], dict[str, Any]]:
    """Compile time, code size and run time of each tail strategy (module docstring)."""
    import kiln
    from kiln import te

    sizes = cfg["kernel_sizes"]
    rng = np.random.default_rng(0)
    arrays = {n: (kiln.nd.array(rng.standard_normal((KERNEL_ROWS, n)).astype(np.float32)),
                  kiln.nd.empty((KERNEL_ROWS, n))) for n in sizes}
    specialised = {n: _build_kernel(n, None, None)[0] for n in sizes}
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    for label, (tail, widths) in STRATEGIES.items():
        say(f"tail strategies: {label}")
        mod, compile_s, size_b, paths = _build_kernel(te.var("n"), tail, widths)
        c_lines = _kernel_c_lines(mod.get_source())
        notes = f"{c_lines} lines of C" + ("" if paths is None else f"; paths {paths}")
        figures += [Figure(key=f"tail.{label}.compile", label=f"tail {label}: compile",
                           kiln=compile_s, unit="s"),
                    Figure(key=f"tail.{label}.code", label=f"tail {label}: code size",
                           kiln=size_b, unit="B", notes=notes)]
        runs = {}
        for n in sizes:
            a, b = arrays[n]
            mod(a, b)
            np.testing.assert_allclose(b.numpy(), a.numpy() * 2 + 1, rtol=1e-6)
            t = common.interleaved({"dynamic": lambda a=a, b=b, mod=mod: mod(a, b),
                                    "specialised": lambda a=a, b=b, n=n: specialised[n](a, b)},
                                   repeat=cfg["repeat"], min_time=cfg["min_time"])
            runs[n] = {k: v.median for k, v in t.items()}
            figures.append(Figure(
                key=f"tail.{label}.{n}", label=f"tail {label}, n={n}",
                kiln=runs[n]["dynamic"], unit="s", reference=runs[n]["specialised"],
                reference_label="build for this n"))
        details[label] = {"compile_s": compile_s, "code_bytes": size_b,
                          "kernel_c_lines": c_lines, "dispatch_widths": paths, "run_s": runs}
    return figures, details


# ---- whole models -----------------------------------------------------------------------------
def _build(model, shape: dict | None):
    """The built factory module and its build seconds (import included), compiled with an
    empty compile cache of its own."""
    from kiln import relay

    with _empty_compile_cache():
        t = time.perf_counter()
        mod, params = relay.frontend.from_onnx(model, shape=shape)
        with relay.build_config(opt_level=3):
            lib = relay.build(mod, target="llvm", params=params)
        return lib, time.perf_counter() - t


def _kernel_minima(m, rounds: int) -> list[tuple[str, float]]:
    """Seconds of each kernel call of graph module ``m`` in run order, the fastest of
    ``rounds`` rounds of ``GraphModule.profile``: short calls are rarely preempted, so on a
    machine busy with other work these say more than the medians of whole runs."""
    best = m.profile(number=3)
    for _ in range(rounds - 1):
        best = [(name, min(t, u)) for (name, t), (_, u)
                in zip(best, m.profile(number=3), strict=True)]
    return best


def bench_model(label: str, model, inp: str, sizes: list[int], shape_of,
                cfg: dict[str, Any], say) -> tuple[list[Figure], dict[str, Any]]:
    """The figures and details of one model at each of ``sizes``."""
    import onnxruntime as ort

    import kiln
    from kiln.contrib import graph_executor

    say(f"{label}: dynamic build")
    dyn_lib, dyn_s = _build(model, None)
    dyn = graph_executor.GraphModule(dyn_lib["default"](kiln.cpu(0)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    figures = [Figure(key=f"{label}.compile.dynamic", label=f"{label}: compile, dynamic "
                      "(once)", kiln=dyn_s, unit="s")]
    details: dict[str, Any] = {"dynamic_compile_s": dyn_s, "sizes": {}}
    for n in sizes:
        say(f"{label}: size {n}: specialised build")
        spec_lib, spec_s = _build(model, {inp: shape_of(n)})
        spec = graph_executor.GraphModule(spec_lib["default"](kiln.cpu(0)))
        x = np.random.default_rng(n).standard_normal(shape_of(n)).astype(np.float32)
        dyn.set_input(inp, x)
        spec.set_input(inp, x)
        dyn.run()
        ref = sess.run(None, {inp: x})[0]
        err = float(np.abs(dyn.get_output(0).numpy() - ref).max())
        t = common.interleaved({"dynamic": dyn.run, "specialised": spec.run,
                                "onnxruntime": lambda x=x: sess.run(None, {inp: x})},
                               repeat=cfg["repeat"], min_time=cfg["min_time"],
                               settle={"onnxruntime": ORT_SETTLE_S})
        med = {k: v.median for k, v in t.items()}
        fastest = {k: v.min for k, v in common.interleaved(
            {"dynamic": dyn.run, "specialised": spec.run}, repeat=SHORT_ROUNDS,
            min_time=SHORT_S).items()}
        kernels = {"dynamic": _kernel_minima(dyn, cfg["repeat"]),
                   "specialised": _kernel_minima(spec, cfg["repeat"])}
        sums = {k: sum(s for _, s in calls) for k, calls in kernels.items()}
        say(f"{label}: size {n}: " + ", ".join(f"{k} {common.fmt_time(v)}"
                                               for k, v in med.items()))
        figures += [
            Figure(key=f"{label}.{n}.vs_specialised", label=f"{label}, size {n}: dynamic",
                   kiln=med["dynamic"], unit="s", reference=med["specialised"],
                   reference_label="specialised build", goal="<= 1.1x specialised",
                   within_goal=med["dynamic"] <= 1.1 * med["specialised"],
                   notes=f"max |kiln - onnxruntime| {err:.1e}"),
            Figure(key=f"{label}.{n}.fastest", label=f"{label}, size {n}: dynamic, fastest "
                   f"run of {SHORT_ROUNDS} short rounds", kiln=fastest["dynamic"], unit="s",
                   reference=fastest["specialised"], reference_label="specialised build"),
            Figure(key=f"{label}.{n}.kernels", label=f"{label}, size {n}: dynamic, sum of "
                   "its kernel calls (each the fastest of the rounds)", kiln=sums["dynamic"],
                   unit="s", reference=sums["specialised"], reference_label="specialised build",
                   notes=f"{len(kernels['dynamic'])} against {len(kernels['specialised'])} "
                   "calls"),
            Figure(key=f"{label}.{n}.vs_onnxruntime", label=f"{label}, size {n}: dynamic",
                   kiln=med["dynamic"], unit="s", reference=med["onnxruntime"],
                   reference_label="onnxruntime (same dynamic model)"),
            Figure(key=f"{label}.{n}.compile.specialised",
                   label=f"{label}, size {n}: compile, specialised", kiln=spec_s, unit="s"),
        ]
        details["sizes"][n] = {"run_s": med, "fastest_run_s": fastest,
                               "specialised_compile_s": spec_s,
                               "max_abs_error_vs_onnxruntime": err, "kernels_s": kernels}
    details["cached_plans"] = dyn.num_cached_plans
    return figures, details


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, only: Sequence[str] | None = None) -> str:
    """Run the suite (or its ``only`` parts, of :data:`PARTS`), write
    ``<out_dir>/dynamic.{json,md}``, return the markdown."""
    started, t0 = time.time(), time.perf_counter()
    cfg = settings(quick)
    parts = only or PARTS
    say = common.progress(NAME, verbose)
    load_start = common.load_average()
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    if "tails" in parts:
        figures, details["tail strategies"] = bench_strategies(cfg, say)
    for label, model, inp, sizes, shape_of in _models(cfg, parts):
        f, d = bench_model(label, model, inp, sizes, shape_of, cfg, say)
        figures += f
        details[label] = d
    _, md_path, text = common.write_report(
        NAME, figures, machine=common.machine_info(load_start), settings=cfg,
        details=details, started=started, duration_s=time.perf_counter() - t0,
        out_dir=out_dir, title="Dynamic shapes: tail strategies, and one build for every size")
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = common.suite_parser(NAME, DESCRIPTION, "ResNet-18 at 64x64, batch 1 and 16; 3 repeats")
    p.add_argument("--only", nargs="+", choices=PARTS, metavar="PART",
                   help=f"only these parts ({', '.join(PARTS)})")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out, only=args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
