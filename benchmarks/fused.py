"""Horizontal fusion (``create_fused_loop``, seed 002, F6): one parallel loop over the rows
of two independent stages against the default schedule, where each stage has its own
parallel loop.

For M = 1..8 rows per stage (N elements each), with 1 and 2 threads, two workloads, each
unfused, fused end to end, and fused with the rows interleaved (``interleave=1``: X's row 0,
Y's row 0, X's row 1, ..., so that each thread's chunk of the parallel loop holds rows of
both branches; built for each M, since interleaving needs constant extents):

* **balanced**: ``X = A + 1``, ``Y = B + 3`` (equal work per row), ``Z = X * Y``;
* **unbalanced**: ``X = A[:, 0] + 1`` (one load per row), ``Y = sigmoid(exp(B))``, ``Z = X + Y``.

And a model with parallel branches: ``kiln.relay.testing.inception_block`` compiled by
``relay.build`` (opt_level 3) with and without the horizontal fusion pass
(``relay.horizontal_fusion``), next to onnxruntime with as many threads.

Timings follow the seed's protocol (repeated ``time_evaluator``-style runs; the median of
interleaved repeats here). The report gives fused / unfused time per point and plots the
speedup (unfused / fused) against M. Nothing here is a pass/fail criterion (docs/fused_loop.md
says where fusion wins and loses).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/fused.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import Figure  # noqa: E402

NAME = "fused"
DESCRIPTION = ("create_fused_loop (seed 002, F6): fused (end to end, interleaved) vs unfused "
               "parallel loops, balanced and unbalanced branches, M = 1..8, 1 and 2 "
               "threads; an inception block with and without the graph pass, next to "
               "onnxruntime")

ROWS = tuple(range(1, 9))
THREADS = (1, 2)

#: the inception block of the model comparison (``kiln.relay.testing.inception_block``)
MODEL = {"c": 32, "hw": 8}


def _workload(kind: str, M, N: int):
    """The seed's kernels (SEED_INVENTORY §3.14): the tensors and the numpy reference."""
    from kiln import te

    A = te.placeholder((M, N), name="A")
    B = te.placeholder((M, N), name="B")
    if kind == "balanced":
        X = te.compute(A.shape, lambda x, y: A[x, y] + 1, name="X")
        Y = te.compute(B.shape, lambda x, y: B[x, y] + 3, name="Y")
        Z = te.compute(X.shape, lambda x, y: X[x, y] * Y[x, y], name="Z")
        return (A, B, X, Y, Z), lambda a, b: (a + 1) * (b + 3)
    X = te.compute(A.shape, lambda x, _: A[x, 0] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: te.sigmoid(te.exp(B[x, y])), name="Y")
    Z = te.compute(X.shape, lambda x, y: X[x, y] + Y[x, y], name="Z")
    return (A, B, X, Y, Z), lambda a, b: (a[:, :1] + 1) + 1 / (1 + np.exp(-np.exp(b)))


#: the schedules compared: the seed's default (one parallel loop per stage), X and Y fused
#: end to end, fused with their rows interleaved one by one
VARIANTS = ("default", "fused", "interleaved")


def build(kind: str, variant: str, N: int, M: int | None = None):
    """The module of ``variant`` (:data:`VARIANTS`) for M rows (None: any M, a variable;
    ``interleaved`` needs a constant)."""
    import kiln
    from kiln import te

    (A, B, X, Y, Z), reference = _workload(kind, te.var("M") if M is None else M, N)
    s = te.create_schedule(Z.op)
    if variant == "default":
        s[X].parallel(X.op.axis[0])
        s[Y].parallel(Y.op.axis[0])
    else:
        new = s.create_fused_loop([[X], [Y]], [X, Y], [X.shape[0], Y.shape[0]],
                                  interleave=1 if variant == "interleaved" else None)
        s[new[0]].parallel(new[0].op.loop_axis)
    return kiln.build(s, [A, B, Z], "llvm", name=f"{kind}_{variant}"), reference


def bench_point(mods: dict[str, Any], reference: Callable, M: int, N: int,
                cfg: dict[str, Any]) -> dict[str, float]:
    """Seconds per call of each module at ``M`` rows (results checked against numpy)."""
    import kiln

    rng = np.random.default_rng(M)
    a, b = (rng.random((M, N), dtype=np.float32) for _ in range(2))
    env = {"A": kiln.nd.array(a), "B": kiln.nd.array(b),
           "Z": kiln.nd.empty((M, N), "float32")}
    for name, mod in mods.items():
        mod(env["A"], env["B"], env["Z"])
        np.testing.assert_allclose(env["Z"].numpy(), reference(a, b), rtol=1e-5)
        env[name] = mod
    timings = common.interleaved({name: f"{name}(A, B, Z)" for name in mods}, env,
                                 repeat=cfg["repeat"], min_time=cfg["min_time"])
    return {name: t.median for name, t in timings.items()}


