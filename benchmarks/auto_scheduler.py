"""auto_scheduler suite (issue 21): single operators auto-scheduled from their computation
alone, against kiln's hand-written topi schedules, and the best speed against trials beside
AutoTVM's XGB tuner.

``python -m benchmarks.auto_scheduler [--quick] [--trials N] [--ops gemm1024,...]
[--no-curve]`` tunes each operator of :data:`OPERATORS` (GEMM 1024 and 2048 as dense
layers, two ResNet-18 3x3 convolutions, a depthwise 3x3 convolution, a row sum and an
elementwise chain, fp32) with ``auto_scheduler`` for N trials (sketch rules, evolutionary
search, every candidate measured and checked by AutoTVM's LocalRunner), then rebuilds the
best logged state and the hand schedule (``kiln.topi.x86``) in this process, checks both
against numpy and times them interleaved. A weight the computation declares layout free
(the dense and conv weights) is timed re-laid out once beforehand
(``REWRITE_FOR_PRE_TRANSFORMED``, as ``relay.build`` does), as the hand schedules read
their weights as given. Each figure's note gives the search's own time of the best state
beside it: on a loaded machine a kernel of a few milliseconds times several-fold apart
from one moment to the next, and the search keeps its fastest measurement.

The curve: on GEMM 1024, the best GFLOP/s after each trial of the auto_scheduler search and
of AutoTVM's ``XGBTuner`` on topi's ``dense.x86`` template, as the measurements reported
them, for the same number of trials.

Writes ``results/auto_scheduler.json``/``.md`` and the tuning logs
``results/auto_scheduler-<op>.json``. Nothing here asserts on timings.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/auto_scheduler.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import Figure  # noqa: E402

NAME = "auto_scheduler"
DESCRIPTION = ("auto_scheduler: single operators auto-scheduled for N trials vs kiln's hand "
               "topi schedules, and best speed vs trials beside AutoTVM's XGB (issue 21)")


@dataclass(frozen=True)
class Operator:
    """One operator of the suite: its computation (``compute(*args)`` -> tensors, inputs
    then output), kiln's hand schedule of its output, and numpy's result of its inputs."""

    key: str
    label: str
    args: tuple
    compute: Callable[..., list]
    hand: Callable[[list], Any]
    hand_name: str
    reference: Callable[..., np.ndarray]


def _dense(m: int, n: int, k: int) -> list:
    from kiln import te, topi

    a = te.placeholder((m, k), name="A")
    w = te.placeholder((n, k), name="W")
    return [a, w, topi.nn.dense(a, w)]


def _conv2d(c: int, size: int, f: int) -> list:
    from kiln import te, topi

    data = te.placeholder((1, c, size, size), name="data")
    kernel = te.placeholder((f, c, 3, 3), name="kernel")
    return [data, kernel, topi.nn.conv2d_nchw(data, kernel, 1, 1, 1)]


def _depthwise(c: int, size: int) -> list:
    from kiln import te, topi

    data = te.placeholder((1, c, size, size), name="data")
    kernel = te.placeholder((c, 1, 3, 3), name="kernel")
    return [data, kernel, topi.nn.depthwise_conv2d_nchw(data, kernel, 1, 1, 1)]


def _row_sum(m: int, n: int) -> list:
    from kiln import te, topi

    a = te.placeholder((m, n), name="A")
    return [a, topi.sum(a, axis=1)]


def _elementwise_chain(m: int, n: int) -> list:
    from kiln import te, topi

    a, b, c = (te.placeholder((m, n), name=x) for x in "abc")
    return [a, b, c, topi.nn.relu(topi.add(topi.multiply(a, b), c))]


def _schedule(name: str) -> Callable[[list], Any]:
    def apply(outs: list):
        from kiln import topi

        return getattr(topi.x86, name)(outs)

    return apply


def _conv_ref(data: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    from benchmarks.ops import conv2d_truth

    return conv2d_truth(data[0], kernel, 1)[None]


def _depthwise_ref(data: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    from benchmarks.ops import depthwise_truth

    return depthwise_truth(data[0], kernel, 1)[None]


OPERATORS = {op.key: op for op in [
    Operator("gemm1024", "GEMM 1024 (dense, fp32)", (1024, 1024, 1024), _dense,
             _schedule("schedule_dense"), "topi.x86.schedule_dense", lambda a, w: a @ w.T),
    Operator("gemm2048", "GEMM 2048 (dense, fp32)", (2048, 2048, 2048), _dense,
             _schedule("schedule_dense"), "topi.x86.schedule_dense", lambda a, w: a @ w.T),
    Operator("conv64", "ResNet-18 conv2d 64@56x56, 3x3", (64, 56, 64), _conv2d,
             _schedule("schedule_conv2d_nchw"), "topi.x86.schedule_conv2d_nchw", _conv_ref),
    Operator("conv256", "ResNet-18 conv2d 256@14x14, 3x3", (256, 14, 256), _conv2d,
             _schedule("schedule_conv2d_nchw"), "topi.x86.schedule_conv2d_nchw", _conv_ref),
    Operator("depthwise", "depthwise conv2d 256@56x56, 3x3", (256, 56), _depthwise,
             _schedule("schedule_depthwise_conv2d_nchw"),
             "topi.x86.schedule_depthwise_conv2d_nchw", _depthwise_ref),
    Operator("row_sum", "row sum 1024x4096", (1024, 4096), _row_sum,
             _schedule("schedule_reduce"), "topi.x86.schedule_reduce",
             lambda a: a.sum(axis=1)),
    Operator("elementwise", "relu(a * b + c) 1024x4096", (1024, 4096), _elementwise_chain,
             _schedule("schedule_injective"), "topi.x86.schedule_injective",
             lambda a, b, c: np.maximum(a * b + c, 0)),
]}


def _task(op: Operator):
    from kiln import auto_scheduler

    auto_scheduler.register_workload(f"bench_as_{op.key}", override=True)(op.compute)
    return auto_scheduler.SearchTask(func=f"bench_as_{op.key}", args=op.args, target="llvm")


class _Curve:
    """A measure callback: the best GFLOP/s after each measured trial, and how many
    trials failed of each error (``MeasureErrorNo`` names: ``BUILD_TIMEOUT`` ...)."""

    def __init__(self, flops: float) -> None:
        self.flops, self.best, self.curve = flops, float("inf"), []
        self.errors: dict[str, int] = {}

    def callback(self, policy, inputs, results) -> None:
        from kiln.auto_scheduler import MeasureErrorNo

        for res in results:
            self.best = min(self.best, res.cost)
            self.curve.append(self.flops / self.best / 1e9 if self.best < float("inf") else 0)
            if res.error_no:
                name = MeasureErrorNo(res.error_no).name
                self.errors[name] = self.errors.get(name, 0) + 1


#: seconds a candidate may take to compile (a state within the sketch rules' unroll budget
#: compiles in 1-5 s on a loaded 2-core machine; one that does not is a failed trial)
BUILD_TIMEOUT = 10
#: how both searches time a candidate: the median of 3 timings of one call (at least
#: 50 ms); a candidate that has not finished its check and timings in 10 s fails
#: (a 0.5 s GEMM state took 7 calls, 10-15 s a trial, with 2 calls per timing)
RUNNER = {"number": 1, "repeat": 3, "min_repeat_ms": 50, "timeout": 10}


def tune(op: Operator, trials: int, log: Path, say,
         search_params: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Tune ``op`` for ``trials`` measurements (``search_params`` over the SketchPolicy's
    defaults); its task and the search's figures."""
    from kiln import auto_scheduler

    task = _task(op)
    log.unlink(missing_ok=True)
    curve = _Curve(task.compute_dag.flop_ct())
    options = auto_scheduler.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=min(16, trials), verbose=0,
        builder=auto_scheduler.LocalBuilder(timeout=BUILD_TIMEOUT),
        runner=auto_scheduler.LocalRunner(**RUNNER),
        measure_callbacks=[auto_scheduler.RecordToFile(str(log)), curve])
    start = time.perf_counter()
    policy = task.tune(options, auto_scheduler.SketchPolicy(task, params=search_params,
                                                            seed=0, verbose=0))
    seconds = time.perf_counter() - start
    n = max(1, len(curve.curve))
    say(f"{op.key}: {len(curve.curve)} trials in {seconds:.0f} s ("
        f"{policy.seconds['search'] / n:.1f} s choosing + {policy.seconds['measure'] / n:.1f}"
        f" s measuring a trial; failed: {curve.errors or 'none'}), best "
        f"{curve.curve[-1] if curve.curve else 0:.1f} GFLOP/s")
    return task, {"trials": len(curve.curve), "search_s": round(seconds, 1),
                  "choose_s_per_trial": round(policy.seconds["search"] / n, 2),
                  "measure_s_per_trial": round(policy.seconds["measure"] / n, 2),
                  "errors": curve.errors, "curve_gflops": curve.curve,
                  "best_measured_s": policy.best_cost,
                  "sketches": [str(s) for s in policy.sketches],
                  "best_state": str(policy.best_state)}


