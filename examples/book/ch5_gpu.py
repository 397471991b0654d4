"""Book chapter 5, "Operator Optimizations on GPUs": every schedule of the chapter.

Each function takes the book's size arguments and returns ``sch, args`` (the book's own
convention), built with the classic API only. ``nt`` is the target's ``max_num_threads``
(1024 for CUDA), read the book's way::

    with tvm.target.create("cuda"):
        nt = tvm.target.Target.current(allow_none=False).max_num_threads

| section | functions |
|---|---|
| 5.2 vector add | ``vector_add_parallel(n)`` |
| 5.3 broadcast add | ``bcast_continuous(n)``, ``bcast_alternate(n)`` |
| 5.4 matrix multiplication | ``matmul_gpu(n)`` (shared + local caches, cooperative fetching) |
| 5.5 convolution | ``conv_default(...)``, ``conv_tiling(...)``, ``conv_vthread(...)`` |
| 5.6 depthwise convolution | ``depthwise_default(...)``, ``depthwise_schedule(...)`` |
| 5.7 pooling | ``pool_max(size)``, ``pool_avg(size)`` |
| 5.8 batch norm | ``bn_default(size)``, ``bn_optimized(size)`` |

Run ``python examples/book/ch5_gpu.py`` to print each lowered program and, with a GPU, time
them (GFLOP/s as the book reports them).
"""

import numpy as np

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm

with tvm.target.create("cuda"):
    nt = tvm.target.Target.current(allow_none=False).max_num_threads


# 5.2 Vector add: one element per thread, 64 threads per block
def vector_add_parallel(n, threads=64):
    A, B, C = d2ltvm.vector_add(n)
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=threads)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, (A, B, C)


# 5.3 Broadcast add: (n, 1) + (n, n) on at most nb blocks of threads threads
def _bcast(n, alternate, threads=64, blocks=256):
    A, B, C = d2ltvm.broadcast_add((n, 1), (n, n))
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    fused = s[C].fuse(x, y)
    if n * n > blocks * threads and not alternate:
        # each thread takes a contiguous run of elements
        bx, tx = s[C].split(fused, nparts=blocks)
        tx, _ = s[C].split(tx, nparts=threads)
    elif n * n > blocks * threads:
        # each thread takes elements blocks*threads apart: consecutive threads, consecutive
        # addresses (coalesced)
        xo, xi = s[C].split(fused, factor=blocks * threads)
        bx, tx = s[C].split(xi, factor=threads)
        s[C].reorder(bx, tx, xo)
    else:
        bx, tx = s[C].split(fused, factor=threads)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, (A, B, C)


def bcast_continuous(n):
    return _bcast(n, alternate=False)


def bcast_alternate(n):
    return _bcast(n, alternate=True)


# 5.4 Matrix multiplication: a 16x16 thread block computes a (16*8)x(16*4) block of C
def matmul_gpu(n, block_size=16, tx=8, ty=4, tk=32, fetch=None):
    """``fetch``: threads per axis of the cooperative fetch, ``(block_size, block_size)`` as
    in the book by default; fewer leaves the other threads idle behind a guard."""
    fetch = fetch or (block_size, block_size)
    A, B, C = d2ltvm.matmul(n, n, n)
    s = te.create_schedule(C.op)
    A_shared = s.cache_read(A, "shared", [C])
    A_local = s.cache_read(A_shared, "local", [C])
    B_shared = s.cache_read(B, "shared", [C])
    B_local = s.cache_read(B_shared, "local", [C])
    C_local = s.cache_write(C, "local")
    x, y = s[C].op.axis
    xb, xo, xi = d2ltvm.split(s[C], x, (block_size, tx))
    yb, yo, yi = d2ltvm.split(s[C], y, (block_size, ty))
    s[C].reorder(xb, yb, xo, yo, xi, yi)
    d2ltvm.bind_thread(s[C], (yb, xb, yo, xo),
                       ("blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y"))
    s[C_local].compute_at(s[C], yo)
    yi, xi = s[C_local].op.axis
    (k,) = s[C_local].op.reduce_axis
    ko, ki = s[C_local].split(k, tk)
    s[C_local].reorder(ko, ki, yi, xi)

    def optimize_read_cache(shared, local):
        s[shared].compute_at(s[C_local], ko)
        s[local].compute_at(s[C_local], ki)
        y, x = s[shared].op.axis
        # split into block_size parts to reuse the threads of the block (cooperative fetching)
        yo, yi = s[shared].split(y, nparts=fetch[0])
        xo, xi = s[shared].split(x, nparts=fetch[1])
        s[shared].reorder(yo, xo, yi, xi)
        d2ltvm.bind_thread(s[shared], (yo, xo), ("threadIdx.y", "threadIdx.x"))

    optimize_read_cache(A_shared, A_local)
    optimize_read_cache(B_shared, B_local)
    return s, (A, B, C)


