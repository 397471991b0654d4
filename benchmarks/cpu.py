"""CPU performance suite (issue 4, GEMM part): kiln GEMM vs numpy, and this machine's peak.

``python -m benchmarks cpu [--quick]`` (or ``python -m benchmarks.cpu``) measures, in one
process:

* **peak FLOP/s** and **memory bandwidth** with kiln-compiled kernels (benchmarks/peak.py:
  independent FMA chains at full vector width; a STREAM-style triad);
* **GEMM fp32** ``C = A @ B`` for square sizes 256, 512, 1024, 2048 with kiln's schedule from
  examples/cpu/gemm.py against ``numpy.matmul`` (BLAS), timed interleaved (kiln, numpy,
  numpy, kiln, ...) with the same thread count: all cores, then 1 thread (kiln's OpenMP and
  numpy's BLAS limited with threadpoolctl). Every kiln result is checked against numpy
  before it is timed;
* **tensorized GEMM** (issue 16): examples/cpu/gemm_tensorize.py, kiln's loops around a
  hand-written AVX-512/AVX2 micro-kernel (``s[C].tensorize``), against numpy and the pure-TE
  schedule above, interleaved, all cores (``bench_gemm_tensorize``).

Writes ``results/cpu.json``, ``results/cpu.md`` and ``results/cpu_gemm.png`` (GFLOP/s
against N beside numpy). Nothing here asserts on timings.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/cpu.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks import peak as peak_mod  # noqa: E402
from benchmarks.foundation import fresh_cache  # noqa: E402

NAME = "cpu"
DESCRIPTION = "GEMM fp32 256-2048 vs numpy, peak FMA FLOP/s and triad bandwidth (issue 4)"

# ---------------------------------------------------------------------------------------
# GEMM
# ---------------------------------------------------------------------------------------


def bench_gemm(cfg: dict[str, Any], peak_gflops: float | None, threads: int | None = None,
               sizes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """GEMM rows for ``sizes`` (default ``cfg["sizes"]``); ``threads``: limit kiln and numpy
    to that many threads (``peak_gflops`` is then the peak of that many threads)."""
    import kiln

    ex = common.load_example("cpu", "gemm")
    rows = []
    for n in sizes or cfg["sizes"]:
        t0 = time.perf_counter()
        s, args = ex.gemm_schedule(n)
        mod = kiln.build(s, args, "llvm")
        build_s = time.perf_counter() - t0
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)).astype("float32")
        b = rng.standard_normal((n, n)).astype("float32")
        ref = a @ b
        A, B = kiln.nd.array(a), kiln.nd.array(b)
        C = kiln.nd.array(np.full((n, n), np.nan, "float32"))
        mod(A, B, C)
        err = float(np.max(np.abs(C.numpy() - ref)) / max(1.0, float(np.max(np.abs(ref)))))
        correct = bool(np.allclose(C.numpy(), ref, rtol=1e-3, atol=1e-3 * np.sqrt(n)))
        out = np.empty_like(ref)
        env = {"mod": mod, "A": A, "B": B, "C": C, "np": np, "a": a, "b": b, "out": out}
        # long measurements (min_time): numpy's OpenBLAS workers and kiln's OpenMP workers
        # spin for a while after each call; short interleaved measurements would charge that
        # spinning to whichever runs next
        with (common.threads_limited(threads) if threads else _nothing()):
            timings = common.interleaved(
                {"kiln": "mod(A, B, C)", "numpy": "np.matmul(a, b, out=out)"}, env,
                repeat=cfg["gemm_repeat"], min_time=cfg["gemm_min_time"], warmup=2)
        flops = 2.0 * n ** 3
        gk = flops / timings["kiln"].median / 1e9
        gn = flops / timings["numpy"].median / 1e9
        rows.append({
            "n": n, "threads": threads or common.omp_threads(), "correct": correct,
            "max_rel_err": err, "build_s": build_s,
            "kiln_gflops": gk, "numpy_gflops": gn, "ratio": gk / gn,
            "kiln_pct_peak": (100.0 * gk / peak_gflops) if peak_gflops else None,
            "numpy_pct_peak": (100.0 * gn / peak_gflops) if peak_gflops else None,
            "kiln_gflops_best": flops / timings["kiln"].min / 1e9,
            "numpy_gflops_best": flops / timings["numpy"].min / 1e9,
            "timing": {k: t.to_dict() for k, t in timings.items()},
        })
        gc.collect()
    return rows


def bench_gemm_tensorize(cfg: dict[str, Any],
                         sizes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Tensorized-GEMM rows for ``sizes`` (default ``cfg["sizes_tensorize"]``): the
    micro-kernel schedule, the pure-TE schedule and numpy, interleaved, each result checked
    against numpy before it is timed."""
    import kiln

    tensorized = common.load_example("cpu", "gemm_tensorize")
    pure = common.load_example("cpu", "gemm")
    rows = []
    for n in sizes or cfg["sizes_tensorize"]:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)).astype("float32")
        b = rng.standard_normal((n, n)).astype("float32")
        ref = a @ b
        env: dict[str, Any] = {"np": np, "a": a, "b": b, "out": np.empty_like(ref)}
        correct = True
        for who, schedule in (("tensorize", tensorized.gemm_tensorize_schedule),
                              ("te", pure.gemm_schedule)):
            s, args = schedule(n)
            env[who] = kiln.build(s, args, "llvm")
            env[f"{who}_args"] = (kiln.nd.array(a), kiln.nd.array(b),
                                  kiln.nd.array(np.full((n, n), np.nan, "float32")))
            env[who](*env[f"{who}_args"])
            correct &= bool(np.allclose(env[f"{who}_args"][2].numpy(), ref, rtol=1e-3,
                                        atol=1e-3 * np.sqrt(n)))
        timings = common.interleaved(
            {"tensorize": "tensorize(*tensorize_args)", "te": "te(*te_args)",
             "numpy": "np.matmul(a, b, out=out)"}, env,
            repeat=cfg["gemm_repeat"], min_time=cfg["gemm_min_time"], warmup=2)
        gflops = {who: 2.0 * n ** 3 / t.median / 1e9 for who, t in timings.items()}
        rows.append({"n": n, "threads": common.omp_threads(), "correct": correct,
                     **{f"{who}_gflops": g for who, g in gflops.items()},
                     "timing": {k: t.to_dict() for k, t in timings.items()}})
        gc.collect()
    return rows