def bench_model(cfg: dict[str, Any], say) -> tuple[list[Figure], dict[str, Any]]:
    """The inception block built with and without horizontal fusion, and onnxruntime (as
    many intra-op threads as kiln's OpenMP), timed interleaved; outputs checked against
    onnxruntime."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.relay import testing
    from kiln.relay.testing.compare import onnxruntime_session

    model = testing.inception_block(**MODEL)
    name, x = testing.random_input(model)
    sess = onnxruntime_session(model, common.omp_threads())
    ref = sess.run(None, {name: x})[0]
    mod, params = relay.frontend.from_onnx(model)
    runs, kernels, errors = {}, {}, {}
    for label, config in (("horizontal", {}), ("separate", {"relay.horizontal_fusion": False})):
        say(f"inception block: building ({label} kernels)")
        with relay.build_config(opt_level=3, config=config):
            lib = relay.build(mod, target="llvm", params=params)
        m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
        m.set_input(name, x)
        m.run()
        errors[label] = float(np.abs(m.get_output(0).numpy() - ref).max())
        runs[label], kernels[label] = m.run, len(lib.plan["steps"])
    runs["onnxruntime"] = lambda: sess.run(None, {name: x})
    t = {k: v.median for k, v in common.interleaved(runs, repeat=cfg["repeat"],
                                                    min_time=cfg["min_time"]).items()}
    say("inception block: " + ", ".join(f"{k} {common.fmt_time(v)}" for k, v in t.items()))
    label = f"inception block (c={MODEL['c']}, {MODEL['hw']}x{MODEL['hw']})"
    figures = [
        Figure(key="inception.horizontal_vs_separate", label=f"{label}: horizontal fusion",
               kiln=t["horizontal"], unit="s", reference=t["separate"],
               reference_label="without the pass",
               notes=f"{kernels['horizontal']} vs {kernels['separate']} kernels"),
        Figure(key="inception.horizontal_vs_onnxruntime", label=f"{label}: horizontal fusion",
               kiln=t["horizontal"], unit="s", reference=t["onnxruntime"],
               reference_label="onnxruntime",
               notes=f"max |kiln - onnxruntime| {errors['horizontal']:.1e}"),
        Figure(key="inception.separate_vs_onnxruntime", label=f"{label}: without the pass",
               kiln=t["separate"], unit="s", reference=t["onnxruntime"],
               reference_label="onnxruntime",
               notes=f"max |kiln - onnxruntime| {errors['separate']:.1e}"),
    ]
    return figures, {"run_s": t, "kernels": kernels, "max_abs_error_vs_onnxruntime": errors}


def thread_counts() -> tuple:
    """1 and 2 threads; where threadpoolctl (the bench extra) is missing, the default
    count only."""
    return THREADS if importlib.util.find_spec("threadpoolctl") else ("default",)


def settings(quick: bool) -> dict[str, Any]:
    return {"N": 1 << 14 if quick else 1 << 20, "repeat": 5 if quick else 30,
            "min_time": 0.005 if quick else 0.05}


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    """Run the suite, write ``<out_dir>/fused.{json,md}`` and ``fused.png``, return the
    markdown."""
    started, t0 = time.time(), time.perf_counter()
    cfg = settings(quick)
    say = common.progress(NAME, verbose)
    load_start = common.load_average()
    figures: list[Figure] = []
    speedups: dict[str, list[float | None]] = {}
    for kind in ("balanced", "unbalanced"):
        say(f"{kind}: building")
        built = {name: build(kind, name, cfg["N"]) for name in VARIANTS[:2]}
        reference = built["fused"][1]
        interleaved = {M: build(kind, "interleaved", cfg["N"], M)[0] for M in ROWS}
        for threads in thread_counts():
            series = {variant: speedups.setdefault(f"kiln {kind} {variant}, {threads} "
                                                   f"thread(s)", []) for variant in VARIANTS[1:]}
            with common.threads_limited(threads) if threads != "default" else nullcontext():
                for M in ROWS:
                    mods = {name: mod for name, (mod, _) in built.items()}
                    mods["interleaved"] = interleaved[M]
                    t = bench_point(mods, reference, M, cfg["N"], cfg)
                    for variant in VARIANTS[1:]:
                        series[variant].append(t["default"] / t[variant])
                        figures.append(Figure(
                            key=f"{kind}.M{M}.threads{threads}"
                                + ("" if variant == "fused" else f".{variant}"),
                            label=f"{kind}, M={M}, {threads} thread(s): {variant}",
                            kiln=t[variant], unit="s", reference=t["default"],
                            reference_label="unfused"))
            for variant, values in series.items():
                say(f"{kind} {variant}, {threads} thread(s): speedups "
                    + " ".join(f"{v:.2f}" for v in values))
    model_figures, model_details = bench_model(cfg, say)
    figures += model_figures
    out = common.results_dir(out_dir)
    plot = common.plot_series(out / f"{NAME}.png", "create_fused_loop: unfused / fused time",
                              list(ROWS), speedups, xlabel="M (rows per stage)",
                              ylabel="speedup")
    _, md_path, text = common.write_report(
        NAME, figures, machine=common.machine_info(load_start), settings=cfg,
        details={"speedup_unfused_over_fused": speedups, "plot": str(plot) if plot else None,
                 "inception_block": model_details},
        started=started, duration_s=time.perf_counter() - t0, out_dir=out,
        title="Horizontal fusion (create_fused_loop)")
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION, "N = 2^14, 5 repeats (seconds)").parse_args(
        argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
