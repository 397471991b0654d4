"""GPU schedules used by the CUDA tests: each builder returns a ``Workload``.

A workload is a schedule, its argument tensors, numpy inputs (outputs zero-filled) and the
numpy reference of every output. The schedules follow the book's chapter 5 (vector add,
broadcast add, matmul with shared memory and cooperative fetching, convolution with virtual
threads, pooling) plus reductions, float16, intrinsics, vectorize and multi-kernel functions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from kiln import te
from kiln.contrib import d2ltvm

from ..book._shared import load_example

RNG = np.random.default_rng(0)


@dataclass
class Workload:
    name: str
    sched: object
    args: list
    inputs: list  # numpy arrays, one per tensor argument (scalars as Python numbers)
    expected: dict = field(default_factory=dict)  # argument index -> reference
    rtol: float = 1e-5
    atol: float = 1e-6


def _rand(*shape, dtype="float32"):
    return RNG.random(shape).astype(dtype)


@functools.cache
def _ch5():
    """examples/book/ch5_gpu.py, loaded once."""
    return load_example("book", "ch5_gpu")


def _bind1d(s, T, factor):
    bx, tx = s[T].split(T.op.axis[0], factor=factor)
    s[T].bind(bx, te.thread_axis("blockIdx.x"))
    s[T].bind(tx, te.thread_axis("threadIdx.x"))


def vector_add(n=1000):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    _bind1d(s, C, 64)  # 1000 is not a multiple of 64: a guard
    a, b = _rand(n), _rand(n)
    return Workload("vector_add", s, [A, B, C], [a, b, np.zeros(n, "float32")], {2: a + b})


def vector_add_symbolic(n_value=777):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * 2.0 + B[i], name="C")
    s = te.create_schedule(C.op)
    _bind1d(s, C, 128)
    a, b = _rand(n_value), _rand(n_value)
    return Workload("vector_add_symbolic", s, [A, B, C],
                    [a, b, np.zeros(n_value, "float32")], {2: a * 2 + b})


def broadcast_add(shape1=(64, 1), shape2=(64, 48)):
    A, B, C = d2ltvm.broadcast_add(shape1, shape2)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    s[C].bind(x, te.thread_axis("blockIdx.x"))
    s[C].bind(y, te.thread_axis("threadIdx.x"))
    a, b = _rand(*shape1), _rand(*shape2)
    return Workload("broadcast_add", s, [A, B, C], [a, b, np.zeros(shape2, "float32")],
                    {2: a + b})


def matmul_shared(n=64, tile=16):
    """Shared-memory tiles of A and B, one output element per thread, each thread fetching
    one element of each tile (cache stage axes bound to threadIdx.y/x)."""
    A, B, C = d2ltvm.matmul(n, n, n)
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=tile)
    bj, jj = s[C].split(j, factor=tile)
    s[C].reorder(bi, bj, ii, jj)
    ty, tx = te.thread_axis("threadIdx.y"), te.thread_axis("threadIdx.x")
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, ty)
    s[C].bind(jj, tx)
    s[CL].compute_at(s[C], jj)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=tile)
    for cache in (AS, BS):
        s[cache].compute_at(s[CL], ko)
        y, x = s[cache].op.axis
        s[cache].bind(y, ty)
        s[cache].bind(x, tx)
    a, b = _rand(n, n), _rand(n, n)
    return Workload("matmul_shared", s, [A, B, C], [a, b, np.zeros((n, n), "float32")],
                    {2: a @ b}, rtol=1e-4)


def matmul_book(n=128, block_size=16, tx=8, ty=4, tk=8, fetch=None):
    """The book's §5.4 GPU matmul, examples/book/ch5_gpu.py ``matmul_gpu``: block_size x
    block_size threads per block, each computing a tx x ty sub-tile; shared and local caches;
    cooperative fetching by ``fetch`` threads per axis (block_size in the book: fewer leaves
    the other threads idle behind a guard)."""
    fetch = fetch or (block_size, block_size)
    s, (A, B, C) = _ch5().matmul_gpu(n, block_size, tx, ty, tk, fetch)
    a, b = _rand(n, n), _rand(n, n)
    name = "matmul_book" if fetch == (block_size, block_size) else "matmul_partial_fetch"
    return Workload(name, s, [A, B, C], [a, b, np.zeros((n, n), "float32")],
                    {2: a @ b}, rtol=1e-4)


def matmul_partial_fetch():
    return matmul_book(n=64, fetch=(2, 4))


def row_sum(n=256, m=96):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _bind1d(s, B, 64)
    a = _rand(n, m)
    return Workload("row_sum", s, [A, B], [a, np.zeros(n, "float32")], {1: a.sum(1)},
                    rtol=1e-4)


def max_pool(c=8, n=16, k=3):
    X, Y, PaddedX = d2ltvm.pool("max", c, n, n, k, k, 1, 1, 1, 1)
    s = te.create_schedule(Y.op)
    s[PaddedX].compute_inline()
    cc, h, w = Y.op.axis
    fused = s[Y].fuse(cc, h)
    s[Y].bind(fused, te.thread_axis("blockIdx.x"))
    s[Y].bind(w, te.thread_axis("threadIdx.x"))
    x = _rand(c, n, n)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ref = np.full((c, n, n), -np.inf, "float32")
    for di in range(k):
        for dj in range(k):
            ref = np.maximum(ref, xp[:, di:di + n, dj:dj + n])
    return Workload("max_pool", s, [X, Y], [x, np.zeros((c, n, n), "float32")], {1: ref})


def conv_vthread(oc=32, ic=16, n=16, k=3, p=1):
    """The book's §5.5/5.6 convolution: output tiles per block, virtual threads, shared caches
    of the input and kernel with cooperative fetching, local accumulators."""
    X, K, Y, PaddedX = d2ltvm.conv(oc, ic, n, n, k, k, p, p, 1, 1)
    s = te.create_schedule(Y.op)
    s[PaddedX].compute_inline()
    YL = s.cache_write(Y, "local")
    XX = s.cache_read(PaddedX, "shared", [YL])
    KK = s.cache_read(K, "shared", [YL])
    XL = s.cache_read(XX, "local", [YL])
    KL = s.cache_read(KK, "local", [YL])
    tile_c, tile_h, tile_w = [2, 2, 4], [2, 4, 1], [2, 8, 1]  # vthread, thread, inner
    c, h, w = s[Y].op.axis
    bc, vc, tc, ic_ = d2ltvm.split_axis(tile_c, s, Y, c)
    bh, vh, th, ih = d2ltvm.split_axis(tile_h, s, Y, h)
    bw, vw, tw, iw = d2ltvm.split_axis(tile_w, s, Y, w)
    s[Y].reorder(bc, bh, bw, vc, vh, vw, tc, th, tw, ic_, ih, iw)
    s[Y].bind(bc, te.thread_axis("blockIdx.z"))
    s[Y].bind(bh, te.thread_axis("blockIdx.y"))
    s[Y].bind(bw, te.thread_axis("blockIdx.x"))
    s[Y].bind(vc, te.thread_axis("vthread", name="vc"))
    s[Y].bind(vh, te.thread_axis("vthread", name="vh"))
    s[Y].bind(vw, te.thread_axis("vthread", name="vw"))
    tz_, ty_, tx_ = (te.thread_axis("threadIdx.z"), te.thread_axis("threadIdx.y"),
                     te.thread_axis("threadIdx.x"))
    s[Y].bind(tc, tz_)
    s[Y].bind(th, ty_)
    s[Y].bind(tw, tx_)
    s[YL].compute_at(s[Y], tw)
    rc, rh, rw = s[YL].op.reduce_axis
    rco, rci = s[YL].split(rc, factor=4)
    cl, hl, wl = s[YL].op.axis
    s[YL].reorder(rco, rh, rw, rci, cl, hl, wl)
    for shared, local in ((XX, XL), (KK, KL)):
        s[shared].compute_at(s[YL], rco)
        s[local].compute_at(s[YL], rci)
        fused = s[shared].fuse(*s[shared].op.axis)
        tz, fused = s[shared].split(fused, nparts=tile_c[1])
        ty, fused = s[shared].split(fused, nparts=tile_h[1])
        tx, _ = s[shared].split(fused, nparts=tile_w[1])
        s[shared].bind(tz, tz_)
        s[shared].bind(ty, ty_)
        s[shared].bind(tx, tx_)
    x, kern = _rand(ic, n, n), _rand(oc, ic, k, k)
    xp = np.pad(x, ((0, 0), (p, p), (p, p)))
    ref = np.zeros((oc, n, n), "float32")
    for di in range(k):
        for dj in range(k):
            ref += np.einsum("chw,oc->ohw", xp[:, di:di + n, dj:dj + n], kern[:, :, di, dj])
    return Workload("conv_vthread", s, [X, K, Y], [x, kern, np.zeros((oc, n, n), "float32")],
                    {2: ref}, rtol=1e-4, atol=1e-5)


def softplus_fp16(n=512):
    A = te.placeholder((n,), name="A", dtype="float16")
    B = te.compute((n,), lambda i: te.log(te.exp(A[i]) + A[i].astype("float16") * 0 + 1),
                   name="B")
    s = te.create_schedule(B.op)
    _bind1d(s, B, 128)
    a = (RNG.random(n) * 2 - 1).astype("float16")
    ref = np.log(np.exp(a.astype("float32")) + 1).astype("float16")
    return Workload("softplus_fp16", s, [A, B], [a, np.zeros(n, "float16")], {1: ref},
                    rtol=5e-3, atol=5e-3)


def intrinsics(n=300):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.sqrt(A[i]) + te.tanh(A[i]) * te.exp(-A[i])
                   + te.max(A[i], 0.5), name="B")
    s = te.create_schedule(B.op)
    _bind1d(s, B, 32)
    a = _rand(n)
    ref = np.sqrt(a) + np.tanh(a) * np.exp(-a) + np.maximum(a, 0.5)
    return Workload("intrinsics", s, [A, B], [a, np.zeros(n, "float32")], {1: ref},
                    rtol=1e-5)


def two_kernels(n=1024):
    """Two root stages: an intermediate in a device workspace, two launches."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: B[(i + 1) % n] * 2.0, name="C")
    s = te.create_schedule(C.op)
    _bind1d(s, B, 256)
    _bind1d(s, C, 128)
    a = _rand(n)
    return Workload("two_kernels", s, [A, C], [a, np.zeros(n, "float32")],
                    {1: np.roll(a + 1, -1) * 2})