def autotvm_curve(op: Operator, trials: int, log: Path, say) -> dict[str, Any]:
    """AutoTVM's XGBTuner on topi's ``dense.x86`` template of ``op`` (a dense layer)."""
    from kiln import autotvm
    from kiln.topi.x86 import tunable

    a, w, _ = op.compute(*op.args)
    task = autotvm.task.create(tunable.DENSE, (a, w, "float32"), "llvm")
    log.unlink(missing_ok=True)
    tuner = autotvm.XGBTuner(task, plan_size=16, feature_type="itervar", loss_type="rank",
                             seed=0)
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(timeout=60),
        runner=autotvm.LocalRunner(**RUNNER))
    curve: list[float] = []

    def record(tuner_, inputs, results):
        curve.extend(tuner_.best_flops / 1e9 for _ in results)

    start = time.perf_counter()
    tuner.tune(min(trials, len(task.config_space)), option,
               callbacks=[autotvm.callback.log_to_file(str(log)), record])
    say(f"{op.key}: AutoTVM XGB {len(curve)} trials in {time.perf_counter() - start:.0f} s, "
        f"best {tuner.best_flops / 1e9:.1f} GFLOP/s")
    return {"trials": len(curve), "curve_gflops": curve,
            "space": len(task.config_space), "search_s": round(time.perf_counter() - start, 1)}


