"""AutoTVM suite (issue 7): best GFLOP/s found against trials, per tuner, on GEMM fp32.

``python -m benchmarks.tuning [--quick] [--trials N] [--random-trials N]`` tunes one
template of ``C = A @ B`` (N = 1024; the structure of examples/cpu/gemm.py — B packed into
column panels, a register tile in a local write cache, the reduction split and unrolled —
with its sizes and orders as knobs) with RandomTuner, GATuner and XGBTuner, and records the
best GFLOP/s seen after each trial. Every candidate is checked against numpy before it is
timed (LocalRunner with ``ref_func``). At the end the best config of each tuner and the hand
schedule (examples/cpu/gemm.py, defaults) are rebuilt in this process and timed
interleaved, so their ratio is measured under the same load.

Writes ``results/tuning.json``, ``results/tuning.md`` and the tuning logs
``results/tuning-<tuner>.log``. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/tuning.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from kiln import autotvm, te  # noqa: E402
from kiln.autotvm.task.space import OtherOptionEntity, SplitEntity  # noqa: E402

NAME = "tuning"
DESCRIPTION = "AutoTVM: best GEMM GFLOP/s vs trials for Random, GA and XGB tuners (issue 7)"

GEMM_EXAMPLE = common.REPO_ROOT / "examples" / "cpu" / "gemm.py"
HAND = {"tile_x": 64, "tile_y": 6, "tile_k": 4, "vl": 16}  # examples/cpu/gemm.py defaults
MR = (1, 2, 4, 6, 8, 12, 16)
PLANS = ["panels_pack_inside", "panels", "rows"]


@autotvm.template("tuning_gemm")
def gemm_template(N):
    """``C = A @ B`` (N x N fp32) in the structure of examples/cpu/gemm.py, sizes tuned.

    Knobs: ``tile_x`` (bn, columns of a register tile and width of a packed B panel),
    ``tile_y`` (mr, rows of a register tile), ``tile_k`` (ku, reduction unroll), ``vl``
    (lanes of one machine vector), ``plan`` (the parallel loop runs over column panels,
    each packing its own B panel, or over panels with B packed beforehand, or over row
    tiles) and ``unroll_rows``. Its fallback config is the hand schedule's."""
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    cfg = autotvm.get_config()
    if cfg.is_fallback:
        for name in ("tile_x", "tile_y", "tile_k"):
            cfg[name] = SplitEntity([-1, HAND[name]])
        cfg["vl"] = OtherOptionEntity(HAND["vl"])
    cfg.define_split("tile_x", N, max_factor=256, filter=lambda e: e.size[-1] >= 8)
    cfg.define_split("tile_y", N, policy="candidate", candidate=[[-1, r] for r in MR])
    cfg.define_split("tile_k", N, max_factor=8)
    cfg.define_knob("vl", [8, 16])
    cfg.define_knob("plan", PLANS)
    cfg.define_knob("unroll_rows", [True, False])
    bn, vl = cfg["tile_x"].size[-1], cfg["vl"].val
    if bn % vl:
        cfg.raise_error(f"the panel width {bn} is not a multiple of the vector width {vl}")
    panel_outer = cfg["plan"].val != "rows"

    PB = te.compute((N // bn, N, bn), lambda jo, k, ji: B[k, jo * bn + ji], name="PB")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * PB[j // bn, k, j % bn], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    pjo, _, pji = s[PB].op.axis
    s[PB].vectorize(pji)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = cfg["tile_y"].apply(s, C, i)
    jo, ji = cfg["tile_x"].apply(s, C, j)
    outer, inner = (jo, io) if panel_outer else (io, jo)
    s[C].reorder(outer, inner, ii, ji)
    s[C].parallel(outer)
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], inner)
    if cfg["plan"].val == "panels_pack_inside":
        s[PB].compute_at(s[C], jo)
    else:
        s[PB].parallel(pjo)
    xc, yc = s[CC].op.axis
    ko, ki = cfg["tile_k"].apply(s, CC, CC.op.reduce_axis[0])
    yo, yi = s[CC].split(yc, factor=vl)
    s[CC].reorder(ko, ki, xc, yo, yi)
    s[CC].unroll(ki)
    if cfg["unroll_rows"].val:
        s[CC].unroll(xc)
    s[CC].unroll(yo)
    s[CC].vectorize(yi)
    return s, [A, B, C]


def _numpy_gemm(a, b):
    return a @ b