def vectorized(n=1024):
    """``vectorize`` inside a kernel (lane loops after scalarization) and an unrolled loop."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B.op)
    bx, rest = s[B].split(B.op.axis[0], factor=256)
    tx, vi = s[B].split(rest, factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].vectorize(vi)
    a = _rand(n)
    return Workload("vectorized", s, [A, B], [a, np.zeros(n, "float32")], {1: a * 3})


def unroll_pragma(n=64, m=32):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=8)
    s[B].pragma(ko, "auto_unroll_max_step", 16)
    a = _rand(n, m)
    return Workload("unroll_pragma", s, [A, B], [a, np.zeros(n, "float32")],
                    {1: (a * a).sum(1)}, rtol=1e-4)


ALL = [vector_add, vector_add_symbolic, broadcast_add, matmul_shared, matmul_book,
       matmul_partial_fetch, row_sum,
       max_pool, conv_vthread, softplus_fp16, intrinsics, two_kernels, vectorized,
       unroll_pragma]


# ---------------------------------------------------------------------------------------
# helpers shared by the CUDA tests
# ---------------------------------------------------------------------------------------
def have_nvrtc() -> bool:
    try:
        from kiln.runtime import cuda_driver

        return cuda_driver.available()
    except Exception:  # noqa: BLE001
        return False


NVRTC_MISSING = ("NVIDIA's cuda-bindings / nvidia-cuda-nvrtc are not installed "
                 "(pip install 'kiln[cuda]'); CUDA compile checks skipped")


def build_cuda(sched, args, name="default_function", target="cuda"):
    """``kiln.build`` for CUDA; without NVRTC, the same build without the compile step."""
    import kiln
    from kiln.codegen.cuda_backend import CUDABackend
    from kiln.driver.build import build_module

    if have_nvrtc():
        return kiln.build(sched, args, target=target, name=name)
    mod = kiln.lower(sched, args, name=name)
    return build_module(mod, kiln.target.Target(target), CUDABackend(compile_now=False))


def run_on_gpu(sched, args, inputs):
    """Build for CUDA, compile with NVRTC for sm_80 and sm_90, then run on ``cuda(0)`` and
    return the arrays as numpy; skips (pytest) where NVRTC or the GPU is missing."""
    import pytest

    import kiln
    from kiln.codegen.cuda_backend import compile_source

    if not have_nvrtc():
        pytest.skip(NVRTC_MISSING)
    mod = kiln.build(sched, list(args), "cuda")
    src = mod.imported_modules[0].get_source()
    for arch in ("sm_80", "sm_90"):
        assert compile_source(src, arch)
    dev = kiln.cuda(0)
    if not dev.exist:
        pytest.skip("no CUDA GPU: compiled for sm_80 and sm_90, launch skipped")
    arrays = [kiln.nd.array(a, dev) for a in inputs]
    mod(*arrays)
    return [a.numpy() for a in arrays]