# 5.5 Convolution
def conv_default(oc, ic, n, k, p, s):
    X, K, Y, PaddedX = d2ltvm.conv(oc, ic, n, n, k, k, p, p, s, s)
    sch = te.create_schedule(Y.op)
    sch[PaddedX].compute_inline()
    _, y, x = sch[Y].op.axis
    sch[Y].bind(y, te.thread_axis("blockIdx.x"))
    sch[Y].bind(x, te.thread_axis("threadIdx.x"))
    return sch, (X, K, Y)


def _caches(sch, Y, PaddedX, K):
    """§5.5's caches: the output in registers, the inputs in shared memory and registers."""
    sch[PaddedX].compute_inline()
    YL = sch.cache_write(Y, "local")
    XX = sch.cache_read(PaddedX, "shared", [YL])
    KK = sch.cache_read(K, "shared", [YL])
    XL = sch.cache_read(XX, "local", [YL])
    KL = sch.cache_read(KK, "local", [YL])
    return YL, XX, KK, XL, KL


def _cooperative_fetch(sch, loads, threads_z, threads_y, threads_x):
    """Each shared-memory copy is done by all threads of the block, laid out as the output's."""
    for load in loads:
        fused = sch[load].fuse(*sch[load].op.axis)
        tz, fused = sch[load].split(fused, nparts=threads_z)
        ty, fused = sch[load].split(fused, nparts=threads_y)
        tx, _ = sch[load].split(fused, nparts=threads_x)
        sch[load].bind(tz, te.thread_axis("threadIdx.z"))
        sch[load].bind(ty, te.thread_axis("threadIdx.y"))
        sch[load].bind(tx, te.thread_axis("threadIdx.x"))


def _conv_cached(oc, ic, n, k, p, s, tile_c, tile_h, tile_w, tile_rc, tile_rh, tile_rw):
    """The shared/local tiling of §5.5; a 3-factor tile binds its middle part to vthread."""
    X, K, Y, PaddedX = d2ltvm.conv(oc, ic, n, n, k, k, p, p, s, s)
    sch = te.create_schedule(Y.op)
    YL, XX, KK, XL, KL = _caches(sch, Y, PaddedX, K)

    c, h, w = sch[Y].op.axis
    vthreads = len(tile_c) == 3
    axes = [d2ltvm.split_axis(t, sch, Y, a) for t, a in ((tile_c, c), (tile_h, h), (tile_w, w))]
    for ax, tag in zip(axes, "zyx", strict=True):
        sch[Y].bind(ax[0], te.thread_axis(f"blockIdx.{tag}"))
        if vthreads:
            sch[Y].bind(ax[1], te.thread_axis("vthread"))
        sch[Y].bind(ax[-2], te.thread_axis(f"threadIdx.{tag}"))
    order = [ax[i] for i in range(len(axes[0])) for ax in axes]
    sch[Y].reorder(*order)
    sch[YL].compute_at(sch[Y], axes[2][-2])

    c, h, w = sch[YL].op.axis
    rc, rh, rw = sch[YL].op.reduce_axis
    rco, rcm, rci = d2ltvm.split_axis(tile_rc, sch, YL, rc)
    rho, rhm, rhi = d2ltvm.split_axis(tile_rh, sch, YL, rh)
    rwo, rwm, rwi = d2ltvm.split_axis(tile_rw, sch, YL, rw)
    sch[YL].reorder(rco, rho, rwo, rcm, rhm, rwm, rci, rhi, rwi, c, h, w)
    sch[XX].compute_at(sch[YL], rwo)
    sch[KK].compute_at(sch[YL], rwo)
    sch[XL].compute_at(sch[YL], rwm)
    sch[KL].compute_at(sch[YL], rwm)

    t = 1 if vthreads else 0
    _cooperative_fetch(sch, (XX, KK), tile_c[t], tile_h[t], tile_w[t])
    return sch, (X, K, Y)