def markdown_tensorize(rows: list[dict[str, Any]]) -> str:
    lines = ["| tensorized GEMM fp32 N | threads | micro-kernel GFLOP/s | pure-TE GFLOP/s | "
             "numpy GFLOP/s | micro-kernel / numpy | micro-kernel / pure-TE | correct |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['threads']} | {r['tensorize_gflops']:.1f} | "
            f"{r['te_gflops']:.1f} | {r['numpy_gflops']:.1f} | "
            f"{r['tensorize_gflops'] / r['numpy_gflops']:.2f}× | "
            f"{r['tensorize_gflops'] / r['te_gflops']:.2f}× | "
            f"{'yes' if r['correct'] else 'NO'} |")
    return "\n".join(lines)


@contextlib.contextmanager
def _nothing():
    yield


# ---------------------------------------------------------------------------------------
# the suite
# ---------------------------------------------------------------------------------------


def settings(quick: bool) -> dict[str, Any]:
    cfg = {"quick": quick, "sizes": [256, 512, 1024, 2048], "sizes_tensorize": [768, 1536],
           **peak_mod.settings(quick)}
    if quick:
        cfg.update(gemm_repeat=3, gemm_min_time=0.2, sizes_1thread=[1024])
    else:
        cfg.update(gemm_repeat=7, gemm_min_time=0.4, sizes_1thread=[1024, 2048])
    return cfg


