"""This machine's ceilings, measured with kiln-compiled kernels: peak FLOP/s and bandwidth.

Shared by the suites that report "% of peak" (``cpu``, ``ops``):

* **peak FLOP/s** (:func:`bench_peak`): per thread, ``R`` independent accumulator vectors of
  ``VL`` fp32 lanes (one vector register each) updated by ``acc += x * w[t]`` for ``T`` steps —
  ``R`` independent FMA chains at full vector width, operands in registers;
* **memory bandwidth** (:func:`bench_triad`): a STREAM-style triad ``a = b + 3 * c`` on arrays
  far larger than the caches (3 x 4 bytes counted per element, as STREAM does).

:func:`measure` runs both once per process and settings (a second suite in the same
``kiln bench`` run reuses the figures instead of measuring again).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks import common
from kiln.topi.x86 import lanes as _lanes

VL = _lanes("float32")  # fp32 lanes of one vector register of this machine (16 AVX-512, 8 AVX2)


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


def bench_peak(cfg: dict[str, Any], threads: int | None = None) -> dict[str, Any]:
    """The FMA kernel with ``threads`` parallel iterations (default: kiln's thread count),
    timed with that many threads."""
    import contextlib

    import kiln

    limited = threads is not None and threads != common.omp_threads()
    threads = threads or common.omp_threads()
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
    with common.threads_limited(threads) if limited else contextlib.nullcontext():
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


_MEASURED: dict[tuple, dict[str, Any]] = {}


def measure(cfg: dict[str, Any]) -> dict[str, Any]:
    """``{"peak": bench_peak(cfg), "triad": bench_triad(cfg)}``, measured once per process for
    the same thread count and settings (``repeat``, ``min_time``, ``peak_steps``,
    ``triad_n``); later calls return the first measurement."""
    key = (common.omp_threads(), cfg["repeat"], cfg["min_time"], cfg["peak_steps"],
           cfg["triad_n"])
    if key not in _MEASURED:
        found = {"peak": bench_peak(cfg), "triad": bench_triad(cfg), "peak_1thread": None}
        if key[0] > 1:
            try:
                found["peak_1thread"] = bench_peak(cfg, threads=1)
            except RuntimeError:  # no threadpoolctl: cannot limit the threads
                pass
        _MEASURED[key] = found
    return _MEASURED[key]


def peak_gflops(measured: dict[str, Any], threads: int | None = None) -> float:
    """The best measured peak for ``threads`` (None: all of kiln's threads); for one thread
    without a 1-thread measurement, the peak divided by the thread count."""
    peak = measured["peak"]
    if threads is None or threads == peak["threads"]:
        return peak["gflops_best"]
    if threads == 1 and measured.get("peak_1thread"):
        return measured["peak_1thread"]["gflops_best"]
    return peak["gflops_best"] * threads / peak["threads"]


def settings(quick: bool) -> dict[str, Any]:
    """Repeats and sizes of the peak and triad measurements (shared by every suite, so that
    :func:`measure` measures once per ``kiln bench`` run)."""
    # 2^20 FMA steps: a call of a few ms, so that waking the second thread is noise (with
    # 2^16, ~0.4 ms calls, a 2-core AVX2 VM measured 69-124 GFLOP/s on 2 threads against
    # 142-154 with longer calls and 157+ for numpy's GEMM)
    if quick:
        return {"repeat": 5, "min_time": 0.05, "peak_steps": 1 << 20, "triad_n": 1 << 24}
    return {"repeat": 11, "min_time": 0.1, "peak_steps": 1 << 20, "triad_n": 1 << 25}


def summary(measured: dict[str, Any]) -> list[str]:
    """Two markdown lines: the measured peak and bandwidth."""
    peak, triad = measured["peak"], measured["triad"]
    return [
        f"Measured peak (kiln FMA kernel, {peak['threads']} threads × "
        f"{peak['chains_per_thread']} chains × {peak['lanes']} lanes): "
        f"**{peak['gflops_best']:.1f} GFLOP/s** best (the % of peak below), "
        f"{peak['gflops_median']:.1f} median"
        + ("" if peak["correct"] else " (WRONG RESULT)")
        + (f"; 1 thread: {measured['peak_1thread']['gflops_best']:.1f} best"
           if measured.get("peak_1thread") else ""),
        "",
        f"Memory bandwidth (kiln STREAM triad, {triad['n']} fp32): "
        f"**{triad['gb_s_best']:.1f} GB/s** best (the % of bandwidth below), "
        f"{triad['gb_s_median']:.1f} median; numpy multiply+add {triad['numpy_gb_s_median']:.1f} "
        "GB/s (same 3 arrays counted)" + ("" if triad["correct"] else " (WRONG RESULT)"),
    ]