def compare(op: Operator, task, log: Path, repeat: int) -> dict[str, dict[str, Any]]:
    """The best logged state (its layout-free weights transformed beforehand) and the hand
    schedule, checked against numpy and timed interleaved."""
    import kiln
    from kiln.auto_scheduler import LayoutRewriteOption, load_best_record

    inp, _ = load_best_record(str(log), task.workload_key, task.target)
    pre = LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED
    tensors = op.compute(*op.args)
    mods = {"auto_scheduler": kiln.build(*task.apply_best(str(log), layout_rewrite_option=pre),
                                         "llvm"),
            "hand": kiln.build(op.hand(tensors[-1:]), tensors, "llvm")}
    rng = np.random.default_rng(0)
    inputs = [rng.random([int(d) for d in t.shape], dtype=np.float32) for t in tensors[:-1]]
    want = op.reference(*inputs)
    moved = {r.placeholder: r for r in task.compute_dag.layout_rewrites(inp.state)}
    auto_inputs = [moved[t.op.name].transform(x) if t.op.name in moved else x
                   for t, x in zip(tensors, inputs, strict=False)]
    env: dict[str, Any] = {}
    stmts, correct = {}, {}
    for key, mod in mods.items():
        out = kiln.nd.array(np.full(want.shape, np.nan, np.float32))
        args = [kiln.nd.array(x) for x in (auto_inputs if key == "auto_scheduler" else inputs)]
        mod(*args, out)
        correct[key] = bool(np.allclose(out.numpy(), want, rtol=1e-3, atol=1e-3))
        env[f"mod_{key}"], env[f"args_{key}"] = mod, [*args, out]
        stmts[key] = f"mod_{key}(*args_{key})"
    timings = common.interleaved(stmts, env, repeat=repeat, min_time=0.1, warmup=2)
    flops = task.compute_dag.flop_ct()
    return {k: {"seconds": t.median, "gflops": flops / t.median / 1e9, "correct": correct[k],
                "timing": t.to_dict()} for k, t in timings.items()}