def markdown(measured: dict[str, Any], gemm: list[dict[str, Any]]) -> str:
    lines = [
        *peak_mod.summary(measured),
        "",
        "1-thread rows: kiln and numpy limited to 1 thread; their % of peak is of the "
        "1-thread peak.",
        "",
        "Cold build of the schedule (empty compile cache: lowering, C compile, load; goal "
        "≤ 1 s): " + ", ".join(f"N={r['n']}: {r['build_s']:.2f} s" for r in gemm
                                if r["threads"] == gemm[0]["threads"]),
        "",
        "| GEMM fp32 N | threads | kiln GFLOP/s | numpy GFLOP/s | kiln / numpy | kiln % of peak "
        "| numpy % of peak | kiln ms | numpy ms | correct |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in gemm:
        pk = "—" if r["kiln_pct_peak"] is None else f"{r['kiln_pct_peak']:.0f}%"
        pn = "—" if r["numpy_pct_peak"] is None else f"{r['numpy_pct_peak']:.0f}%"
        lines.append(
            f"| {r['n']} | {r['threads']} | {r['kiln_gflops']:.1f} | {r['numpy_gflops']:.1f} | "
            f"{r['ratio']:.2f}× | {pk} | {pn} | "
            f"{r['timing']['kiln']['median_s'] * 1e3:.2f} | "
            f"{r['timing']['numpy']['median_s'] * 1e3:.2f} | "
            f"{'yes' if r['correct'] else 'NO'} |")
    return "\n".join(lines)


def plot_gemm(gemm: list[dict[str, Any]], path: Path) -> Path | None:
    """GFLOP/s against N, kiln and numpy, one line per thread count (the book's plot)."""
    sizes = sorted({r["n"] for r in gemm})
    series = {}
    for t in sorted({r["threads"] for r in gemm}, reverse=True):
        by_n = {r["n"]: r for r in gemm if r["threads"] == t}
        for who in ("kiln", "numpy"):
            series[f"{who}, {t} thread{'s' if t > 1 else ''}"] = [
                by_n[n][f"{who}_gflops"] if n in by_n else None for n in sizes]
    return common.plot_series(path, "fp32 GEMM C = A @ B (N x N)", sizes, series,
                              xlabel="N", logx=True)


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    """Run the suite, write ``<out_dir>/cpu.{json,md}``, return the markdown."""
    del profile  # nothing to profile here
    started = time.time()
    t0 = time.perf_counter()
    cfg = settings(quick)
    load_start = common.load_average()
    out = common.results_dir(out_dir)
    say = common.progress(NAME, verbose)
    say("peak FMA and triad ...")
    measured = peak_mod.measure(cfg)
    peak, triad = measured["peak"], measured["triad"]
    # an empty compile cache: each GEMM build_s is a cold build (lowering, C compile, load)
    with fresh_cache():
        say("gemm ...")
        # the peak is a ceiling: its best measurement, not its median, is the reference
        gemm = bench_gemm(cfg, peak_mod.peak_gflops(measured))
        say("gemm, 1 thread ...")
        try:
            gemm += bench_gemm(cfg, peak_mod.peak_gflops(measured, 1), threads=1,
                               sizes=cfg["sizes_1thread"])
        except RuntimeError as e:  # no threadpoolctl
            say(f"skipped: {e}")
        say("tensorized gemm ...")
        tensorize = bench_gemm_tensorize(cfg)
    plot = plot_gemm(gemm, out / f"{NAME}_gemm.png")
    machine = common.machine_info(load_start)
    duration = time.perf_counter() - t0
    when = common.run_date(started)
    data = {"suite": NAME, "date": when, "duration_s": round(duration, 2), "machine": machine,
            "settings": cfg, "peak": peak, "triad": triad,
            "peak_1thread": measured["peak_1thread"], "gemm": gemm,
            "gemm_tensorize": tensorize,
            "command": "python -m benchmarks cpu" + (" --quick" if quick else "")}
    md = [
        "# CPU benchmarks (GEMM, peak)",
        "",
        f"Run {when}, {duration:.0f} s, command: `{data['command']}`; "
        f"kiln schedule: examples/cpu/gemm.py `gemm_schedule(N)` (defaults)",
        "",
        *(f"- {line}" for line in common.machine_lines(machine)),
        "",
        markdown(measured, gemm),
        "",
        markdown_tensorize(tensorize),
        "",
        *([f"Plot: `{plot.name}` (GFLOP/s against N, kiln beside numpy)", ""] if plot else []),
        "Medians of interleaved measurements in one process (same thread count for kiln and "
        "numpy). Nothing fails on these numbers. See docs/performance.md.",
        "",
    ]
    text = "\n".join(md)
    _, md_path = common.write_results(NAME, data, text, out)
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION, "fewer repeats (about a minute)").parse_args(
        argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