def make_tuner(name: str, task, seed: int):
    if name == "random":
        return autotvm.RandomTuner(task, seed=seed)
    if name == "ga":
        return autotvm.GATuner(task, pop_size=16, elite_num=2, seed=seed)
    if name == "xgb":
        return autotvm.XGBTuner(task, plan_size=16, feature_type="itervar", loss_type="rank",
                                diversity_filter_ratio=2, seed=seed)
    raise ValueError(name)


def tune_one(name: str, task, n_trial: int, log: Path, cfg: dict[str, Any],
             say) -> dict[str, Any]:
    log.unlink(missing_ok=True)
    tuner = make_tuner(name, task, cfg["seed"])
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=cfg["n_parallel"], timeout=60),
        runner=autotvm.LocalRunner(number=cfg["number"], repeat=cfg["repeat"], timeout=20,
                                   ref_func=_numpy_gemm))
    curve: list[float] = []
    errors: dict[int, int] = {}

    def record(tuner_, inputs, results):
        for res in results:
            curve.append(tuner_.best_flops / 1e9)
            errors[res.error_no] = errors.get(res.error_no, 0) + 1

    t0 = time.perf_counter()
    tuner.tune(n_trial, option, callbacks=[
        autotvm.callback.log_to_file(str(log)), record,
        autotvm.callback.progress_bar(n_trial, prefix=f"[{NAME}:{name}] ", stream=sys.stderr)])
    secs = time.perf_counter() - t0
    row = {"tuner": name, "trials": len(curve), "seconds": round(secs, 1),
           "best_gflops": tuner.best_flops / 1e9, "curve_gflops": curve,
           "errors": {str(k): v for k, v in sorted(errors.items())},
           "best_config": repr(tuner.best_config), "log": log.name}
    if name == "xgb":
        row["feature_seconds"] = round(tuner.cost_model.feature_seconds, 1)
    say(f"{name}: best {row['best_gflops']:.1f} GFLOP/s after {len(curve)} trials, {secs:.0f} s")
    return row


def final_comparison(task, rows, cfg) -> dict[str, Any]:
    """Rebuild the hand schedule and each tuner's best config here; time them interleaved."""
    import importlib.util

    import kiln

    spec = importlib.util.spec_from_file_location("kiln_example_cpu_gemm", GEMM_EXAMPLE)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    n = cfg["n"]
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    ref = a @ b
    env: dict[str, Any] = {"A": kiln.nd.array(a), "B": kiln.nd.array(b)}
    stmts = {}
    mods = {"hand": kiln.build(*ex.gemm_schedule(n), "llvm")}
    for row in rows:
        with autotvm.apply_history_best(str(Path(cfg["out"]) / row["log"])):
            mods[f"tuned-{row['tuner']}"] = kiln.build(*gemm_template(n), "llvm")
    correct = {}
    for key, mod in mods.items():
        c = kiln.nd.array(np.full((n, n), np.nan, np.float32))
        mod(env["A"], env["B"], c)
        correct[key] = bool(np.allclose(c.numpy(), ref, rtol=1e-3, atol=1e-3))
        env[f"mod_{key.replace('-', '_')}"], env[f"C_{key.replace('-', '_')}"] = mod, c
        stmts[key] = f"mod_{key.replace('-', '_')}(A, B, C_{key.replace('-', '_')})"
    timings = common.interleaved(stmts, env, repeat=cfg["final_repeat"], min_time=0.2, warmup=2)
    flops = 2.0 * n ** 3
    out = {k: {"gflops": flops / t.median / 1e9, "correct": correct[k], "timing": t.to_dict()}
           for k, t in timings.items()}
    for k in out:
        out[k]["vs_hand"] = out[k]["gflops"] / out["hand"]["gflops"]
    return out


def settings(quick: bool, trials: int | None, random_trials: int | None) -> dict[str, Any]:
    base = {"n": 1024, "seed": 0, "n_parallel": 2, "number": 2, "repeat": 5}
    if quick:
        base.update(quick=True, trials=trials or 32, random_trials=random_trials or 32,
                    final_repeat=3)
    else:
        base.update(quick=False, trials=trials or 200, random_trials=random_trials or 1000,
                    final_repeat=7)
    return base


def _at(curve: list[float], k: int) -> float | None:
    return curve[min(k, len(curve)) - 1] if curve else None


