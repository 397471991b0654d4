"""GPU auto_scheduler suite (issues 21 and 22): schedules searched from the computation alone
on ``cuda(0)``, against kiln's hand-written CUDA schedule and PyTorch.

Each workload is tuned with ``auto_scheduler`` (GPU sketches: multi-level tiling with shared
memory cache reads, cross-thread reduction; evolutionary search) for a bounded number of
trials, every candidate built by NVRTC in several processes and timed with CUDA events after
its result was checked against the unscheduled computation. Then the best logged state, the
hand schedule and PyTorch (TF32 off) are timed interleaved in this process:

* ``gemm``: SGEMM 1024^3 (``C = A @ B``); hand: ``matmul.cuda``'s fallback config;
* ``rownorm``: the L2 norm of each of 1024 rows of 4096 (a long reduction, few outputs);
  hand: ``topi.cuda.schedule_reduce``.

Tuning runs first for every workload, timing after: the builder forks, and a process that
has used the GPU is not forked. Without a GPU the hand schedules and a random state of each
sketch are compiled with NVRTC and nothing is timed.

``python -m benchmarks gpu_autoschedule`` or ``python -m benchmarks.gpu_autoschedule
[--trials N] [--workloads gemm,rownorm] [--out DIR]``.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common, gpu  # noqa: E402

NAME = "gpu_autoschedule"
DESCRIPTION = "CUDA auto_scheduler: SGEMM 1024 and a row norm, vs hand schedules and PyTorch"
DEFAULT_TRIALS = 64
WORKLOADS = ("gemm", "rownorm")
GEMM_N = 1024
ROWS, COLS = 1024, 4096


def _register() -> None:
    from kiln import auto_scheduler, te

    @auto_scheduler.register_workload
    def bench_gpu_matmul(n: int):
        A = te.placeholder((n, n), name="A")
        B = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        return [A, B, te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k),
                                 name="C")]

    @auto_scheduler.register_workload
    def bench_gpu_row_norm(m: int, n: int):
        A = te.placeholder((m, n), name="A")
        k = te.reduce_axis((0, n), name="k")
        sq = te.compute((m,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="sq")
        return [A, te.compute((m,), lambda i: te.sqrt(sq[i]), name="norm")]


def make_task(key: str) -> dict[str, Any]:
    """The search task of workload ``key``, its label, flop count, PyTorch reference and
    hand schedule (a function returning ``(schedule, args)``)."""
    from kiln import auto_scheduler, autotvm, te, topi
    from kiln.autotvm.task.space import FallbackConfigEntity
    from kiln.topi.cuda.dense import MATMUL

    if key == "gemm":
        n = GEMM_N

        def hand():
            task = autotvm.task.create(MATMUL, (n, n, n, "float32"), target="cuda")
            return task.instantiate(FallbackConfigEntity())

        return {"task": auto_scheduler.SearchTask(func="bench_gpu_matmul", args=(n,),
                                                  target="cuda"),
                "label": f"SGEMM {n}³", "flop": 2 * n ** 3, "hand": hand,
                "hand_label": "matmul.cuda fallback",
                "torch": lambda t, a, b: t.matmul(a, b)}

    def hand_norm():
        A = te.placeholder((ROWS, COLS), name="A")
        k = te.reduce_axis((0, COLS), name="k")
        sq = te.compute((ROWS,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="sq")
        norm = te.compute((ROWS,), lambda i: te.sqrt(sq[i]), name="norm")
        return topi.cuda.schedule_reduce([norm]), [A, norm]

    return {"task": auto_scheduler.SearchTask(func="bench_gpu_row_norm", args=(ROWS, COLS),
                                              target="cuda"),
            "label": f"row L2 norm {ROWS}x{COLS}", "flop": 2 * ROWS * COLS,
            "hand": hand_norm, "hand_label": "topi.cuda.schedule_reduce",
            "torch": lambda t, a: t.linalg.vector_norm(a, dim=1)}


def tune(task, trials: int, log: Path, say) -> dict[str, Any]:
    """Search ``task`` for ``trials`` measured states, appending records to ``log``."""
    from kiln import auto_scheduler

    log.unlink(missing_ok=True)
    options = auto_scheduler.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=min(16, trials), verbose=0,
        builder=auto_scheduler.LocalBuilder(n_parallel=os.cpu_count() or 2, timeout=60),
        runner=auto_scheduler.LocalRunner(number=5, repeat=3, min_repeat_ms=0, timeout=30),
        measure_callbacks=[auto_scheduler.RecordToFile(str(log))])
    start = time.perf_counter()
    task.tune(options)
    errors: dict[str, int] = {}
    for _, r in auto_scheduler.load_records(str(log)):
        kind = auto_scheduler.MeasureErrorNo(r.error_no).name
        errors[kind] = errors.get(kind, 0) + 1
    secs = time.perf_counter() - start
    say(f"{task.workload_key}: {trials} trials in {secs:.0f} s ({errors})")
    return {"trials": trials, "seconds": round(secs, 1), "results": errors}


def compile_only(w: dict[str, Any]) -> str:
    """Without a GPU: the hand schedule and a random state of each GPU sketch built for
    sm_90 (NVRTC), or lowered where NVRTC is missing."""
    from kiln.auto_scheduler.annotation import sample_candidate
    from kiln.auto_scheduler.sketch import generate_sketches

    task = w["task"]
    rng = random.Random(0)
    builds = [w["hand"]()]
    for sketch in generate_sketches(task.compute_dag, "cuda"):
        builds.append(task.compute_dag.apply_steps_from_state(
            sample_candidate([sketch], rng).state(sketch)))
    return gpu.compile_only({"parts": [{"sched": s, "args": a} for s, a in builds]})


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, trials: int | None = None,
        workloads: Sequence[str] = WORKLOADS) -> str:
    import kiln

    del profile
    say = common.progress(NAME, verbose)
    started, t0 = time.time(), time.perf_counter()
    trials = trials or (16 if quick else DEFAULT_TRIALS)
    _register()
    try:
        import torch
    except ImportError:
        torch = None
    # asked of the driver without initialising a context: the builder forks while tuning
    have_gpu = kiln.cuda(0).exist and torch is not None and torch.cuda.is_available()
    results = common.results_dir(out_dir)
    tasks = {key: make_task(key) for key in workloads}
    figures, details = [], {}
    if have_gpu:
        for key, w in tasks.items():
            details[key] = {"tuning": tune(w["task"], trials, results / f"{NAME}.{key}.json",
                                           say)}
        torch, have_gpu = gpu.torch_on_gpu()  # TF32 off for the references
    for key, w in tasks.items():
        if not have_gpu:
            figures.append(common.Figure(key, w["label"], None, "s", notes=compile_only(w)))
            continue
        sched, args = w["task"].apply_best(str(results / f"{NAME}.{key}.json"))
        searched = gpu.measure({"sched": sched, "args": args, "torch": w["torch"],
                                "flop": w["flop"]}, torch, 5 if quick else 11)
        hand_sched, hand_args = w["hand"]()
        hand = gpu.measure({"sched": hand_sched, "args": hand_args, "torch": w["torch"],
                            "flop": w["flop"]}, torch, 5 if quick else 11)
        details[key].update(auto_scheduler=searched, hand=hand)
        notes = (f"{searched['kiln_gflops']:.0f} GFLOP/s; {w['hand_label']} "
                 f"{hand['kiln_s'] * 1e6:.1f} us ({hand['kiln_s'] / searched['kiln_s']:.2f}x "
                 f"the searched one's time)")
        if not (searched["correct"] and hand["correct"]):
            notes += "; WRONG RESULT"
        figures.append(common.Figure(key, f"{w['label']}, auto_scheduler ({trials} trials)",
                                     searched["kiln_s"], "s", reference=searched["torch_s"],
                                     reference_label="PyTorch", notes=notes))
    return gpu.write_gpu_report(NAME, figures, torch, have_gpu,
                                settings={"trials": trials, "quick": quick},
                                details=details, started=started, t0=t0, out_dir=out_dir,
                                title="GPU auto_scheduler (CUDA)", verbose=verbose)


def main(argv: Sequence[str] | None = None) -> int:
    args = common.parse_tuning_args(
        common.tuning_parser(NAME, DESCRIPTION, DEFAULT_TRIALS, WORKLOADS), argv, WORKLOADS)
    run(quick=args.quick, out_dir=args.out, trials=args.trials, workloads=args.workloads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