def _curve_table(curves: dict[str, list[float]]) -> list[str]:
    """Markdown: the best GFLOP/s of each search at a few trial counts."""
    n = max((len(c) for c in curves.values()), default=0)
    marks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000) if k <= n} | {n})
    lines = ["| trials | " + " | ".join(curves) + " |",
             "|---|" + "---|" * len(curves)]
    for m in marks:
        cells = [f"{c[m - 1]:.1f}" if len(c) >= m else "—" for c in curves.values()]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, trials: int | None = None, ops: Sequence[str] | None = None,
        curve: bool = True) -> str:
    del profile
    started, t0 = time.time(), time.perf_counter()
    trials = trials or (16 if quick else 200)
    out = common.results_dir(out_dir)
    load_start = common.load_average()
    say = common.progress(NAME, verbose)
    chosen = [OPERATORS[k] for k in (ops or OPERATORS)]
    figures, details = [], {}
    for op in chosen:
        log = out / f"{NAME}-{op.key}.json"
        task, search = tune(op, trials, log, say)
        res = compare(op, task, log, repeat=5 if quick else 15)
        auto, hand = res["auto_scheduler"], res["hand"]
        details[op.key] = {"search": search, "results": res}
        figures.append(Figure(
            f"{op.key}.vs_hand", f"{op.label}: auto_scheduler ({trials} trials) vs hand",
            auto["seconds"], "s", hand["seconds"], op.hand_name, "<= 1.0x hand",
            auto["seconds"] <= hand["seconds"],
            f"{auto['gflops']:.1f} vs {hand['gflops']:.1f} GFLOP/s; the search timed "
            f"it at {search['best_measured_s'] * 1e3:.3g} ms; a trial "
            f"{search['choose_s_per_trial']} s choosing + {search['measure_s_per_trial']} s "
            f"measuring; failed {sum(search['errors'].values())}"
            + ("" if auto["correct"] and hand["correct"] else "; WRONG RESULT")))
    curves = {}
    if curve and "gemm1024" in [op.key for op in chosen]:
        curves["auto_scheduler"] = details["gemm1024"]["search"]["curve_gflops"]
        xgb = autotvm_curve(OPERATORS["gemm1024"], trials, out / f"{NAME}-gemm1024-xgb.log",
                            say)
        details["gemm1024"]["autotvm_xgb"] = xgb
        curves["AutoTVM XGB (dense.x86)"] = xgb["curve_gflops"]
    machine = common.machine_info(load_start)
    machine["load_average_end"] = common.load_average()
    _, md_path, text = common.write_report(
        NAME, figures, machine=machine, settings={"trials": trials, "ops": [o.key for o in chosen]},
        details=details, started=started, duration_s=time.perf_counter() - t0, out_dir=out,
        title="auto_scheduler")
    if curves:
        text += "\n## GEMM 1024: best GFLOP/s against trials\n\n" + "\n".join(
            _curve_table(curves)) + "\n"
        md_path.write_text(text)
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = common.suite_parser(NAME, DESCRIPTION, "16 trials per operator")
    p.add_argument("--trials", type=int, default=None,
                   help="measurements per operator (default 200)")
    p.add_argument("--ops", default=None,
                   help=f"comma-separated operators (default all: {','.join(OPERATORS)})")
    p.add_argument("--no-curve", action="store_true",
                   help="skip AutoTVM's XGB tuner on GEMM 1024")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out, trials=args.trials,
        ops=args.ops.split(",") if args.ops else None, curve=not args.no_curve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
