"""auto_scheduler suite (issue 21): a GEMM auto-scheduled from its computation alone,
against kiln's hand schedule and numpy.

``python -m benchmarks.auto_scheduler [--quick] [--trials N] [--size N]`` tunes ``C = A @ B``
(fp32, N = 512) with ``auto_scheduler`` (sketch rules, evolutionary search under
``kiln.cost.estimate``, every candidate measured and checked by AutoTVM's LocalRunner),
then rebuilds the best logged state, the hand schedule of examples/cpu/gemm.py and the
unscheduled computation in this process and times them with numpy's matmul, interleaved.
Writes ``results/auto_scheduler.json``/``.md`` and the tuning log
``results/auto_scheduler-gemm.json``. Nothing here asserts on timings.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/auto_scheduler.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import Figure  # noqa: E402

NAME = "auto_scheduler"
DESCRIPTION = ("auto_scheduler: GEMM 512 auto-scheduled for N trials vs kiln's hand "
               "schedule and numpy (issue 21)")


def _register():
    from kiln import auto_scheduler, te

    @auto_scheduler.register_workload("bench_as_matmul", override=True)
    def matmul(n: int):
        A = te.placeholder((n, n), name="A")
        B = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return [A, B, C]

    return matmul


def tune(n: int, trials: int, log: Path, say):
    """Tune GEMM ``n`` for ``trials`` measurements; the task and the search's seconds."""
    from kiln import auto_scheduler

    _register()
    task = auto_scheduler.SearchTask(func="bench_as_matmul", args=(n,), target="llvm")
    log.unlink(missing_ok=True)
    options = auto_scheduler.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=min(8, trials), verbose=1,
        runner=auto_scheduler.LocalRunner(number=2, repeat=3, min_repeat_ms=50, timeout=20),
        measure_callbacks=[auto_scheduler.RecordToFile(str(log))])
    start = time.perf_counter()
    task.tune(options, auto_scheduler.SketchPolicy(task, seed=0, verbose=1))
    say(f"tuned {trials} trials in {time.perf_counter() - start:.0f} s")
    return task, time.perf_counter() - start


def compare(task, n: int, log: Path, repeat: int) -> dict:
    """Best logged state, hand schedule, unscheduled and numpy, timed interleaved."""
    import kiln

    hand = common.load_example("cpu", "gemm").gemm_schedule(n)
    mods = {"auto_scheduler": kiln.build(*task.apply_best(str(log)), "llvm"),
            "hand": kiln.build(*hand, "llvm"),
            "unscheduled": kiln.build(*task.instantiate(None), "llvm")}
    rng = np.random.default_rng(0)
    a, b = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    env = {"np": np, "a": a, "b": b}
    stmts, correct = {"numpy": "np.matmul(a, b)"}, {}
    for key, mod in mods.items():
        out = kiln.nd.array(np.full((n, n), np.nan, np.float32))
        args = [kiln.nd.array(a), kiln.nd.array(b), out]
        mod(*args)
        correct[key] = bool(np.allclose(out.numpy(), a @ b, rtol=1e-3, atol=1e-3))
        env[f"mod_{key}"], env[f"args_{key}"] = mod, args
        stmts[key] = f"mod_{key}(*args_{key})"
    timings = common.interleaved(stmts, env, repeat=repeat, min_time=0.1, warmup=2)
    return {k: {"seconds": t.median, "gflops": 2 * n ** 3 / t.median / 1e9,
                "correct": correct.get(k, True), "timing": t.to_dict()}
            for k, t in timings.items()}


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, trials: int | None = None, size: int = 512) -> str:
    del profile
    started, t0 = time.time(), time.perf_counter()
    trials = trials or (16 if quick else 64)
    out = common.results_dir(out_dir)
    load_start = common.load_average()
    say = common.progress(NAME, verbose)
    log = out / f"{NAME}-gemm.json"
    task, search_s = tune(size, trials, log, say)
    res = compare(task, size, log, repeat=5 if quick else 15)
    label = f"GEMM {size} fp32"
    figures = [
        Figure(f"gemm{size}.vs_hand", f"{label}: auto_scheduler ({trials} trials) vs hand",
               res["auto_scheduler"]["seconds"], "s", res["hand"]["seconds"],
               "examples/cpu/gemm.py", "<= 1.0x hand",
               res["auto_scheduler"]["seconds"] <= res["hand"]["seconds"],
               f"{res['auto_scheduler']['gflops']:.1f} vs {res['hand']['gflops']:.1f} GFLOP/s"),
        Figure(f"gemm{size}.vs_numpy", f"{label}: auto_scheduler vs numpy",
               res["auto_scheduler"]["seconds"], "s", res["numpy"]["seconds"], "numpy",
               notes=f"numpy {res['numpy']['gflops']:.1f} GFLOP/s"),
        Figure(f"gemm{size}.unscheduled", f"{label}: unscheduled vs auto_scheduler",
               res["unscheduled"]["seconds"], "s", res["auto_scheduler"]["seconds"],
               "auto_scheduler"),
    ]
    machine = common.machine_info(load_start)
    machine["load_average_end"] = common.load_average()
    _, md_path, text = common.write_report(
        NAME, figures, machine=machine,
        settings={"size": size, "trials": trials, "search_s": round(search_s, 1)},
        details={"results": res, "correct": {k: v["correct"] for k, v in res.items()}},
        started=started, duration_s=time.perf_counter() - t0, out_dir=out,
        title="auto_scheduler")
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = common.suite_parser(NAME, DESCRIPTION, "16 trials")
    p.add_argument("--trials", type=int, default=None, help="measurements (default 64)")
    p.add_argument("--size", type=int, default=512, help="GEMM size N")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out, trials=args.trials, size=args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
