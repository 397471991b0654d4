"""The ``kiln`` command.

    kiln compile model.onnx [-o model.kiln] [--shape input=1,3,224,224] [--opt-level 3]
                 [--precision fp32|bf16]
    kiln run model.kiln [--input [NAME=]x.npy] [--output y.npy] [--repeat N]
    kiln bench model.onnx [--shape ...] [--repeat N] [--threads N]   # kiln vs onnxruntime
    kiln bench [SUITE ...] [--quick] [--list]                        # the benchmark suites
    kiln bench models --precision bf16             # bf16 vs fp32: accuracy and latency
    kiln model resnet18 [-o resnet18.onnx] [--hw 224]                # write a test model
    kiln tune model.onnx --budget 10m --log tune.json [--trials N] [--tuner xgb|ga|random]
              [--history OLD.json] [--dask tcp://scheduler:8786 [--dask-resource device:cpu]]
    kiln spacetime script.py:function [--shape N=64 ...] [--out fig.png]  # memory accesses
    kiln report assignment [--out DIR] [--quick]     # the assignment's operators, step by step
    kiln demo | kiln version

A mistake of the user's (missing file, not an ONNX model, malformed model, unknown input
name, wrong shape) is reported as one line on stderr and exit status 2; ``kiln bench
model.onnx`` exits with 1 when kiln's output differs from onnxruntime's. ``kiln bench``
with suite names runs the benchmark suites of a kiln source checkout (the ``benchmarks``
package beside ``kiln/``). See docs/cli.md.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

USAGE_ERROR = 2


class CliError(Exception):
    """A user error: printed as one line on stderr, exit status 2."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# ---------------------------------------------------------------------------------------
# loading and compiling an ONNX model
# ---------------------------------------------------------------------------------------