def conv_tiling(oc, ic, n, k, p, s):
    return _conv_cached(oc, ic, n, k, p, s, tile_c=[4, 8], tile_h=[2, 2], tile_w=[16, 4],
                        tile_rc=[1, 1], tile_rh=[1, 1], tile_rw=[1, 3])


def conv_vthread(oc, ic, n, k, p, s):
    # two virtual threads along the output width; the kernel read in columns
    return _conv_cached(oc, ic, n, k, p, s, tile_c=[1, 4, 8], tile_h=[1, 2, 2],
                        tile_w=[2, 16, 2], tile_rc=[1, 1], tile_rh=[1, 3], tile_rw=[1, 1])


# 5.6 Depthwise convolution
def depthwise_default(ic, n, k, p, s):
    X, K, Y, PaddedX = d2ltvm.depthwise_conv(ic, n, n, k, k, p, p, s, s)
    sch = te.create_schedule(Y.op)
    sch[PaddedX].compute_inline()
    _, y, x = sch[Y].op.axis
    sch[Y].bind(y, te.thread_axis("blockIdx.x"))
    sch[Y].bind(x, te.thread_axis("threadIdx.x"))
    return sch, (X, K, Y)


def depthwise_schedule(ic, n, k, p, s, tile_c=(1, 1), tile_h=(2, 8), tile_w=(64, 1)):
    """One channel per block, 8 rows per thread; data read in columns into local memory."""
    X, K, Y, PaddedX = d2ltvm.depthwise_conv(ic, n, n, k, k, p, p, s, s)
    sch = te.create_schedule(Y.op)
    YL, XX, KK, XL, KL = _caches(sch, Y, PaddedX, K)

    c, h, w = sch[Y].op.axis
    bc, tc, ic_ = d2ltvm.split_axis(list(tile_c), sch, Y, c)
    bh, th, ih = d2ltvm.split_axis(list(tile_h), sch, Y, h)
    bw, tw, iw = d2ltvm.split_axis(list(tile_w), sch, Y, w)
    sch[Y].bind(bc, te.thread_axis("blockIdx.z"))
    sch[Y].bind(bh, te.thread_axis("blockIdx.y"))
    sch[Y].bind(bw, te.thread_axis("blockIdx.x"))
    sch[Y].bind(tc, te.thread_axis("threadIdx.z"))
    sch[Y].bind(th, te.thread_axis("threadIdx.y"))
    sch[Y].bind(tw, te.thread_axis("threadIdx.x"))
    sch[Y].reorder(bc, bh, bw, tc, th, tw, ic_, ih, iw)
    sch[YL].compute_at(sch[Y], tw)
    sch[XX].compute_at(sch[Y], bw)
    sch[KK].compute_at(sch[Y], bw)
    sch[XL].compute_at(sch[Y], tw)
    sch[KL].compute_at(sch[Y], tw)
    _cooperative_fetch(sch, (XX, KK), tile_c[0], tile_h[0], tile_w[0])
    return sch, (X, K, Y)


