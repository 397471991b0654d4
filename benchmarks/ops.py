"""Operator suite (issue 4): kiln's CPU operators against numpy, PyTorch and scipy.

``python -m benchmarks ops [--quick]`` measures, in one process:

* the book's chapter 4 operators at the book's sizes with the schedules of examples/book/
  (vector add, broadcast add, blocked matmul, conv, packed conv, depthwise conv, max/avg
  pooling, batch norm);
* the course assignment's conv1d (examples/assignment/conv1d_cpu.py) at M=4096, N=128 and
  the test sizes, against ``np.convolve``;
* ResNet-18's 3x3 convolutions (64@56², 128@28², 256@14², 512@7²) and depthwise 3x3 layers
  (256@56², 512@14²) as ``relay.build`` compiles them (``topi.x86`` on the packed NCHW16c
  layout; the data is packed once beforehand: the times exclude the layout conversion), and
  ResNet's 3x3/2 pooling of 64@112².

Every case is checked before it is timed: kiln's output and each reference's output
against a float64 numpy computation. Then kiln and the references are timed interleaved in
this process (``common.interleaved``: median of rounds), with repeat counts chosen from a
first timing so that a case takes about ``case_budget_s``. Reported: time, GFLOP/s (or GB/s
for memory-bound work), the speedup over each reference (reference time / kiln time) and
the share of this machine's measured peak FLOP/s or triad bandwidth (benchmarks/peak.py).

Writes ``results/ops.json``, ``results/ops.md`` and one PNG per operator group
(``results/ops_<group>.png``: GFLOP/s, GB/s or time against size, kiln beside numpy and
PyTorch, as the book draws them). Nothing here asserts on timings.
"""

from __future__ import annotations

import gc
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/ops.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks import peak as peak_mod  # noqa: E402
from benchmarks.common import load_example  # noqa: E402
from benchmarks.foundation import fresh_cache  # noqa: E402
from kiln import topi  # noqa: E402
from kiln.topi.x86 import lanes  # noqa: E402

NAME = "ops"
DESCRIPTION = ("book ch. 4 operators, conv1d, ResNet-18 conv/depthwise/pool vs numpy, PyTorch, "
               "scipy (issue 4)")

BLOCK = lanes("float32")  # channel block of the packed layouts: one vector register of fp32

# ---------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------


@dataclass
class Candidate:
    """One timed statement: ``stmt`` runs with the case's ``env`` as globals; ``fetch``
    turns what the statement returns (or the env) into the output to check."""

    stmt: str
    fetch: Callable[[Any], np.ndarray]
    truth: np.ndarray | None = None  # what this candidate computes, if not the case's truth


@dataclass
class Prepared:
    env: dict[str, Any]
    candidates: dict[str, Candidate]  # "kiln" first, then references
    truth: np.ndarray  # float64 result computed independently with numpy
    build_s: float = 0.0


@dataclass
class Case:
    """One workload at one size."""

    group: str  # operator group, e.g. "conv2d_resnet"
    label: str  # the size, e.g. "64@56²"
    x: float  # the plot's x value
    kind: str  # "compute" (GFLOP/s, % of peak FLOP/s) or "memory" (GB/s, % of bandwidth)
    amount: float  # FLOPs (compute) or bytes moved (memory) per call
    prepare: Callable[[], Prepared]
    schedule: str  # which kiln schedule
    goal: tuple[str, float] | None = None  # (reference, min speedup) or ("bandwidth", share)
    quick: bool = False  # part of --quick
    blas: bool = False  # a reference calls BLAS (OpenBLAS threads spin after each call)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.group}.{self.label}"


GROUPS: dict[str, str] = {}  # group -> title, in report order


def _torch():
    """PyTorch, or None when it is not installed.

    kiln puts ``OMP_WAIT_POLICY=passive`` and a short ``GOMP_SPINCOUNT`` in the environment
    before PyTorch's OpenMP runtime reads them, so PyTorch's threads also sleep soon after a
    call. With PyTorch's default (spin for milliseconds after each call) its idle threads
    hold the cores while kiln's threads wait for them: every interleaved kiln measurement
    came out 5-100x slower."""
    import kiln  # noqa: F401 - sets OMP_WAIT_POLICY before torch's OpenMP runtime reads it

    try:
        import torch
    except ImportError:
        return None
    return torch


def _build(sch, args):
    import kiln

    t0 = time.perf_counter()
    mod = kiln.build(sch, list(args), "llvm")
    return mod, time.perf_counter() - t0


def _nd(*arrays):
    import kiln

    return [kiln.nd.array(a) for a in arrays]


def _np_out(r):
    return np.asarray(r)


def _torch_out(r):
    return r.detach().numpy()


def _rng(*key) -> np.random.Generator:
    """A generator seeded by ``key`` alone, the same in every process (``hash`` of a string
    is salted per process)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _normal(rng, shape) -> np.ndarray:
    """Random float32 data in [-1, 1) (uniform: ~10x faster to draw than normal for the
    2^25 and 8192² arrays)."""
    x = rng.random(shape, dtype=np.float32)
    x *= 2.0
    x -= 1.0
    return x


# --- the convolution references (float64 truth, numpy and torch statements) -------------


def conv2d_truth(x: np.ndarray, w: np.ndarray, pad: int, stride: int = 1) -> np.ndarray:
    """x (C, H, W), w (F, C, k, k) -> (F, OH, OW) in float64: zero padding, cross-correlation."""
    k = w.shape[-1]
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    return np.einsum("chwij,fcij->fhw", win, w.astype(np.float64), optimize=True)


def depthwise_truth(x: np.ndarray, w: np.ndarray, pad: int, stride: int = 1) -> np.ndarray:
    """x (C, H, W), w (C, 1, k, k) -> (C, OH, OW) in float64."""
    k = w.shape[-1]
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    return np.einsum("chwij,cij->chw", win, w[:, 0].astype(np.float64))


def np_conv2d(x, w, pad):
    """numpy's convolution: a BLAS contraction over the sliding windows (im2col + GEMM)."""
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(1, 2))
    return np.einsum("chwij,fcij->fhw", win, w, optimize=True)


