"""GPU tuning suite: AutoTVM on CUDA (issue 22, part 4).

Tunes two templates for a bounded number of trials each, measuring every candidate on
``cuda(0)`` (LocalBuilder compiling with NVRTC in several processes, LocalRunner timing with
CUDA events after checking each candidate against the fallback's output):

* ``conv2d_nchw.cuda`` (direct) and ``conv2d_nchw_implicit_gemm.cuda`` on ResNet-18's 3x3
  layer 1x64x56x56, 64 filters, padding 1;
* ``matmul.cuda``, SGEMM 4096^3.

Then the untuned (fallback) config, the best tuned config (``apply_history_best`` on the
log) and PyTorch (cuDNN / cuBLAS, TF32 off) are timed interleaved in this process, median of
repeats, the tuned kernel's result checked against PyTorch. The tuning logs are written to
the results directory (``gpu_tuning.<workload>.log.json``). Tuning runs first for every
workload, timing after: the builder forks, and a process that has used the GPU is not forked.

Without a GPU (or PyTorch's CUDA build) the fallback configs are compiled with NVRTC and the
report says "not timed".

``python -m benchmarks gpu_tuning`` or ``python -m benchmarks.gpu_tuning [--trials N]
[--tuner xgb|ga|random] [--workloads conv2d,conv2d_gemm,gemm] [--out DIR]``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common, gpu  # noqa: E402

NAME = "gpu_tuning"
DESCRIPTION = "CUDA AutoTVM: tune ResNet-18 conv2d and SGEMM 4096, vs fallback and PyTorch"
DEFAULT_TRIALS = 48
WORKLOADS = ("conv2d", "conv2d_gemm", "gemm")


def make_task(key: str):
    """The tuning task and PyTorch reference of workload ``key``."""
    from kiln import autotvm, te
    from kiln.topi.cuda.conv2d import CONV2D_NCHW
    from kiln.topi.cuda.conv2d_gemm import CONV2D_GEMM
    from kiln.topi.cuda.dense import MATMUL

    if key in ("conv2d", "conv2d_gemm"):
        data = te.placeholder((1, 64, 56, 56), name="data")
        kernel = te.placeholder((64, 64, 3, 3), name="kernel")
        template = CONV2D_NCHW if key == "conv2d" else CONV2D_GEMM
        task = autotvm.task.create(template, (data, kernel, (1, 1), (1, 1), (1, 1),
                                              "float32"), target="cuda")
        return task, f"ResNet-18 conv2d 1x64x56x56, 64 3x3 filters ({template})", \
            lambda t, x, w: t.nn.functional.conv2d(x, w, padding=1)
    n = 4096
    task = autotvm.task.create(MATMUL, (n, n, n, "float32"), target="cuda")
    return task, f"SGEMM {n}³", lambda t, a, b: t.matmul(a, b)


def _log(results: Path, key: str) -> Path:
    return results / f"{NAME}.{key}.log.json"


def make_tuner(name: str, task):
    from kiln import autotvm

    if name == "xgb":
        return autotvm.XGBTuner(task, plan_size=16, feature_type="knob")
    if name == "ga":
        return autotvm.GATuner(task, pop_size=16)
    if name == "random":
        return autotvm.RandomTuner(task, seed=0)
    raise ValueError(f"unknown tuner {name!r} (xgb, ga, random)")


def tune(task, trials: int, tuner: str, log: Path, say: Callable[[str], None]) -> dict:
    """Tune ``task`` for ``trials`` candidates, appending records to ``log``; returns how it
    went (errors by kind, seconds)."""
    from kiln import autotvm
    from kiln.autotvm.graph_tuning import hand_config_index, measure_first

    log.unlink(missing_ok=True)
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(timeout=30, n_parallel=os.cpu_count()),
        runner=autotvm.LocalRunner(number=5, repeat=3, timeout=20))
    errors: dict[str, int] = {}

    def count(_tuner, _inputs, results) -> None:
        for r in results:
            kind = autotvm.MeasureErrorNo(r.error_no).name
            errors[kind] = errors.get(kind, 0) + 1

    start = time.perf_counter()
    t = make_tuner(tuner, task)
    hand = hand_config_index(task)
    if hand is not None:  # the fallback is measured too: tuning never ends slower than it
        measure_first(t, hand)
    t.tune(trials, option, callbacks=[
        count, autotvm.callback.log_to_file(str(log))])
    secs = time.perf_counter() - start
    say(f"{task.name}: {trials} trials in {secs:.0f} s ({errors})")
    return {"trials": trials, "seconds": round(secs, 1), "results": errors}


def build_config(task, log: Path | None):
    """``(module, args)`` of ``task`` with the best config of ``log`` (the fallback config
    without a log)."""
    import kiln
    from kiln import autotvm
    from kiln.autotvm.task.space import FallbackConfigEntity

    if log is None:
        sched, args = task.instantiate(FallbackConfigEntity())
    else:
        with autotvm.apply_history_best(str(log)):
            sched, args = task.instantiate()
    return kiln.build(sched, args, target="cuda"), args


def best_config(log: Path) -> str:
    from kiln import autotvm

    best = autotvm.ApplyHistoryBest(str(log)).best_by_workload
    return "; ".join(f"{cfg} ({cost * 1e3:.3f} ms)" for cfg, cost in best.values())


def measure(task, log: Path, reference, torch, repeat: int) -> dict[str, Any]:
    """Fallback, tuned and PyTorch timed interleaved (median of ``repeat``); the tuned
    kernel's output checked against PyTorch."""
    import kiln

    dev = kiln.cuda(0)
    fallback, args = build_config(task, None)
    tuned, _ = build_config(task, log)
    rng = np.random.default_rng(0)
    host = [rng.standard_normal([int(d) for d in t.shape]).astype("float32") for t in args]
    arrays = [kiln.nd.array(h, dev) for h in host]
    tuned(*arrays)
    ins = [torch.from_numpy(h).cuda() for h in host[:-1]]
    with torch.no_grad():
        ref = reference(torch, *ins).cpu().numpy()
    err = float(np.max(np.abs(arrays[-1].numpy() - ref)) / max(1.0, float(np.abs(ref).max())))
    timers = {name: mod.time_evaluator(mod.entry_name, dev, number=10, repeat=1)
              for name, mod in (("fallback", fallback), ("tuned", tuned))}
    times: dict[str, list[float]] = {"fallback": [], "tuned": [], "torch": []}
    with torch.no_grad():
        for _ in range(repeat):
            for name, timer in timers.items():
                times[name].append(timer(*arrays).mean)
            times["torch"].append(gpu.cuda_time(lambda: reference(torch, *ins), torch, 10))
    out = {f"{k}_s": statistics.median(v) for k, v in times.items()}
    out.update(max_rel_err=err, correct=err < 1e-3,
               gflops={k: task.flop / out[f"{k}_s"] / 1e9 for k in times})
    return out


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, trials: int | None = None, tuner: str = "xgb",
        workloads: Sequence[str] = WORKLOADS) -> str:
    import kiln
    from kiln.autotvm.task.space import FallbackConfigEntity
    from kiln.runtime import cuda_driver

    del profile
    say = common.progress(NAME, verbose)
    started, t0 = time.time(), time.perf_counter()
    trials = trials or (16 if quick else DEFAULT_TRIALS)
    try:
        import torch
    except ImportError:
        torch = None
    # asked of the driver without initialising a context: the builder forks while tuning
    have_gpu = kiln.cuda(0).exist and torch is not None and torch.cuda.is_available()
    results = common.results_dir(out_dir)
    figures, details = [], {}
    tasks = {key: make_task(key) for key in workloads}
    if have_gpu:
        for key, (task, _, _) in tasks.items():
            details[key] = {"tuning": tune(task, trials, tuner, _log(results, key), say)}
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    for key, (task, label, reference) in tasks.items():
        log = _log(results, key)
        if not have_gpu:
            if cuda_driver.available():
                sched, args = task.instantiate(FallbackConfigEntity())
                kiln.build(sched, args, target="cuda -arch=sm_90")
                note = "fallback compiled for sm_90, not timed: no CUDA GPU / PyTorch CUDA"
            else:
                note = "not built: no NVRTC, no GPU"
            figures.append(common.Figure(key, label, None, "s", notes=note))
            continue
        r = measure(task, log, reference, torch, 5 if quick else 11)
        r["best_config"] = best_config(log)
        details[key].update(r)
        g = r["gflops"]
        notes = (f"fallback {r['fallback_s'] * 1e3:.3f} ms ({g['fallback']:.0f} GFLOP/s), "
                 f"tuned {r['tuned_s'] * 1e3:.3f} ms ({g['tuned']:.0f} GFLOP/s, "
                 f"{r['fallback_s'] / r['tuned_s']:.2f}x the fallback), PyTorch "
                 f"{g['torch']:.0f} GFLOP/s")
        if not r["correct"]:
            notes += f"; WRONG RESULT (rel err {r['max_rel_err']:.1e})"
        figures.append(common.Figure(key, f"{label}, tuned ({trials} trials, {tuner})",
                                     r["tuned_s"], "s", reference=r["torch_s"],
                                     reference_label="PyTorch", notes=notes))
    machine = gpu.gpu_machine_info(torch, have_gpu)
    _, md_path, text = common.write_report(
        NAME, figures, machine=machine,
        settings={"trials": trials, "tuner": tuner, "quick": quick, "tf32": False},
        details=details, started=started, duration_s=time.perf_counter() - t0,
        out_dir=out_dir, title="GPU tuning (CUDA AutoTVM)")
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = common.tuning_parser(NAME, DESCRIPTION, DEFAULT_TRIALS, WORKLOADS)
    p.add_argument("--tuner", default="xgb", choices=["xgb", "ga", "random"])
    args = common.parse_tuning_args(p, argv, WORKLOADS)
    run(quick=args.quick, out_dir=args.out, trials=args.trials, tuner=args.tuner,
        workloads=args.workloads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