# 5.7 Pooling: padding inlined, one output element per thread, nt threads per block
def _pool(pool_type, size):
    c, n, k = size[:]
    X, Y, PaddedX = d2ltvm.pool(pool_type, c, n, n, k, k, 1, 1, 1, 1)
    sch = te.create_schedule(Y.op)
    sch[PaddedX].compute_inline()
    fused = sch[Y].fuse(*sch[Y].op.axis)
    bx, tx = sch[Y].split(fused, factor=nt)
    sch[Y].bind(bx, te.thread_axis("blockIdx.x"))
    sch[Y].bind(tx, te.thread_axis("threadIdx.x"))
    return sch, X, Y, tx


def pool_max(size):
    sch, X, Y, _ = _pool("max", size)
    return sch, (X, Y)


def pool_avg(size):
    sch, X, Y, tx = _pool("avg", size)
    # the window sum goes to a per-thread register
    PoolSum = Y.op.input_tensors[0]
    sch[PoolSum].compute_at(sch[Y], tx)
    return sch, (X, Y)


# 5.8 Batch norm: injective stages inlined, then bound to blocks and threads
def bn_default(size):
    c, n = size[:]
    X, Mean, Var, Gamma, Beta, Y = d2ltvm.batch_norm(c, n)
    sch = te.create_schedule(Y.op)
    te.schedule.AutoInlineInjective(sch)
    c, h, _ = Y.op.axis[0:3]
    sch[Y].bind(c, te.thread_axis("blockIdx.x"))
    sch[Y].bind(h, te.thread_axis("threadIdx.x"))
    return sch, (X, Mean, Var, Gamma, Beta, Y)


def bn_optimized(size):
    c, n = size[:]
    X, Mean, Var, Gamma, Beta, Y = d2ltvm.batch_norm(c, n)
    sch = te.create_schedule(Y.op)
    te.schedule.AutoInlineInjective(sch)
    fused = sch[Y].fuse(*sch[Y].op.axis)
    bx, tx = sch[Y].split(fused, factor=nt)
    sch[Y].bind(bx, te.thread_axis("blockIdx.x"))
    sch[Y].bind(tx, te.thread_axis("threadIdx.x"))
    return sch, (X, Mean, Var, Gamma, Beta, Y)


#: (function, the book's arguments) for each schedule of the chapter
BOOK_SIZES = {
    vector_add_parallel: (1 << 20,),
    bcast_continuous: (1024,),
    bcast_alternate: (1024,),
    matmul_gpu: (1024,),
    conv_default: (64, 64, 64, 3, 1, 1),
    conv_tiling: (64, 64, 64, 3, 1, 1),
    conv_vthread: (64, 64, 64, 3, 1, 1),
    depthwise_default: (64, 64, 3, 1, 1),
    depthwise_schedule: (64, 64, 3, 1, 1),
    pool_max: ((64, 64, 3),),
    pool_avg: ((64, 64, 3),),
    bn_default: ((32, 112),),
    bn_optimized: ((32, 112),),
}


def main():
    dev = tvm.cuda(0)
    for func, size in BOOK_SIZES.items():
        sch, args = func(*size)
        print(f"== {func.__name__}{size}")
        print(tvm.lower(sch, args, simple_mode=True))
        mod = tvm.build(sch, args, "cuda")
        if not dev.exist:
            continue
        data = [tvm.nd.array(np.random.rand(*[int(d) for d in t.shape]).astype(t.dtype), dev)
                for t in args]
        t = mod.time_evaluator(mod.entry_name, dev, number=20)(*data).mean
        print(f"{func.__name__}: {t * 1e6:.1f} us")
    if not dev.exist:
        print("no CUDA GPU: lowered and compiled only")


if __name__ == "__main__":
    main()