def _existing_file(path: str, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise CliError(f"{path}: no such file")
    if not p.is_file():
        raise CliError(f"{path}: is not a file ({what} expected)")
    return p


def _import_onnx():
    try:
        import onnx
    except ImportError:
        raise CliError("reading ONNX models needs the onnx package: "
                       "pip install 'kiln[onnx]'") from None
    return onnx


def load_onnx(path: str):
    """The ``onnx.ModelProto`` in file ``path``; CliError when it is missing or is not an
    ONNX model."""
    p = _existing_file(path, "an ONNX model")
    onnx = _import_onnx()
    try:
        model = onnx.load(str(p))
    except Exception as e:  # protobuf DecodeError and friends
        raise CliError(f"{path}: not an ONNX model file ({_one_line(e)})") from None
    if not model.HasField("graph") or model.ir_version == 0 or not model.opset_import:
        raise CliError(f"{path}: not an ONNX model file (no graph, IR version or opset)")
    return model


def graph_inputs(model) -> list[tuple[str, list[int | str], str]]:
    """``(name, shape, dtype)`` of each graph input that is not an initializer; a symbolic
    dimension is its name (a str), an unknown one ``"?"``."""
    from onnx import helper

    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "?"
        out.append((vi.name, shape, dtype))
    return out


def _dims(text: str, spec: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise CliError(f"--shape {spec}: dimensions must be integers, e.g. "
                       f"input=1,3,224,224") from None
    if not dims or any(d <= 0 for d in dims):
        raise CliError(f"--shape {spec}: dimensions must be positive integers")
    return dims


def parse_shapes(specs: list[str] | None, model) -> dict[str, tuple[int, ...]]:
    """``--shape NAME=D1,D2,...`` options (``--shape D1,D2,...`` for a one-input model),
    checked against the model's inputs: the name must exist and the rank match."""
    inputs = {name: shape for name, shape, _ in graph_inputs(model)}
    names = ", ".join(inputs) or "none"
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        name, sep, text = spec.rpartition("=")
        if not sep:
            if len(inputs) != 1:
                raise CliError(f"--shape {spec}: name the input (NAME=D1,D2,...); the model's "
                               f"inputs: {names}")
            name = next(iter(inputs))
        if name not in inputs:
            raise CliError(f"--shape {spec}: the model has no input {name!r} (inputs: {names})")
        dims = _dims(text, spec)
        declared = inputs[name]
        if declared and len(declared) != len(dims):
            raise CliError(f"--shape {spec}: input {name!r} has rank {len(declared)} "
                           f"(declared shape {_fmt_shape(declared)}), got {len(dims)} dims")
        shapes[name] = dims
    return shapes  # a symbolic dimension left out stays symbolic: one build for every size


def _fmt_shape(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def compile_model(model, shapes: dict | None = None, opt_level: int = 3, source: str = "model",
                  precision: str = "fp32"):
    """Import ``model`` with the input ``shapes`` and build it for the CPU in ``precision``
    (``"fp32"``, ``"bf16"``): the factory module of ``relay.build`` (its ``summary`` and
    ``build_seconds`` filled in). Import and build errors become CliError naming
    ``source``."""
    from kiln import relay
    from kiln.errors import TVMError

    try:
        mod, params = relay.frontend.from_onnx(model, shape=shapes or None)
        with relay.build_config(opt_level=opt_level):
            return relay.build(mod, target="llvm", params=params, precision=precision)
    except (NotImplementedError, ValueError, TypeError, KeyError, IndexError, TVMError) as e:
        raise CliError(f"cannot compile {source}: {_one_line(e)}") from None


# ---------------------------------------------------------------------------------------
# compiled model files
# ---------------------------------------------------------------------------------------


def load_compiled(path: str):
    """The factory module saved by ``kiln compile`` (``export_library``) in ``path``."""
    p = _existing_file(path, "a compiled model")
    try:
        with tarfile.open(p) as tf:
            names = set(tf.getnames())
    except (tarfile.TarError, OSError):
        raise CliError(f"{path}: not a compiled kiln model (make one with "
                       f"`kiln compile model.onnx -o {p.stem}.kiln`)") from None
    if not {"graph.json", "params.npz"} <= names:
        raise CliError(f"{path}: not a compiled kiln model (graph.json or params.npz missing)")
    from kiln import relay

    try:
        return relay.load_module(p)
    except (OSError, KeyError, ValueError, tarfile.TarError) as e:
        raise CliError(f"{path}: cannot load the compiled model ({_one_line(e)})") from None


def plan_inputs(factory) -> dict[str, tuple[tuple[int | str, ...], str]]:
    """Input name -> (shape, dtype) of a built or loaded model; a symbolic dimension is its
    name (``"batch"``)."""
    plan = factory.plan
    info = {t["input"]: (tuple(t["shape"]), t["dtype"]) for t in plan["tensors"]
            if "input" in t}
    return {name: info[name] for name in plan["inputs"]}


def random_inputs(factory, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs; a symbolic dimension is 1."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal([d if isinstance(d, int) else 1 for d in shape])
            .astype(dtype) for name, (shape, dtype) in plan_inputs(factory).items()}


def read_inputs(factory, specs: list[str] | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs from ``--input [NAME=]file.npy`` options, checked for name, shape and dtype
    kind (floats are converted to the input's float type); random for inputs not given."""
    expected = plan_inputs(factory)
    names = ", ".join(expected)
    arrays = random_inputs(factory, seed)
    for spec in specs or ():
        name, sep, path = spec.partition("=")
        if not sep:
            if len(expected) != 1:
                raise CliError(f"--input {spec}: name the input (NAME=file.npy); the model's "
                               f"inputs: {names}")
            name, path = next(iter(expected)), spec
        if name not in expected:
            raise CliError(f"--input {spec}: the model has no input {name!r} (inputs: {names})")
        _existing_file(path, "a .npy file")
        try:
            a = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise CliError(f"{path}: not a .npy array file ({_one_line(e)})") from None
        if not isinstance(a, np.ndarray):
            raise CliError(f"{path}: holds several arrays; save one array with np.save")
        shape, dtype = expected[name]
        if a.ndim != len(shape) or any(isinstance(d, int) and d != n
                                       for d, n in zip(shape, a.shape, strict=False)):
            raise CliError(f"input {name!r} expects shape {_fmt_shape(shape)} {dtype}; "
                           f"{path} holds {_fmt_shape(a.shape)} {a.dtype}")
        if a.dtype != np.dtype(dtype):
            if a.dtype.kind != np.dtype(dtype).kind:
                raise CliError(f"input {name!r} expects {dtype}; {path} holds {a.dtype}")
            a = a.astype(dtype)
        arrays[name] = np.ascontiguousarray(a)
    return arrays


def _graph_module(factory):
    import kiln
    from kiln.contrib import graph_executor

    return graph_executor.GraphModule(factory["default"](kiln.cpu(0)))


def _threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _set_threads(n: int | None) -> int:
    """Use ``n`` threads in kiln's kernels (OMP_NUM_THREADS, read when the first kernel
    library is loaded and by the x86 schedules) and return the count in use."""
    if n is not None:
        if n <= 0:
            raise CliError(f"--threads {n}: must be a positive integer")
        os.environ["OMP_NUM_THREADS"] = str(n)
    return _threads()


def _ms(seconds: float) -> str:
    """``12.34 ms`` / ``56.7 µs`` (``kiln run`` must not need onnx, so not compare's)."""
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


# ---------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------


def cmd_compile(args) -> int:
    model = load_onnx(args.model)
    shapes = parse_shapes(args.shape, model)
    out = Path(args.output) if args.output else Path(args.model).with_suffix(".kiln")
    if out.resolve() == Path(args.model).resolve():
        raise CliError(f"-o {out}: would overwrite the ONNX model")
    _set_threads(args.threads)
    lib = compile_model(model, shapes, args.opt_level, args.model, args.precision)
    try:
        lib.export_library(out)
    except OSError as e:
        raise CliError(f"cannot write {out}: {_one_line(e)}") from None
    if not args.quiet:
        print(lib.summary)
    size = out.stat().st_size / 1e6
    print(f"compiled {args.model} in {lib.build_seconds:.1f} s -> {out} ({size:.1f} MB)")
    return 0


def cmd_run(args) -> int:
    if args.repeat < 1:
        raise CliError(f"--repeat {args.repeat}: must be at least 1")
    factory = load_compiled(args.model)
    inputs = read_inputs(factory, args.input, args.seed)
    threads = _set_threads(args.threads)
    gm = _graph_module(factory)
    gm.set_input(**inputs)
    gm.run()  # warm-up (and the result)
    outputs = [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        gm.run()
        times.append(time.perf_counter() - t)
    given = {s.partition("=")[0] if "=" in s else next(iter(inputs)) for s in args.input or ()}
    for name, a in inputs.items():
        origin = "given" if name in given else f"random, seed {args.seed}"
        print(f"input  {name}: {_fmt_shape(a.shape)} {a.dtype} ({origin})")
    for i, y in enumerate(outputs):
        span = f", range [{y.min():.4g}, {y.max():.4g}]" if y.size else ""
        print(f"output {i}: {_fmt_shape(y.shape)} {y.dtype}{span}")
    print(f"latency: median {_ms(float(np.median(times)))}, min {_ms(min(times))} over "
          f"{args.repeat} runs ({threads} threads)")
    if args.output:
        if len(outputs) == 1:
            np.save(args.output, outputs[0])
        else:
            np.savez(args.output, **{f"output{i}": y for i, y in enumerate(outputs)})
        print(f"output written to {args.output}")
    return 0


def cmd_bench_model(args) -> int:
    from kiln.relay.testing import compare

    if args.repeat < 1:
        raise CliError(f"--repeat {args.repeat}: must be at least 1")
    model = load_onnx(args.model)
    shapes = parse_shapes(args.shape, model)
    threads = _set_threads(args.threads)
    lib = compile_model(model, shapes, args.opt_level, args.model)
    inputs = random_inputs(lib)
    kernels = len(lib.plan["steps"])
    shape_text = ", ".join(f"{n} {_fmt_shape(a.shape)} {a.dtype}" for n, a in inputs.items())
    print(f"{args.model}: compiled in {lib.build_seconds:.1f} s ({kernels} kernels); "
          f"input {shape_text}; {threads} threads")
    try:
        res = compare.against_onnxruntime(lib, model, inputs, threads, rounds=args.repeat)
    except ImportError as e:
        raise CliError(str(e)) from None
    except ValueError as e:  # output shapes differ
        print(f"check against onnxruntime: MISMATCH: {e}")
        return 1
    except Exception as e:  # onnxruntime's own errors (e.g. a shape it cannot take)
        raise CliError(f"onnxruntime cannot run {args.model}: {_one_line(e)}") from None
    print("\n".join(compare.report_lines(res, args.repeat)))
    return 0 if res["ok"] else 1


def _dask_client(address: str | None):
    """A ``distributed.Client`` of the Dask scheduler at ``address`` (a context manager;
    ``nullcontext(None)`` for None); CliError when nothing answers within 10 s."""
    if address is None:
        return contextlib.nullcontext(None)
    import distributed

    try:
        return distributed.Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as e:
        raise CliError(f"--dask {address}: cannot connect to the Dask scheduler "
                       f"({_one_line(e)})") from None


def cmd_tune(args) -> int:
    """``kiln tune model.onnx --budget 10m --log tune.json``: tune the model's kernels within
    the budget (kiln/autotvm/graph_tuning.py), then compile it untuned and with the log and
    compare both with onnxruntime."""
    from kiln import autotvm, relay
    from kiln.autotvm import graph_tuning
    from kiln.autotvm.measure.dask import require_distributed
    from kiln.errors import TVMError
    from kiln.relay.testing import compare

    try:
        budget = graph_tuning.parse_budget(args.budget)
    except ValueError as e:
        raise CliError(f"--budget: {e}") from None
    if args.trials < 1:
        raise CliError(f"--trials {args.trials}: must be at least 1")
    if args.early_stopping is not None and args.early_stopping < 1:
        raise CliError(f"--early-stopping {args.early_stopping}: must be at least 1")
    if args.repeat < 1:
        raise CliError(f"--repeat {args.repeat}: must be at least 1")
    log = Path(args.log)
    if not log.parent.is_dir():
        raise CliError(f"--log {args.log}: folder {log.parent} does not exist")
    if args.min_seed_records < 1:
        raise CliError(f"--min-seed-records {args.min_seed_records}: must be at least 1")
    if args.dask is not None:
        try:
            require_distributed()
        except ImportError as e:
            raise CliError(f"--dask: {e}") from None
    history = []
    for h in args.history or ():
        if not Path(h).is_file():
            raise CliError(f"--history {h}: no such file")
        try:
            history += autotvm.record.load_from_file(h)
        except UnicodeDecodeError:
            raise CliError(f"--history {h}: not a kiln tuning log (not text)") from None
        except ValueError as e:  # names the file and line
            raise CliError(f"--history {_one_line(e)}") from None
    model = load_onnx(args.model)
    shapes = parse_shapes(args.shape, model)
    threads = _set_threads(args.threads)
    try:
        mod, params = relay.frontend.from_onnx(model, shape=shapes or None)
        with relay.build_config(opt_level=args.opt_level):
            tasks = autotvm.task.extract_from_program(mod, params, "llvm")
    except (NotImplementedError, ValueError, TypeError, KeyError, IndexError, TVMError) as e:
        raise CliError(f"cannot compile {args.model}: {_one_line(e)}") from None
    kernels = sum(getattr(t, "num_uses", 1) for t in tasks)
    print(f"{args.model}: {len(tasks)} tuning tasks for {kernels} kernels; budget "
          f"{budget:.0f} s, {args.tuner} tuner, up to {args.trials} trials per task; "
          f"{threads} threads; log {log}{' (appending)' if log.exists() else ''}"
          + (f"; {len(history)} history records" if args.history else "")
          + (f"; measuring on the Dask cluster at {args.dask} ({args.dask_resource})"
             if args.dask else ""))
    best = log.with_name(f"{log.stem}.best{log.suffix or '.json'}")
    start = time.monotonic()
    with _dask_client(args.dask) as client:
        option = graph_tuning.default_measure_option(client, args.dask_resource)
        graph_tuning.tune_tasks(tasks, str(log), budget, option=option, tuner=args.tuner,
                                n_trial=args.trials, early_stopping=args.early_stopping,
                                best_file=str(best), history=history or None,
                                min_seed_records=args.min_seed_records)
    print(f"tuning took {time.monotonic() - start:.0f} s; every trial in {log}, the verified "
          f"best config of each task in {best}")
    untuned = compile_model(model, shapes, args.opt_level, args.model)
    quiet = logging.getLogger("autotvm")
    level, quiet.level = quiet.level, logging.ERROR  # skipped tasks: no "Cannot find config"
    try:
        with autotvm.apply_history_best(str(best)):
            tuned = compile_model(model, shapes, args.opt_level, args.model)
    finally:
        quiet.setLevel(level)
    used = sum("(autotvm: " in line for line in tuned.summary.splitlines())
    print(f"compiled with {best}: {used} of {len(tuned.plan['steps'])} kernels use tuned "
          f"configs ({kernels - used} tunable kernels left untuned use the hand schedule)")
    inputs = random_inputs(untuned)
    runs = {"kiln untuned": _graph_module(untuned), "kiln tuned": _graph_module(tuned)}
    for gm in runs.values():
        gm.set_input(**inputs)
        gm.run()
    fns = {name: gm.run for name, gm in runs.items()}
    ok = True
    try:
        sess = compare.onnxruntime_session(model, threads)
        ref = sess.run(None, inputs)[0]
    except ImportError:
        print("onnxruntime is not installed: no check, no comparison")
    else:
        fns["onnxruntime"] = lambda: sess.run(None, inputs)
        for name, gm in runs.items():
            d = compare.differences(gm.get_output(0).numpy(), ref)
            ok = ok and compare.close(d)
            print(f"check {name} against onnxruntime: max abs diff {d['max_abs']:.2e} "
                  f"(outputs up to {d['ref_max']:.4g}): "
                  f"{'ok' if compare.close(d) else 'MISMATCH'}")
    if not ok:
        return 1
    times = compare.interleaved_medians(fns, rounds=args.repeat)
    med = {k: compare.median(v) for k, v in times.items()}
    print(f"latency, median of {args.repeat} interleaved rounds ({threads} threads):")
    for name, s in med.items():
        print(f"  {name:13} {compare.fmt_time(s):>10}  "
              f"({med['kiln untuned'] / s:.2f}x the untuned speed)")
    return 0


def cmd_model(args) -> int:
    _import_onnx()
    from kiln.relay import testing

    if args.list:
        for name, fn in testing.MODELS.items():
            first = (fn.__doc__ or "").strip().split("\n\n")[0]
            print(f"{name:26} {' '.join(first.split()).rstrip('.')}")
        return 0
    if not args.name:
        raise CliError("name a model (kiln model --list shows them)")
    kwargs = {k: v for k, v in (("hw", args.hw), ("batch", args.batch)) if v is not None}
    try:
        model = testing.get_model(args.name, **kwargs)
    except KeyError as e:
        raise CliError(str(e.args[0])) from None
    except TypeError:
        raise CliError(f"model {args.name!r} takes no --hw/--batch") from None
    out = args.output or f"{args.name}.onnx"
    Path(out).write_bytes(model.SerializeToString())
    ins = ", ".join(f"{n} {_fmt_shape(s)}" for n, s, _ in graph_inputs(model))
    print(f"wrote {out}: {args.name}, input {ins}")
    return 0


def _bench_suites(args: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "__init__.py").exists():
        print("kiln bench: the benchmarks/ folder of a kiln checkout was not found next to "
              f"{root / 'kiln'}; run it from a source checkout", file=sys.stderr)
        return USAGE_ERROR
    sys.path.insert(0, str(root))
    from benchmarks.run import main as bench_main

    return bench_main(args)


def _is_model_path(arg: str) -> bool:
    """Whether ``kiln bench`` got a model (an ``.onnx`` name or an existing file) rather than
    suite names; a folder, such as the value of ``--out``, is not one."""
    return not arg.startswith("-") and (arg.endswith(".onnx") or os.path.isfile(arg))


# ---------------------------------------------------------------------------------------
# argument parsing
# ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kiln", description="kiln tensor compiler")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def shape_opts(sp):
        sp.add_argument("--shape", action="append", metavar="NAME=D1,D2,...",
                        help="input shape (repeat for several inputs), e.g. "
                             "input=1,3,224,224; a symbolic dimension not given stays "
                             "symbolic")
        sp.add_argument("--opt-level", type=int, default=3, choices=range(4),
                        metavar="{0,1,2,3}", help="graph optimization level (default 3)")

    def threads_opt(sp):
        sp.add_argument("--threads", type=int, default=None,
                        help="threads for kiln's kernels (default: OMP_NUM_THREADS or all "
                             "available CPUs)")

    c = sub.add_parser("compile", help="compile an ONNX model to a .kiln file")
    c.add_argument("model", help="the ONNX model file")
    c.add_argument("-o", "--output", help="the compiled model (default: MODEL with .kiln)")
    shape_opts(c)
    threads_opt(c)
    c.add_argument("-q", "--quiet", action="store_true", help="do not print the kernels")
    c.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                   help="bf16: convolutions and dense layers in bf16 with fp32 accumulation "
                        "(CPUs with AVX-512 BF16; docs/precision.md)")

    r = sub.add_parser("run", help="run a compiled .kiln model and time it")
    r.add_argument("model", help="the compiled model (from kiln compile)")
    r.add_argument("--input", action="append", metavar="[NAME=]FILE.npy",
                   help="an input array (default: random standard-normal)")
    r.add_argument("--output", metavar="FILE.npy", help="save the output here")
    r.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    threads_opt(r)

    b = sub.add_parser("bench", help="kiln vs onnxruntime on an ONNX model, or run the "
                                     "benchmark suites (kiln bench --list)")
    b.add_argument("model", help="the ONNX model file")
    shape_opts(b)
    b.add_argument("--repeat", type=int, default=10, help="interleaved rounds (default 10)")
    threads_opt(b)

    m = sub.add_parser("model", help="write one of kiln.relay.testing's ONNX models")
    m.add_argument("name", nargs="?", help="e.g. resnet18, mobilenet_v2 (--list for all)")
    m.add_argument("-o", "--output", help="file to write (default: NAME.onnx)")
    m.add_argument("--hw", type=int, help="input height and width (networks)")
    m.add_argument("--batch", type=int, help="batch size (networks)")
    m.add_argument("--list", action="store_true", help="list the models")

    tu = sub.add_parser("tune", help="tune an ONNX model's kernels within a time budget "
                                     "(autotvm) and compare untuned, tuned and onnxruntime")
    tu.add_argument("model", help="the ONNX model file")
    tu.add_argument("--budget", default="10m", help="tuning time in all, e.g. 10m, 90s, 1h "
                                                    "(default 10m)")
    tu.add_argument("--log", default="tune.json", help="tuning log to append to (default "
                                                       "tune.json)")
    tu.add_argument("--trials", type=int, default=200, help="most trials per task (default 200)")
    tu.add_argument("--tuner", default="xgb", choices=("xgb", "ga", "random", "grid"),
                    help="search strategy (default xgb)")
    tu.add_argument("--early-stopping", type=int, default=None, metavar="N",
                    help="stop a task after N trials without improvement")
    tu.add_argument("--repeat", type=int, default=10, help="interleaved timing rounds "
                                                           "(default 10)")
    tu.add_argument("--history", action="append", metavar="LOG",
                    help="log of earlier tuning (repeatable): configs measured before are "
                         "skipped and the xgb cost model starts from them (transfer "
                         "learning); e.g. the --log of an earlier run")
    tu.add_argument("--min-seed-records", type=int, default=500, metavar="N",
                    help="records of a template the xgb model needs from --history before "
                         "it trains on them (default 500, as in TVM)")
    tu.add_argument("--dask", metavar="ADDRESS",
                    help="build and measure on the Dask cluster whose scheduler listens at "
                         "ADDRESS, e.g. tcp://scheduler:8786 (needs kiln[dask])")
    tu.add_argument("--dask-resource", default="device:cpu", metavar="NAME",
                    help="the Dask worker resource of a measuring device (default "
                         "device:cpu: workers started with --resources device:cpu=1)")
    shape_opts(tu)
    threads_opt(tu)

    sp = sub.add_parser("spacetime", help="trace a schedule's memory accesses: space-time "
                                          "diagram, cache misses, GPU coalescing")
    sp.add_argument("function", help="script.py:function returning (schedule, args)")
    sp.add_argument("--shape", action="append", metavar="NAME=N",
                    help="an argument of the function or a symbolic dimension (repeatable)")
    sp.add_argument("--out", help="write the diagram here (.png, .svg, .pdf)")
    sp.add_argument("--color", choices=("access", "thread"), default="access",
                    help="colour dots by read/write (default) or by thread")
    sp.add_argument("--window", nargs=2, type=int, metavar=("START", "STOP"),
                    help="only the steps START..STOP-1")
    sp.add_argument("--sample", type=int, default=1, help="keep every N-th step")
    threads_opt(sp)

    rp = sub.add_parser("report", help="the course assignment's operators step by step: "
                                       "checked, timed, diffed and drawn (Markdown, HTML)")
    rp.add_argument("which", choices=("assignment",), help="the report to write")
    rp.add_argument("--out", default="assignment_report",
                    help="folder of report.md, report.html and figures/ (default "
                         "assignment_report)")
    rp.add_argument("--quick", action="store_true",
                    help="small sizes and few timing runs instead of the course's")
    rp.add_argument("--operator", action="append", metavar="NAME",
                    help="only this operator (repeatable): conv1d_cpu, conv1d_gpu, "
                         "gemm_gpu, dwsp_conv2d_gpu, conv1d_fpga (on the VTA simulator)")
    rp.add_argument("--trials", type=int, default=None,
                    help="AutoTVM configs measured per operator (default 16, --quick 4)")

    sub.add_parser("demo", help="the demo: a vector add, then ResNet-18 vs onnxruntime")
    sub.add_parser("version", help="print kiln's version")
    return p


def cmd_spacetime(args) -> int:
    from kiln.contrib.spacetime import command

    try:
        text = command.run(args.function, args.shape, args.out, color=args.color,
                           threads=args.threads, sample=args.sample,
                           window=tuple(args.window) if args.window else None)
    except (ValueError, ImportError) as e:
        raise CliError(_one_line(e)) from None
    print(text)
    if args.out:
        print(f"diagram written to {args.out}")
    return 0


def cmd_report(args) -> int:
    from kiln.contrib.report import assignment_report

    try:
        path = assignment_report(args.out, quick=args.quick, operators=args.operator,
                                 trials=args.trials)
    except (ValueError, FileNotFoundError) as e:
        raise CliError(_one_line(e)) from None
    print(path.read_text().split("\n## ")[0].rstrip())
    print(f"report written to {path} and {path.with_suffix('.html')}")
    return 0


COMMANDS = {"compile": cmd_compile, "run": cmd_run, "bench": cmd_bench_model,
            "model": cmd_model, "tune": cmd_tune, "spacetime": cmd_spacetime,
            "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not argv:
        parser.print_help()
        return USAGE_ERROR
    command, rest = argv[0], argv[1:]
    if command == "bench" and not any(_is_model_path(a) for a in rest):
        return _bench_suites(rest)
    args = parser.parse_args(argv)  # exits with status 2 on a usage error
    if args.command == "version":
        import kiln

        print(kiln.__version__)
        return 0
    if args.command == "demo":
        from kiln import demo

        return demo.main([]) or 0
    try:
        return COMMANDS[args.command](args)
    except CliError as e:
        print(f"kiln {args.command}: error: {e}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