def np_depthwise(x, w, pad, stride=1):
    """numpy's depthwise convolution: one multiply-add of shifted slices per kernel tap."""
    c, h, wd = x.shape
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    out = np.zeros((c, oh, ow), x.dtype)
    for i in range(k):
        for j in range(k):
            out += w[:, 0, i, j, None, None] * xp[:, i:i + stride * oh:stride,
                                                   j:j + stride * ow:stride]
    return out


def np_pool(x, kind, k, pad, stride):
    """numpy's pooling: max or mean over sliding windows (padding: -inf or 0, counted)."""
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    return win.max(axis=(-2, -1)) if kind == "max" else win.mean(axis=(-2, -1))


def pack_nchwc(x: np.ndarray, cb: int) -> np.ndarray:
    """(C, H, W) -> (1, C/cb, H, W, cb)."""
    c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(c // cb, cb, h, w).transpose(0, 2, 3, 1))[None]


def unpack_nchwc(y: np.ndarray) -> np.ndarray:
    """(1, C/cb, H, W, cb) -> (C, H, W)."""
    _, cc, h, w, cb = y.shape
    return y[0].transpose(0, 3, 1, 2).reshape(cc * cb, h, w)


def pack_kernel(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """(F, C, kh, kw) -> (F/ob, C/ib, kh, kw, ib, ob)."""
    f, c, kh, kw = w.shape
    return np.ascontiguousarray(
        w.reshape(f // ob, ob, c // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def _add_torch(cands: dict[str, Candidate], env: dict[str, Any], setup: Callable, stmt: str):
    torch = _torch()
    if torch is None:
        return
    env.update(setup(torch))
    env["torch"] = torch
    env["F"] = torch.nn.functional
    cands["torch"] = Candidate(stmt, _torch_out)


# --- book chapter 4 -----------------------------------------------------------------------


def _add_triad(cands: dict[str, Candidate], env: dict[str, Any], count: int) -> None:
    """The STREAM triad (benchmarks/peak.py) on ``count`` elements as one more candidate:
    timed interleaved with kiln's memory-bound kernel, so "% of bandwidth" compares two
    kernels measured under the same load."""
    import kiln

    s, args = peak_mod.triad_schedule(count)
    tmod = kiln.build(s, args, "llvm")
    b = np.ones(count, "float32")
    c = np.full(count, 2.0, "float32")
    tb, tc, ta = kiln.nd.array(b), kiln.nd.array(c), kiln.nd.empty((count,), "float32")
    env.update(triad_mod=tmod, triad_b=tb, triad_c=tc, triad_a=ta)
    cands["triad"] = Candidate("triad_mod(triad_b, triad_c, triad_a)", lambda r: ta.numpy(),
                               truth=np.full(count, 7.0))


def _binary_op(mod, a: np.ndarray, b: np.ndarray, out_shape: tuple[int, ...], op: str
               ) -> tuple[dict[str, Any], dict[str, Candidate]]:
    """``env, cands`` for a kiln module computing ``C = op(A, B)``: kiln, numpy's
    ``np.<op>(a, b, out=c)`` and (when installed) ``torch.<op>(ta, tb, out=tc)``."""
    A, B, C = _nd(a, b, np.empty(out_shape, "float32"))
    c = np.empty(out_shape, "float32")
    env = {"mod": mod, "A": A, "B": B, "C": C, "a": a, "b": b, "c": c, "np": np}
    cands = {"kiln": Candidate("mod(A, B, C)", lambda r: C.numpy()),
             "numpy": Candidate(f"np.{op}(a, b, out=c)", _np_out)}
    _add_torch(cands, env, lambda t: {"ta": t.from_numpy(a), "tb": t.from_numpy(b),
                                      "tc": t.from_numpy(np.empty(out_shape, "float32"))},
               f"torch.{op}(ta, tb, out=tc)")
    return env, cands


def vector_add_case(n: int, factor: int, triad: bool = False) -> Callable[[], Prepared]:
    def prepare():
        ex = load_example("book", "ch4_3_vector_add")
        s, args = ex.vectorized(n, factor=factor, min_parallel=1 << 16)
        mod, bs = _build(s, args)
        rng = _rng("vadd", n)
        a, b = _normal(rng, n), _normal(rng, n)
        env, cands = _binary_op(mod, a, b, (n,), "add")
        if triad:
            _add_triad(cands, env, n)
        return Prepared(env, cands, a.astype(np.float64) + b, bs)
    return prepare


def broadcast_add_case(n: int, triad: bool = False) -> Callable[[], Prepared]:
    def prepare():
        ex = load_example("book", "ch4_4_broadcast_add")
        s, args = ex.good_schedule(n, min_parallel=1 << 16)
        mod, bs = _build(s, args)
        rng = _rng("bcast", n)
        a, b = _normal(rng, (n, 1)), _normal(rng, (n, n))
        env, cands = _binary_op(mod, a, b, (n, n), "add")
        if triad:
            _add_triad(cands, env, n * n)
        return Prepared(env, cands, a.astype(np.float64) + b, bs)
    return prepare


def matmul_case(n: int) -> Callable[[], Prepared]:
    def prepare():
        ex = load_example("book", "ch4_6_blocking")
        s, args = ex.cached_block(n)
        mod, bs = _build(s, args)
        rng = _rng("matmul", n)
        a, b = _normal(rng, (n, n)), _normal(rng, (n, n))
        env, cands = _binary_op(mod, a, b, (n, n), "matmul")
        return Prepared(env, cands, a.astype(np.float64) @ b, bs)
    return prepare


def book_conv_case(c: int, n: int, k: int, packed: bool) -> Callable[[], Prepared]:
    def prepare():
        if packed:
            s, args = load_example("book", "ch4_8_packed_conv").cached_block(c, c, n, k, 1, 1)
        else:
            s, args = load_example("book", "ch4_7_conv").cached_block(c, c, n, k, 1, 1)
        mod, bs = _build(s, args)
        rng = _rng("conv", c, n, k)
        x, w = _normal(rng, (c, n, n)), _normal(rng, (c, c, k, k))
        X, W, Y = _nd(x, w, np.empty((c, n, n), "float32"))
        env = {"mod": mod, "X": X, "W": W, "Y": Y, "x": x, "w": w, "np_conv2d": np_conv2d}
        cands = {"kiln": Candidate("mod(X, W, Y)", lambda r: Y.numpy()),
                 "numpy": Candidate("np_conv2d(x, w, 1)", _np_out)}
        _add_torch(cands, env, lambda t: {"tx": t.from_numpy(x)[None], "tw": t.from_numpy(w)},
                   "F.conv2d(tx, tw, padding=1)")
        if "torch" in cands:
            cands["torch"].fetch = lambda r: r[0].numpy()
        return Prepared(env, cands, conv2d_truth(x, w, 1), bs)
    return prepare


def book_depthwise_case(c: int, n: int, k: int) -> Callable[[], Prepared]:
    def prepare():
        s, args = load_example("book", "ch4_9_depthwise_conv").depthwise_cached_block(c, n, k, 1, 1)
        mod, bs = _build(s, args)
        rng = _rng("dw", c, n, k)
        x, w = _normal(rng, (c, n, n)), _normal(rng, (c, 1, k, k))
        X, W, Y = _nd(x, w, np.empty((c, n, n), "float32"))
        env = {"mod": mod, "X": X, "W": W, "Y": Y, "x": x, "w": w, "np_dw": np_depthwise}
        cands = {"kiln": Candidate("mod(X, W, Y)", lambda r: Y.numpy()),
                 "numpy": Candidate("np_dw(x, w, 1)", _np_out)}
        _add_torch(cands, env, lambda t: {"tx": t.from_numpy(x)[None], "tw": t.from_numpy(w)},
                   f"F.conv2d(tx, tw, padding=1, groups={c})")
        if "torch" in cands:
            cands["torch"].fetch = lambda r: r[0].numpy()
        return Prepared(env, cands, depthwise_truth(x, w, 1), bs)
    return prepare


def book_pool_case(kind: str, c: int, n: int, k: int, fast: bool = True
                   ) -> Callable[[], Prepared]:
    def prepare():
        ex = load_example("book", "ch4_10_pooling")
        if fast:
            s, args = ex.fast_pool(kind, (c, n, k))
        else:
            s, args = (ex.optimized_max if kind == "max" else ex.schedule_avg)((c, n, k))
        mod, bs = _build(s, args)
        x = _normal(_rng("pool", kind, c, n, k), (c, n, n))
        X, Y = _nd(x, np.empty((c, n, n), "float32"))
        env = {"mod": mod, "X": X, "Y": Y, "x": x, "np_pool": np_pool}
        cands = {"kiln": Candidate("mod(X, Y)", lambda r: Y.numpy()),
                 "numpy": Candidate(f"np_pool(x, {kind!r}, {k}, 1, 1)", _np_out)}
        stmt = (f"F.max_pool2d(tx, {k}, 1, 1)" if kind == "max"
                else f"F.avg_pool2d(tx, {k}, 1, 1, count_include_pad=True)")
        _add_torch(cands, env, lambda t: {"tx": t.from_numpy(x)[None]}, stmt)
        if "torch" in cands:
            cands["torch"].fetch = lambda r: r[0].numpy()
        return Prepared(env, cands, np_pool(x.astype(np.float64), kind, k, 1, 1), bs)
    return prepare


def batch_norm_case(c: int, n: int, variant: str) -> Callable[[], Prepared]:
    def prepare():
        ex = load_example("book", "ch4_11_batch_norm")
        s, args = getattr(ex, variant)((c, n))
        mod, bs = _build(s, args)
        rng = _rng("bn", c, n)
        x = _normal(rng, (c, n, n))
        mean, gamma, beta = (_normal(rng, (c, 1, 1)) for _ in range(3))
        var = (0.1 + np.abs(1.0 + _normal(rng, (c, 1, 1)))).astype("float32")
        arrays = _nd(x, mean, var, gamma, beta, np.empty((c, n, n), "float32"))
        env = {"mod": mod, "args": arrays, "x": x, "mean": mean, "var": var, "gamma": gamma,
               "beta": beta, "np": np}
        cands = {"kiln": Candidate("mod(*args)", lambda r: arrays[-1].numpy()),
                 "numpy": Candidate("(x - mean) / np.sqrt(var + 1e-5) * gamma + beta",
                                    _np_out)}
        _add_torch(cands, env, lambda t: {
            "tx": t.from_numpy(x)[None],
            **{f"t{k}": t.from_numpy(v.reshape(c))
               for k, v in (("m", mean), ("v", var), ("g", gamma), ("b", beta))}},
            "F.batch_norm(tx, tm, tv, tg, tb, training=False, eps=1e-5)")
        if "torch" in cands:
            cands["torch"].fetch = lambda r: r[0].numpy()
        x64 = x.astype(np.float64)
        truth = (x64 - mean) / np.sqrt(var.astype(np.float64) + 1e-5) * gamma + beta
        return Prepared(env, cands, truth, bs)
    return prepare


# --- the assignment's conv1d ------------------------------------------------------------


def conv1d_case(m: int, n: int) -> Callable[[], Prepared]:
    def prepare():
        ex = load_example("assignment", "conv1d_cpu")
        s, A, W, B = ex.make_conv1d_cpu_scheduler_toeplitz(m, n)
        mod, bs = _build(s, (A, W, B))
        rng = _rng("conv1d", m, n)
        a, w = _normal(rng, m), _normal(rng, n)
        Ak, Wk, Bk = _nd(a, w, np.empty(m + n - 1, "float32"))
        env = {"mod": mod, "A": Ak, "W": Wk, "B": Bk, "a": a, "w": w, "np": np}
        cands = {"kiln": Candidate("mod(A, W, B)", lambda r: Bk.numpy()),
                 "numpy": Candidate("np.convolve(a, w)", _np_out)}
        try:
            from scipy import signal
        except ImportError:
            signal = None
        if signal is not None:  # direct or FFT, whichever scipy estimates faster
            env["signal"] = signal
            cands["scipy"] = Candidate("signal.convolve(a, w)", _np_out)
        _add_torch(cands, env, lambda t: {"ta": t.from_numpy(a)[None, None],
                                          "tw": t.from_numpy(w[::-1].copy())[None, None]},
                   f"F.conv1d(ta, tw, padding={n - 1})")
        if "torch" in cands:
            cands["torch"].fetch = lambda r: r[0, 0].numpy()
        return Prepared(env, cands, np.convolve(a.astype(np.float64), w.astype(np.float64)),
                        bs)
    return prepare


# --- ResNet-18 layers with topi.x86 -------------------------------------------------------


def _layer(name: str, *args, **kw):
    s, tensors = getattr(load_example("cpu", "layers"), name)(*args, **kw)
    mod, bs = _build(s, tensors)
    shapes = [tuple(int(d) for d in t.shape) for t in tensors]
    return mod, bs, shapes


def _topi_layer(compute: Callable, schedule: Callable, data_shape: tuple, kernel_shape: tuple,
                *args):
    """A packed layer as ``relay.build`` compiles it: the ``topi.nn`` compute
    ``compute(data, kernel, *args)`` scheduled by the ``topi.x86`` ``schedule``."""
    from kiln import te

    data = te.placeholder(data_shape, name="data")
    kernel = te.placeholder(kernel_shape, name="kernel")
    out = compute(data, kernel, *args)
    mod, bs = _build(schedule([out]), (data, kernel, out))
    return mod, bs, [tuple(int(d) for d in t.shape) for t in (data, kernel, out)]


def resnet_conv_case(c: int, n: int, k: int = 3, stride: int = 1) -> Callable[[], Prepared]:
    """kiln's convolution as the compiler picks it: Winograd (kernel transformed ahead of
    time, as for a model's constant weights) where ``topi.nn.winograd_tile`` says it pays,
    the direct packed convolution otherwise (``topi.x86.schedule_conv2d_NCHWc``, blocks of
    BLOCK channels: what a model runs); the direct one is also timed (``direct``)."""
    def prepare():
        pad = k // 2
        mod, bs, shapes = _topi_layer(
            topi.nn.conv2d_NCHWc, topi.x86.schedule_conv2d_NCHWc, (1, c // BLOCK, n, n, BLOCK),
            (c // BLOCK, c // BLOCK, k, k, BLOCK, BLOCK), stride, pad, 1)
        rng = _rng("resnet_conv", c, n, k, stride)
        x, w = _normal(rng, (c, n, n)), _normal(rng, (c, c, k, k))
        ob = shapes[1][-1]  # the kernel's output block
        X, W, Y = _nd(pack_nchwc(x, BLOCK), pack_kernel(w, BLOCK, ob),
                      np.empty(shapes[-1], "float32"))
        env = {"mod": mod, "X": X, "W": W, "Y": Y, "x": x, "w": w, "np_conv2d": np_conv2d}
        direct = Candidate("mod(X, W, Y)", lambda r: unpack_nchwc(Y.numpy()))
        cands = {"kiln": direct}
        m = topi.nn.winograd_tile(n, n, c, c) if (k, stride) == (3, 1) else None
        if m:
            wmod, wbs, wshapes = _layer("conv2d_winograd", c, n, m=m, cb=BLOCK)
            bs = max(bs, wbs)
            env.update(wmod=wmod, U=_nd(topi.nn.winograd_weight_transform(w, m, BLOCK))[0],
                       YW=_nd(np.empty(wshapes[-1], "float32"))[0])
            cands = {"kiln": Candidate("wmod(X, U, YW)", lambda r: unpack_nchwc(
                env["YW"].numpy())), "direct": direct}
        if stride == 1:
            cands["numpy"] = Candidate(f"np_conv2d(x, w, {pad})", _np_out)
        _add_torch(cands, env, lambda t: {"tx": t.from_numpy(x)[None], "tw": t.from_numpy(w)},
                   f"F.conv2d(tx, tw, stride={stride}, padding={pad})")
        if "torch" in cands:
            cands["torch"].fetch = lambda r: r[0].numpy()
        return Prepared(env, cands, conv2d_truth(x, w, pad, stride), bs)
    return prepare


def resnet_depthwise_case(c: int, n: int, k: int = 3) -> Callable[[], Prepared]:
    def prepare():
        pad = k // 2
        mod, bs, shapes = _topi_layer(
            topi.nn.depthwise_conv2d_NCHWc, topi.x86.schedule_depthwise_conv2d_NCHWc,
            (1, c // BLOCK, n, n, BLOCK), (c // BLOCK, 1, k, k, 1, BLOCK), 1, pad, 1)
        rng = _rng("resnet_dw", c, n, k)
        x, w = _normal(rng, (c, n, n)), _normal(rng, (c, 1, k, k))
        wp = np.ascontiguousarray(w[:, 0].reshape(c // BLOCK, BLOCK, k, k)
                                  .transpose(0, 2, 3, 1))[:, None, :, :, None, :]
        X, W, Y = _nd(pack_nchwc(x, BLOCK), wp, np.empty(shapes[-1], "float32"))
        env = {"mod": mod, "X": X, "W": W, "Y": Y, "x": x, "w": w, "np_dw": np_depthwise}
        cands = {"kiln": Candidate("mod(X, W, Y)", lambda r: unpack_nchwc(Y.numpy())),
                 "numpy": Candidate(f"np_dw(x, w, {pad})", _np_out)}
        _add_torch(cands, env, lambda t: {"tx": t.from_numpy(x)[None], "tw": t.from_numpy(w)},
                   f"F.conv2d(tx, tw, padding={pad}, groups={c})")
        if "torch" in cands:
            cands["torch"].fetch = lambda r: r[0].numpy()
        return Prepared(env, cands, depthwise_truth(x, w, pad), bs)
    return prepare


def resnet_pool_case(kind: str, c: int, n: int, k: int = 3, stride: int = 2,
                     pad: int = 1) -> Callable[[], Prepared]:
    def prepare():
        mod, bs, shapes = _layer("pool", kind, c, n, k=k, stride=stride, pad=pad, cb=BLOCK)
        x = _normal(_rng("resnet_pool", kind, c, n), (c, n, n))
        X, Y = _nd(pack_nchwc(x, BLOCK), np.empty(shapes[-1], "float32"))
        env = {"mod": mod, "X": X, "Y": Y, "x": x, "np_pool": np_pool}
        cands = {"kiln": Candidate("mod(X, Y)", lambda r: unpack_nchwc(Y.numpy())),
                 "numpy": Candidate(f"np_pool(x, {kind!r}, {k}, {pad}, {stride})", _np_out)}
        stmt = (f"F.max_pool2d(tx, {k}, {stride}, {pad})" if kind == "max"
                else f"F.avg_pool2d(tx, {k}, {stride}, {pad}, count_include_pad=True)")
        _add_torch(cands, env, lambda t: {"tx": t.from_numpy(x)[None]}, stmt)
        if "torch" in cands:
            cands["torch"].fetch = lambda r: r[0].numpy()
        return Prepared(env, cands, np_pool(x.astype(np.float64), kind, k, pad, stride), bs)
    return prepare


# --- the list -------------------------------------------------------------------------------

BOOK_CHANNELS = [16, 32, 64, 128, 256]  # the book's 2**np.arange(4, 9), input 64x64, 3x3
BN_CHANNELS = [8, 16, 32, 64, 128, 256]  # the book's 2**np.arange(3, 9), input 28x28
CONV1D_SIZES = ([(4096, 128)] + [(m, 1024) for m in (1, 10, 100, 1000, 10000)]
                + [(1024, n) for n in (1, 10, 100, 1000, 10000)])
RESNET_CONV = [(64, 56), (128, 28), (256, 14), (512, 7)]
RESNET_DEPTHWISE = [(256, 56), (512, 14)]
BANDWIDTH_GOAL = ("bandwidth", 0.8)


def _title(group: str, title: str) -> str:
    GROUPS.setdefault(group, title)
    return group


def all_cases() -> list[Case]:
    """Every case of the full suite, in report order."""
    cases: list[Case] = []
    add = cases.append
    g = _title("vector_add", "Vector add c = a + b (book §4.3, `vectorized`, factor 16, "
                             "parallel from 2^16), GB/s: 3 arrays counted")
    for e in (5, 9, 13, 17, 21, 25):  # the book's 2**np.arange(5, 29, 4)
        n = 1 << e
        add(Case(g, f"2^{e}", n, "memory", 12.0 * n, vector_add_case(n, 16, triad=e == 25),
                 "ch4_3 vectorized(n, factor=16, min_parallel=2**16)",
                 goal=BANDWIDTH_GOAL if e == 25 else None, quick=e in (13, 25)))
    g = _title("broadcast_add", "Broadcast add (n, 1) + (n, n) (book §4.4, `good_schedule`, "
                                "parallel from 2^16), GB/s: 2 n² + n floats")
    for n in (32, 128, 512, 2048, 8192):  # the book's 2**np.arange(5, 15, 2)
        add(Case(g, f"{n}", n, "memory", 4.0 * (2 * n * n + n),
                 broadcast_add_case(n, triad=n == 8192),
                 "ch4_4 good_schedule(n, min_parallel=2**16)",
                 goal=BANDWIDTH_GOAL if n == 8192 else None, quick=n in (512, 8192)))
    g = _title("matmul", "Matmul n x n (book §4.6 `cached_block`, tiles 32 x 32, k by 4)")
    for n in (32, 64, 128, 256, 512, 1024, 2048):  # the book's 2**np.arange(5, 12)
        add(Case(g, f"{n}", n, "compute", 2.0 * n ** 3, matmul_case(n), "ch4_6 cached_block",
                 quick=n in (256, 1024), blas=True))
    g = _title("conv", "Convolution c -> c, 64², 3x3, pad 1 (book §4.7 `cached_block`)")
    for c in BOOK_CHANNELS:
        add(Case(g, f"{c}", c, "compute", 2.0 * c * c * 64 * 64 * 9,
                 book_conv_case(c, 64, 3, False), "ch4_7 cached_block", quick=c == 64,
                 blas=True))
    g = _title("packed_conv", "Packed convolution c -> c, 64², 3x3 (book §4.8, NCHW16c, "
                              "packing included)")
    for c in BOOK_CHANNELS:
        add(Case(g, f"{c}", c, "compute", 2.0 * c * c * 64 * 64 * 9,
                 book_conv_case(c, 64, 3, True), "ch4_8 cached_block", quick=c == 64,
                 blas=True))
    g = _title("depthwise", "Depthwise convolution c, 64², 3x3 (book §4.9, packing "
                            "included)")
    for c in BOOK_CHANNELS:
        add(Case(g, f"{c}", c, "compute", 2.0 * c * 64 * 64 * 9, book_depthwise_case(c, 64, 3),
                 "ch4_9 depthwise_cached_block", quick=c == 64))
    for kind in ("max", "avg"):
        g = _title(f"{kind}_pool", f"{kind.capitalize()} pooling c, 64², 3x3, stride 1, pad 1 "
                                   f"(book §4.10 sizes, kiln's `fast_pool`), GB/s: input + "
                                   "output")
        for c in BOOK_CHANNELS:
            add(Case(g, f"{c}", c, "memory", 8.0 * c * 64 * 64,
                     book_pool_case(kind, c, 64, 3), f"ch4_10 fast_pool({kind!r}, ...)",
                     goal=("torch", 3.0), quick=c == 64))
    for kind in ("max", "avg"):
        name = "optimized_max" if kind == "max" else "schedule_avg"
        g = _title(f"{kind}_pool_book", f"{kind.capitalize()} pooling c, 64², the book's "
                                        f"`{name}` (§4.10)")
        for c in BOOK_CHANNELS:
            add(Case(g, f"{c}", c, "memory", 8.0 * c * 64 * 64,
                     book_pool_case(kind, c, 64, 3, fast=False), f"ch4_10 {name}"))
    g = _title("batch_norm", "Batch norm c, 28² (book §4.11), GB/s: input + output")
    for c in BN_CHANNELS:
        add(Case(g, f"{c}", c, "memory", 8.0 * c * 28 * 28, batch_norm_case(c, 28, "fast_bn"),
                 "ch4_11 fast_bn", goal=("torch", 1.0), quick=c == 64))
    g = _title("batch_norm_book", "Batch norm c, 28², the book's `optimized_bn` (§4.11)")
    for c in BN_CHANNELS:
        add(Case(g, f"{c}", c, "memory", 8.0 * c * 28 * 28,
                 batch_norm_case(c, 28, "optimized_bn"), "ch4_11 optimized_bn",
                 quick=False))
    g = _title("conv1d", "conv1d, full, A: M, W: N (the assignment, "
                         "kiln's `make_conv1d_cpu_scheduler_toeplitz`)")
    for m, n in CONV1D_SIZES:
        add(Case(g, f"{m}x{n}", m * n, "compute", 2.0 * m * n, conv1d_case(m, n),
                 "conv1d_cpu toeplitz", goal=("numpy", 5.0) if (m, n) == (4096, 128) else None,
                 quick=(m, n) in ((4096, 128), (1024, 100))))
    g = _title("conv2d_resnet", f"ResNet-18 conv2d 3x3, C -> C, pad 1, batch 1 (NCHW{BLOCK}c, "
                                "layout conversion not timed; FLOPs counted as the direct "
                                "convolution's)")
    for c, n in RESNET_CONV:
        add(Case(g, f"{c}@{n}²", c, "compute", 2.0 * c * c * n * n * 9, resnet_conv_case(c, n),
                 "examples/cpu/layers.py conv2d_winograd (topi conv2d_winograd_NCHWc, F(4x4) "
                 "at 56² and 28², F(2x2) at 14²) or, at 7², topi conv2d_NCHWc with "
                 "schedule_conv2d_NCHWc (register blocks sized to the machine's vector "
                 "registers), as relay.build picks them",
                 goal=("torch", 1.3), quick=c == 64, blas=True))
    g = _title("depthwise_resnet", "Depthwise conv2d 3x3, pad 1, batch 1 (NCHW16c, layout "
                                   "conversion not timed)")
    for c, n in RESNET_DEPTHWISE:
        add(Case(g, f"{c}@{n}²", c, "compute", 2.0 * c * n * n * 9,
                 resnet_depthwise_case(c, n),
                 "topi depthwise_conv2d_NCHWc with schedule_depthwise_conv2d_NCHWc (rows in "
                 "parallel, blocks of pixels x the channel vector, masked padding inline), "
                 "as relay.build compiles it",
                 goal=("torch", 1.5), quick=c == 256))
    g = _title("pool_resnet", "ResNet-18 pooling 64@112², 3x3, stride 2, pad 1 (NCHW16c, "
                              "layout conversion not timed), GB/s: input + output")
    for kind in ("max", "avg"):
        add(Case(g, kind, 0 if kind == "max" else 1, "memory",
                 4.0 * 64 * (112 * 112 + 56 * 56), resnet_pool_case(kind, 64, 112),
                 "examples/cpu/layers.py pool (topi.x86 schedule_pool, pad block unrolled)",
                 goal=("torch", 3.0), quick=kind == "max"))
    return cases


# ---------------------------------------------------------------------------------------
# checking and timing
# ---------------------------------------------------------------------------------------


def check(prep: Prepared, rtol: float = 1e-3) -> dict[str, dict[str, Any]]:
    """Run every candidate once and compare its output with the float64 truth: ``{name:
    {"ok", "max_err", "first_call_s"}}``; the error is relative to the largest |truth|."""
    found = {}
    for name, cand in prep.candidates.items():
        truth = prep.truth if cand.truth is None else cand.truth
        scale = max(1.0, float(np.max(np.abs(truth)))) if truth.size else 1.0
        t0 = time.perf_counter()
        ret = eval(cand.stmt, prep.env)  # noqa: S307 - our own statements
        first = time.perf_counter() - t0
        try:
            out = np.asarray(cand.fetch(ret), dtype=np.float64)
            if out.shape != truth.shape:
                raise ValueError(f"shape {out.shape}, expected {truth.shape}")
            err = float(np.max(np.abs(out - truth))) / scale if truth.size else 0.0
            ok = bool(np.isfinite(err) and err <= rtol)
        except Exception as e:  # a wrong shape or a failed conversion: not comparable
            err, ok = None, False
            found[name] = {"ok": False, "max_err": None, "error": str(e), "first_call_s": first}
            continue
        found[name] = {"ok": ok, "max_err": err, "first_call_s": first}
    return found


def time_case(prep: Prepared, names: list[str], cfg: dict[str, Any], blas: bool,
              first_s: float) -> dict[str, common.Timing]:
    """Interleaved timings of ``names``; repeats adapted so the case takes about
    ``cfg["case_budget_s"]`` (at least ``min_repeat``, at most ``max_repeat`` rounds)."""
    min_time = max(cfg["min_time"], cfg["blas_min_time"] if blas else 0.0)
    per_round = len(names) * max(min_time, first_s)
    repeat = int(min(cfg["max_repeat"], max(cfg["min_repeat"], cfg["case_budget_s"] / per_round)))
    if blas:
        repeat = min(repeat, cfg["blas_max_repeat"])
    stmts = {name: prep.candidates[name].stmt for name in names}
    # numpy's OpenBLAS workers spin for a while after a call: let them go to sleep before
    # the next candidate is measured
    settle = {"numpy": cfg["blas_settle_s"]} if blas else None
    return common.interleaved(stmts, prep.env, repeat=repeat, min_time=min_time, warmup=2,
                              settle=settle)


def run_case(case: Case, cfg: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    row: dict[str, Any] = {"key": case.key, "group": case.group, "label": case.label,
                           "x": case.x, "kind": case.kind, "amount": case.amount,
                           "schedule": case.schedule, "goal": case.goal}
    try:
        prep = case.prepare()
    except Exception as e:  # a schedule that fails to build is reported, not fatal
        row.update(error=f"{type(e).__name__}: {e}", correct=False)
        return row
    checks = check(prep)
    row["build_s"] = prep.build_s
    row["checks"] = checks
    row["correct"] = checks["kiln"]["ok"]
    timed = ["kiln"] + [n for n in prep.candidates if n != "kiln" and checks[n]["ok"]]
    row["references_wrong"] = [n for n in prep.candidates if n != "kiln" and not checks[n]["ok"]]
    if not row["correct"]:
        timed = []  # a wrong kiln result is not timed
    if timed:
        first = max(checks[n]["first_call_s"] for n in timed)
        timings = time_case(prep, timed, cfg, case.blas, first)
        row["timing"] = {n: t.to_dict() for n, t in timings.items()}
        tk = timings["kiln"].median
        row["kiln_s"] = tk
        row["speedup"] = {n: timings[n].median / tk for n in timed if n not in ("kiln", "triad")}
        if case.kind == "compute":
            row["kiln_rate"] = case.amount / tk / 1e9
            row["pct"] = 100.0 * row["kiln_rate"] / peak_mod.peak_gflops(measured)
        else:
            row["kiln_rate"] = case.amount / tk / 1e9
            if "triad" in timings:  # the triad timed in this case, under the same load
                count = prep.env["triad_a"].shape[0]
                row["triad_gb_s"] = 12.0 * count / timings["triad"].median / 1e9
                row["pct"] = 100.0 * row["kiln_rate"] / row["triad_gb_s"]
            else:
                row["pct"] = 100.0 * row["kiln_rate"] / measured["triad"]["gb_s_best"]
        row["rates"] = {n: case.amount / timings[n].median / 1e9 for n in timed}
        row["met"] = goal_met(case.goal, row)
    del prep
    gc.collect()
    row["case_s"] = time.perf_counter() - t0
    return row


def goal_met(goal: tuple[str, float] | None, row: dict[str, Any]) -> bool | None:
    if goal is None:
        return None
    ref, target = goal
    if ref == "bandwidth":
        return row["pct"] >= 100.0 * target
    speedup = row.get("speedup", {}).get(ref)
    return None if speedup is None else speedup >= target


# ---------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------

REFS = ("numpy", "torch", "scipy", "direct")  # direct: kiln's direct conv where kiln's is not


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds * 1e3:.3f}" if seconds < 1e-2 else f"{seconds * 1e3:.2f}"


def goal_text(goal: tuple[str, float] | None) -> str:
    if goal is None:
        return ""
    ref, target = goal
    if ref == "bandwidth":
        return f"≥ {target:.0%} of bandwidth"
    return f"≥ {target:g}× {ref}"


def group_table(rows: list[dict[str, Any]]) -> list[str]:
    refs = [r for r in REFS if any(r in row.get("checks", {}) for row in rows)]
    unit = "GFLOP/s" if rows[0]["kind"] == "compute" else "GB/s"
    pct = "% of peak" if rows[0]["kind"] == "compute" else "% of bandwidth"
    head = ["size", "kiln ms", f"kiln {unit}", pct]
    for r in refs:
        head += [f"{r} ms", f"× {r}"]
    head += ["goal", "met", "correct"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if "timing" not in row:
            why = row.get("error") or "WRONG RESULT: not timed"
            lines.append(f"| {row['label']} | {why} |" + " |" * (len(head) - 2))
            continue
        cells = [row["label"], _ms(row["kiln_s"]), f"{row['kiln_rate']:.1f}",
                 f"{row['pct']:.0f}%"]
        for r in refs:
            t = row["timing"].get(r)
            if t is None:
                wrong = r in row.get("references_wrong", [])
                cells += ["wrong" if wrong else "—", "—"]
            else:
                cells += [_ms(t["median_s"]), f"{row['speedup'][r]:.2f}×"]
        met = {True: "yes", False: "**no**", None: ""}[row.get("met")]
        cells += [goal_text(row["goal"]), met, "yes" if row["correct"] else "NO"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot_group(group: str, rows: list[dict[str, Any]], out: Path) -> Path | None:
    rows = [r for r in rows if "rates" in r]
    if len(rows) < 1:
        return None
    names = ["kiln"] + [r for r in REFS if any(r in row["rates"] for row in rows)]
    kind = rows[0]["kind"]
    labels = [r["label"] for r in rows]
    series = {n: [row["rates"].get(n) for row in rows] for n in names}
    numeric = all(isinstance(r["x"], int | float) and r["x"] > 0 for r in rows) and len(
        {r["x"] for r in rows}) == len(rows)
    xs = [r["x"] for r in rows]
    return common.plot_series(
        out / f"{NAME}_{group}.png", GROUPS.get(group, group).split(" (")[0], xs if numeric
        else labels, series, xlabel="size", ylabel="GFLOP/s" if kind == "compute" else "GB/s",
        logx=numeric and max(xs) / min(xs) > 16, logy=True,
        xticklabels=labels, categorical=not numeric)


def markdown(rows: list[dict[str, Any]], measured: dict[str, Any]) -> list[str]:
    lines = [*peak_mod.summary(measured), "",
             "Times are medians of interleaved rounds; `× ref` is the reference's time over "
             "kiln's (above 1: kiln is faster). A goal row is judged on that speedup, or on "
             "kiln's GB/s against the triad's (on the goal rows, a triad of the same size timed "
             "interleaved in the same case; elsewhere the suite's best triad). numpy's "
             "elementwise operations use 1 thread; "
             "BLAS, PyTorch and kiln use the same thread count.", ""]
    for group, title in GROUPS.items():
        grows = [r for r in rows if r["group"] == group]
        if not grows:
            continue
        lines += [f"### {title}", "", f"kiln schedule: {grows[0]['schedule']}", "",
                  *group_table(grows), ""]
    return lines


def summary_table(rows: list[dict[str, Any]]) -> list[str]:
    """One line per goal row: the short table of the README and docs/performance.md."""
    lines = ["| workload | size | kiln ms | kiln | speedup | goal | met |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        if row.get("goal") is None or "timing" not in row:
            continue
        ref, _ = row["goal"]
        unit = "GFLOP/s" if row["kind"] == "compute" else "GB/s"
        if ref == "bandwidth":
            got = f"{row['pct']:.0f}% of bandwidth"
        else:
            s = row["speedup"].get(ref)
            got = "—" if s is None else f"{s:.2f}× {ref}"
        met = {True: "yes", False: "no", None: "—"}[row.get("met")]
        lines.append(f"| {row['group']} | {row['label']} | {_ms(row['kiln_s'])} | "
                     f"{row['kiln_rate']:.1f} {unit} | {got} | {goal_text(row['goal'])} | "
                     f"{met} |")
    return lines


# ---------------------------------------------------------------------------------------
# the suite
# ---------------------------------------------------------------------------------------


def settings(quick: bool) -> dict[str, Any]:
    cfg = {"quick": quick, **peak_mod.settings(quick)}
    if quick:
        cfg.update(case_budget_s=0.25, min_repeat=3, max_repeat=5, min_time=0.01,
                   blas_min_time=0.03, blas_max_repeat=3, blas_settle_s=0.1)
    else:
        cfg.update(case_budget_s=1.0, min_repeat=3, max_repeat=11, min_time=0.03,
                   blas_min_time=0.1, blas_max_repeat=5, blas_settle_s=0.1)
    return cfg


def select(cases: list[Case], quick: bool, only: Sequence[str] | None) -> list[Case]:
    if only:
        return [c for c in cases if c.group in only or c.key in only]
    return [c for c in cases if c.quick] if quick else cases


def run_cases(cases: list[Case], cfg: dict[str, Any], measured: dict[str, Any],
              say: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    for i, case in enumerate(cases, 1):
        row = run_case(case, cfg, measured)
        rows.append(row)
        if "timing" in row:
            sp = ", ".join(f"{k} {v:.2f}x" for k, v in row["speedup"].items())
            say(f"{i}/{len(cases)} {case.key}: {row['kiln_s'] * 1e3:.3f} ms ({sp})")
        else:
            say(f"{i}/{len(cases)} {case.key}: {row.get('error') or 'WRONG RESULT'}")
    return rows


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, only: Sequence[str] | None = None) -> str:
    """Run the suite (or the groups/keys in ``only``), write ``<out_dir>/ops.{json,md}`` and
    the plots, return the markdown."""
    del profile
    started = time.time()
    t0 = time.perf_counter()
    cfg = settings(quick)
    load_start = common.load_average()
    out = common.results_dir(out_dir)
    say = common.progress(NAME, verbose)
    torch = _torch()
    threads = common.omp_threads()
    grad = None
    if torch is not None:
        torch.set_num_threads(threads)
        grad = torch.is_grad_enabled()
        torch.set_grad_enabled(False)  # torch.no_grad for the whole suite
    say("peak FMA and triad ...")
    measured = peak_mod.measure(cfg)
    cases = select(all_cases(), quick, only)
    rows = []
    try:
        with fresh_cache():  # hermetic; build_s is a cold build
            rows = run_cases(cases, cfg, measured, say)
    finally:
        if torch is not None:
            torch.set_grad_enabled(grad)
    plots = []
    for g in GROUPS:
        try:
            p = plot_group(g, [r for r in rows if r["group"] == g], out)
        except Exception as e:  # a plot must not lose the measurements
            say(f"plot of {g} failed: {type(e).__name__}: {e}")
            p = None
        if p is not None:
            plots.append(p)
    machine = common.machine_info(load_start)
    machine["torch"] = getattr(torch, "__version__", None)
    machine["torch_threads"] = torch.get_num_threads() if torch is not None else None
    duration = time.perf_counter() - t0
    when = common.run_date(started)
    command = "python -m benchmarks ops" + (" --quick" if quick else "")
    data = {"suite": NAME, "date": when, "duration_s": round(duration, 2), "machine": machine,
            "settings": cfg, "command": command, "peak": measured, "rows": rows,
            "plots": [p.name for p in plots]}
    md = [
        "# Operator benchmarks (book ch. 4, conv1d, ResNet-18 layers)", "",
        f"Run {when}, {duration:.0f} s, command: `{command}`", "",
        *(f"- {line}" for line in common.machine_lines(machine)),
        f"- PyTorch: {machine['torch'] or 'not installed'}"
        + (f" ({machine['torch_threads']} threads, no_grad)" if torch is not None else ""),
        "", "## Goals", "", *summary_table(rows), "", "## All cases", "",
        *markdown(rows, measured),
        *([f"Plots: {', '.join(f'`{p.name}`' for p in plots)}", ""] if plots else []),
        "Nothing fails on these numbers. See docs/benchmarks.md and docs/performance.md.", "",
    ]
    text = "\n".join(md)
    _, md_path = common.write_results(NAME, data, text, out)
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = common.suite_parser(NAME, DESCRIPTION, "a few cases, fewer repeats")
    p.add_argument("--only", nargs="+", metavar="GROUP",
                   help=f"only these groups or case keys (groups: {', '.join(_groups())})")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out, only=args.only)
    return 0


def _groups() -> list[str]:
    all_cases()
    return list(GROUPS)


if __name__ == "__main__":
    sys.exit(main())