def markdown(rows, final, cfg) -> str:
    marks = [m for m in (16, 32, 64, 100, 200, 500, 1000)
             if any(len(r["curve_gflops"]) >= m for r in rows)]
    head = "| tuner | trials | " + " | ".join(f"best @{m}" for m in marks) + \
        " | best | seconds | errors (error_no: count) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [f"{_at(r['curve_gflops'], m):.1f}" if len(r["curve_gflops"]) >= m else "—"
                 for m in marks]
        errs = ", ".join(f"{k}: {v}" for k, v in r["errors"].items())
        lines.append(f"| {r['tuner']} | {r['trials']} | " + " | ".join(cells)
                     + f" | {r['best_gflops']:.1f} | {r['seconds']:.0f} | {errs} |")
    lines += ["", "Best GFLOP/s found so far (as measured while tuning, 2 parallel builds "
              "loading the machine), after that many trials.", "",
              "| schedule (rebuilt, timed interleaved) | GFLOP/s | vs hand schedule | correct |",
              "|---|---|---|---|"]
    for k, v in final.items():
        lines.append(f"| {k} | {v['gflops']:.1f} | {v['vs_hand']:.2f}× | "
                     f"{'yes' if v['correct'] else 'NO'} |")
    rnd = next((r for r in rows if r["tuner"] == "random"), None)
    xgb = next((r for r in rows if r["tuner"] == "xgb"), None)
    if rnd and xgb and rnd["best_gflops"] > 0:
        x100 = _at(xgb["curve_gflops"], 100)
        lines += ["", f"XGB after {min(100, xgb['trials'])} trials: {x100:.1f} GFLOP/s = "
                  f"{100 * x100 / rnd['best_gflops']:.0f} % of the best of {rnd['trials']} "
                  "random trials (goal: 90 % of 1,000 random trials)."]
    return "\n".join(lines)


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, trials: int | None = None, random_trials: int | None = None,
        tuners: Sequence[str] = ("random", "ga", "xgb")) -> str:
    del profile
    started = time.time()
    t0 = time.perf_counter()
    cfg = settings(quick, trials, random_trials)
    out = Path(out_dir or common.RESULTS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    cfg["out"] = str(out)
    load_start = common.load_average()

    def say(msg):
        if verbose:
            print(f"[{NAME}] {msg}", file=sys.stderr, flush=True)

    task = autotvm.task.create("tuning_gemm", (cfg["n"],), "llvm")
    say(f"GEMM {cfg['n']}: {len(task.config_space)} configs")
    rows = []
    for name in tuners:
        n_trial = cfg["random_trials"] if name == "random" else cfg["trials"]
        rows.append(tune_one(name, task, n_trial, out / f"{NAME}-{name}.log", cfg, say))
    say("final interleaved comparison ...")
    final = final_comparison(task, rows, cfg)
    machine = common.machine_info()
    machine["load_average_start"] = load_start
    machine["load_average_end"] = common.load_average()
    duration = time.perf_counter() - t0
    when = common._dt.datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds")
    command = "python -m benchmarks.tuning" + (" --quick" if quick else "")
    data = {"suite": NAME, "date": when, "duration_s": round(duration, 1), "machine": machine,
            "settings": cfg, "space_size": len(task.config_space), "tuners": rows,
            "final": final, "command": command}
    (out / f"{NAME}.json").write_text(json.dumps(data, indent=1, default=str) + "\n",
                                      encoding="utf-8")
    text = "\n".join([
        "# AutoTVM tuning (GEMM fp32)", "",
        f"Run {when}, {duration:.0f} s, command: `{command}`; template `tuning_gemm` "
        f"({len(task.config_space)} configs), N = {cfg['n']}", "",
        *(f"- {line}" for line in common.machine_lines(machine)), "",
        markdown(rows, final, cfg), "",
        "Nothing fails on these numbers. See docs/autotvm.md.", ""])
    md_path = out / f"{NAME}.md"
    md_path.write_text(text, encoding="utf-8")
    if verbose:
        print(text)
        print(f"written: {md_path} and {md_path.with_suffix('.json')}")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tuning", description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="32 trials per tuner")
    p.add_argument("--trials", type=int, default=None, help="trials of the GA and XGB tuners")
    p.add_argument("--random-trials", type=int, default=None, help="trials of RandomTuner")
    p.add_argument("--tuners", default="random,ga,xgb", help="comma-separated tuners to run")
    p.add_argument("--out", default=None, help="results directory (default: results/)")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out, trials=args.trials,
        random_trials=args.random_trials, tuners=args.tuners.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
