"""CPU performance suite (issue 4, GEMM part): kiln GEMM vs numpy, and this machine's peak.

``python -m benchmarks cpu [--quick]`` (or ``python -m benchmarks.cpu``) measures, in one
process:

* **peak FLOP/s** with a kiln-compiled kernel: per thread, ``R`` independent accumulator
  vectors of 16 fp32 lanes (one AVX-512 register each) updated by ``acc += x * w[t]`` for
  ``T`` steps — ``R`` independent FMA chains at full vector width, operands in registers;
* **memory bandwidth** with a kiln-compiled STREAM-style triad ``a = b + 3 * c`` on arrays far
  larger than the caches (3 x 4 bytes counted per element, as STREAM does);
* **GEMM fp32** ``C = A @ B`` for square sizes 256, 512, 1024, 2048 with kiln's schedule from
  examples/cpu/gemm.py against ``numpy.matmul`` (BLAS), timed interleaved (kiln, numpy,
  numpy, kiln, ...) with the same thread count. Every kiln result is checked against numpy
  before it is timed.

Writes ``results/cpu.json`` and ``results/cpu.md``. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/cpu.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402

NAME = "cpu"
DESCRIPTION = "GEMM fp32 256-2048 vs numpy, peak FMA FLOP/s and triad bandwidth (issue 4)"

GEMM_EXAMPLE = common.REPO_ROOT / "examples" / "cpu" / "gemm.py"
VL = 16  # fp32 lanes of one AVX-512 register


def _gemm_module():
    spec = importlib.util.spec_from_file_location("kiln_example_cpu_gemm", GEMM_EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------
# peak FLOP/s: independent FMA chains at full vector width
# ---------------------------------------------------------------------------------------


def fma_peak_schedule(threads: int, chains: int = 12, steps: int = 65536):
    """``Y[p, j] = sum_t X[p, j] * W[t]``: per parallel iteration ``p``, ``chains`` accumulator
    vectors of VL lanes (a local write cache, unrolled, vectorized) each take one FMA per
    step ``t`` with a broadcast ``W[t]``. FLOPs: ``2 * threads * chains * VL * steps``."""
    from kiln import te

    X = te.placeholder((threads, chains * VL), name="X")
    W = te.placeholder((steps,), name="W")
    t = te.reduce_axis((0, steps), name="t")
    Y = te.compute((threads, chains * VL), lambda p, j: te.sum(X[p, j] * W[t], axis=t),
                   name="Y")
    s = te.create_schedule(Y.op)
    YC = s.cache_write(Y, "local")
    p = Y.op.axis[0]
    s[Y].parallel(p)
    s[YC].compute_at(s[Y], p)
    jo, ji = s[YC].split(s[YC].op.axis[1], factor=VL)
    to, ti = s[YC].split(s[YC].op.reduce_axis[0], factor=4)
    s[YC].reorder(to, ti, jo, ji)
    s[YC].unroll(ti)
    s[YC].unroll(jo)
    s[YC].vectorize(ji)
    return s, (X, W, Y)


def bench_peak(cfg: dict[str, Any]) -> dict[str, Any]:
    import kiln

    threads = common.omp_threads()
    # 12 chains: 12 accumulators + 12 x vectors + the broadcast fit AVX-512's 32 registers
    # and cover the FMA latency x 2 FMA ports
    chains, steps = 12, cfg["peak_steps"]
    s, args = fma_peak_schedule(threads, chains, steps)
    mod = kiln.build(s, args, "llvm")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((threads, chains * VL)).astype("float32")
    w = (rng.standard_normal(steps) * 1e-3).astype("float32")
    y = kiln.nd.empty((threads, chains * VL), "float32")
    X, Wt = kiln.nd.array(x), kiln.nd.array(w)
    mod(X, Wt, y)
    expected = x.astype("float64") * w.astype("float64").sum()
    correct = bool(np.allclose(y.numpy(), expected, rtol=1e-3, atol=1e-3))
    t = common.interleaved({"fma": "mod(X, W, y)"}, {"mod": mod, "X": X, "W": Wt, "y": y},
                           repeat=cfg["repeat"], min_time=cfg["min_time"])["fma"]
    flops = 2.0 * threads * chains * VL * steps
    return {"threads": threads, "chains_per_thread": chains, "lanes": VL, "steps": steps,
            "correct": correct, "timing": t.to_dict(),
            "gflops_median": flops / t.median / 1e9, "gflops_best": flops / t.min / 1e9}


# ---------------------------------------------------------------------------------------
# memory bandwidth: STREAM triad
# ---------------------------------------------------------------------------------------


def triad_schedule(n: int):
    from kiln import te

    B = te.placeholder((n,), name="B")
    C = te.placeholder((n,), name="C")
    A = te.compute((n,), lambda i: B[i] + te.const(3.0, "float32") * C[i], name="A")
    s = te.create_schedule(A.op)
    xo, xi = s[A].split(A.op.axis[0], factor=4 * VL)
    s[A].parallel(xo)
    xm, xv = s[A].split(xi, factor=VL)
    s[A].unroll(xm)
    s[A].vectorize(xv)
    return s, (B, C, A)


def bench_triad(cfg: dict[str, Any]) -> dict[str, Any]:
    import kiln

    n = cfg["triad_n"]
    s, args = triad_schedule(n)
    mod = kiln.build(s, args, "llvm")
    rng = np.random.default_rng(1)
    b = rng.standard_normal(n).astype("float32")
    c = rng.standard_normal(n).astype("float32")
    B, C, A = kiln.nd.array(b), kiln.nd.array(c), kiln.nd.empty((n,), "float32")
    mod(B, C, A)
    correct = bool(np.allclose(A.numpy(), b + np.float32(3.0) * c, rtol=1e-6, atol=1e-6))
    out = np.empty_like(b)
    env = {"mod": mod, "A": A, "B": B, "C": C, "np": np, "b": b, "c": c, "out": out}
    timings = common.interleaved(
        {"kiln": "mod(B, C, A)",
         "numpy": "np.multiply(c, 3.0, out=out); np.add(out, b, out=out)"},
        env, repeat=cfg["repeat"], min_time=cfg["min_time"])
    nbytes = 3 * 4 * n
    return {"n": n, "correct": correct, "bytes_counted": nbytes,
            "timing": {k: t.to_dict() for k, t in timings.items()},
            "gb_s_median": nbytes / timings["kiln"].median / 1e9,
            "gb_s_best": nbytes / timings["kiln"].min / 1e9,
            "numpy_gb_s_median": nbytes / timings["numpy"].median / 1e9,
            "numpy_note": "numpy needs two passes (multiply, add): 5 array passes, 3 counted"}


# ---------------------------------------------------------------------------------------
# GEMM
# ---------------------------------------------------------------------------------------


def bench_gemm(cfg: dict[str, Any], peak_gflops: float | None) -> list[dict[str, Any]]:
    import kiln

    ex = _gemm_module()
    rows = []
    for n in cfg["sizes"]:
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
        timings = common.interleaved(
            {"kiln": "mod(A, B, C)", "numpy": "np.matmul(a, b, out=out)"}, env,
            repeat=cfg["gemm_repeat"], min_time=cfg["gemm_min_time"], warmup=2)
        flops = 2.0 * n ** 3
        gk = flops / timings["kiln"].median / 1e9
        gn = flops / timings["numpy"].median / 1e9
        rows.append({
            "n": n, "correct": correct, "max_rel_err": err, "build_s": build_s,
            "kiln_gflops": gk, "numpy_gflops": gn, "ratio": gk / gn,
            "kiln_pct_peak": (100.0 * gk / peak_gflops) if peak_gflops else None,
            "numpy_pct_peak": (100.0 * gn / peak_gflops) if peak_gflops else None,
            "kiln_gflops_best": flops / timings["kiln"].min / 1e9,
            "numpy_gflops_best": flops / timings["numpy"].min / 1e9,
            "timing": {k: t.to_dict() for k, t in timings.items()},
        })
        gc.collect()
    return rows


# ---------------------------------------------------------------------------------------
# the suite
# ---------------------------------------------------------------------------------------


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {"quick": True, "sizes": [256, 512, 1024, 2048], "repeat": 5, "min_time": 0.05,
                "gemm_repeat": 3, "gemm_min_time": 0.2, "peak_steps": 1 << 16,
                "triad_n": 1 << 24}
    return {"quick": False, "sizes": [256, 512, 1024, 2048], "repeat": 11, "min_time": 0.1,
            "gemm_repeat": 7, "gemm_min_time": 0.4, "peak_steps": 1 << 16,
            "triad_n": 1 << 25}


def markdown(peak: dict[str, Any], triad: dict[str, Any], gemm: list[dict[str, Any]]) -> str:
    lines = [
        f"Measured peak (kiln FMA kernel, {peak['threads']} threads × "
        f"{peak['chains_per_thread']} chains × {peak['lanes']} lanes): "
        f"**{peak['gflops_best']:.1f} GFLOP/s** best (the % of peak below), "
        f"{peak['gflops_median']:.1f} median"
        + ("" if peak["correct"] else " (WRONG RESULT)"),
        "",
        f"Memory bandwidth (kiln STREAM triad, {triad['n']} fp32): "
        f"**{triad['gb_s_median']:.1f} GB/s** median, {triad['gb_s_best']:.1f} best; "
        f"numpy multiply+add {triad['numpy_gb_s_median']:.1f} GB/s (same 3 arrays counted)"
        + ("" if triad["correct"] else " (WRONG RESULT)"),
        "",
        "| GEMM fp32 N | kiln GFLOP/s | numpy GFLOP/s | kiln / numpy | kiln % of peak "
        "| numpy % of peak | kiln ms | numpy ms | correct |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in gemm:
        pk = "—" if r["kiln_pct_peak"] is None else f"{r['kiln_pct_peak']:.0f}%"
        pn = "—" if r["numpy_pct_peak"] is None else f"{r['numpy_pct_peak']:.0f}%"
        lines.append(
            f"| {r['n']} | {r['kiln_gflops']:.1f} | {r['numpy_gflops']:.1f} | "
            f"{r['ratio']:.2f}× | {pk} | {pn} | "
            f"{r['timing']['kiln']['median_s'] * 1e3:.2f} | "
            f"{r['timing']['numpy']['median_s'] * 1e3:.2f} | "
            f"{'yes' if r['correct'] else 'NO'} |")
    return "\n".join(lines)


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    """Run the suite, write ``<out_dir>/cpu.{json,md}``, return the markdown."""
    del profile  # nothing to profile here
    started = time.time()
    t0 = time.perf_counter()
    cfg = settings(quick)
    load_start = common.load_average()
    out = Path(out_dir or common.RESULTS_DIR)
    out.mkdir(parents=True, exist_ok=True)

    def say(msg):
        if verbose:
            print(f"[{NAME}] {msg}", file=sys.stderr, flush=True)

    say("peak FMA ...")
    peak = bench_peak(cfg)
    say("triad ...")
    triad = bench_triad(cfg)
    say("gemm ...")
    # the peak is a ceiling: its best measurement, not its median, is the reference
    gemm = bench_gemm(cfg, peak["gflops_best"])
    machine = common.machine_info()
    machine["load_average_start"] = load_start
    duration = time.perf_counter() - t0
    when = common._dt.datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds")
    data = {"suite": NAME, "date": when, "duration_s": round(duration, 2), "machine": machine,
            "settings": cfg, "peak": peak, "triad": triad, "gemm": gemm,
            "command": "python -m benchmarks cpu" + (" --quick" if quick else "")}
    (out / f"{NAME}.json").write_text(json.dumps(data, indent=1, default=str) + "\n",
                                      encoding="utf-8")
    md = [
        "# CPU benchmarks (GEMM, peak)",
        "",
        f"Run {when}, {duration:.0f} s, command: `{data['command']}`; "
        f"kiln schedule: examples/cpu/gemm.py `gemm_schedule(N)` (defaults)",
        "",
        *(f"- {line}" for line in common.machine_lines(machine)),
        "",
        markdown(peak, triad, gemm),
        "",
        "Medians of interleaved measurements in one process (same thread count for kiln and "
        "numpy). Nothing fails on these numbers. See docs/performance.md.",
        "",
    ]
    text = "\n".join(md)
    md_path = out / f"{NAME}.md"
    md_path.write_text(text, encoding="utf-8")
    if verbose:
        print(text)
        print(f"written: {md_path} and {md_path.with_suffix('.json')}")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cpu", description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="fewer repeats (about a minute)")
    p.add_argument("--out", default=None, help="results directory (default: results/)")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
