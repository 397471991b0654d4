"""The course assignment's GEMM on GPU (seed 000, "GEMM on GPU").

C = A @ B with A (M, K), B (K, N). Both functions take ``(M, K, N)`` and return
``s, A, B, C`` for ``target="cuda"``; any sizes work (partial tiles are guarded).

* ``make_gemm_gpu_scheduler_baseline`` - the plain compute, C tiled 16 x 16 with one output
  per thread, reading A and B from global memory.
* ``make_gemm_gpu_scheduler`` - the optimized schedule (docs/assignment_gpu.md), book §5.4's
  two-level tiling:
  1. **block tiling**: a block of ``threads x threads`` threads computes a
     ``(threads*tm) x (threads*tn)`` tile of C;
  2. **shared memory with cooperative fetching**: for every ``tk`` slice of the reduction the
     block's threads copy the A and B panels it needs into shared memory together;
  3. **register tiling**: each thread accumulates a ``tm x tn`` tile of C in registers
     (``cache_write(C, "local")``) from ``tm`` values of A and ``tn`` of B held in registers
     (``cache_read(..., "local")``), so each shared-memory load feeds ``tn`` or ``tm`` FMAs;
  4. **unrolling** of the inner reduction step (``auto_unroll_max_step``).

``VARIANTS`` also holds candidates for large sizes (``make_gemm_gpu_scheduler_vthread``:
128 x 128 block tiles, 8 x 8 registers per thread over virtual threads), which
``python -m benchmarks gpu_sweep`` times on a GPU against the optimized schedule.
``STEPS`` is the sequence baseline -> 1+2 -> 1+2+3 -> 1-4 -> 5 that ``kiln report
assignment`` measures, step 5 the 64 x 64 tiles of ``make_gemm_gpu_scheduler_vthread``
(4 x 4 registers a thread over 2 x 2 virtual threads, A transposed in shared memory);
``gemm_gpu_template`` is the AutoTVM template over the sizes.
"""

import kiln as tvm
from kiln import autotvm, te


def gemm(M, K, N):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def make_gemm_gpu_scheduler_baseline(M, K, N, block=16):
    A, B, C = gemm(M, K, N)
    s = te.create_schedule(C.op)
    yo, xo, yi, xi = s[C].tile(C.op.axis[0], C.op.axis[1], block, block)
    s[C].bind(yo, te.thread_axis("blockIdx.y"))
    s[C].bind(xo, te.thread_axis("blockIdx.x"))
    s[C].bind(yi, te.thread_axis("threadIdx.y"))
    s[C].bind(xi, te.thread_axis("threadIdx.x"))
    return s, A, B, C


def make_gemm_gpu_scheduler(M, K, N, threads=16, tm=4, tn=4, tk=16, unroll=True):
    """Optimizations 1-4; ``tm = tn = 1`` leaves out the register tiling and
    ``unroll=False`` the unrolling (the intermediate steps of ``STEPS``)."""
    A, B, C = gemm(M, K, N)
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AS, "local", [C])
    BL = s.cache_read(BS, "local", [C])
    CL = s.cache_write(C, "local")

    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=threads * tm)
    ti, ii = s[C].split(ii, factor=tm)
    bj, jj = s[C].split(j, factor=threads * tn)
    tj, jj = s[C].split(jj, factor=tn)
    s[C].reorder(bi, bj, ti, tj, ii, jj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)

    (k,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(k, factor=tk)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    if unroll:
        s[CL].pragma(ki, "auto_unroll_max_step", 64)
    for shared, local in ((AS, AL), (BS, BL)):
        s[shared].compute_at(s[CL], ko)
        s[local].compute_at(s[CL], ki)
        y, x = s[shared].op.axis
        ty, _ = s[shared].split(y, nparts=threads)
        tx, _ = s[shared].split(x, nparts=threads)
        s[shared].reorder(ty, tx)
        s[shared].bind(ty, te.thread_axis("threadIdx.y"))
        s[shared].bind(tx, te.thread_axis("threadIdx.x"))
    return s, A, B, C


def make_gemm_gpu_scheduler_vthread(M, K, N, threads=16, tm=8, tn=8, tk=8, vthreads=2,
                                    vector=4, transpose_a=False, threads_x=None):
    """A candidate for large GEMMs (``benchmarks/gpu_sweep.py`` times it against
    ``make_gemm_gpu_scheduler``): the block tile ``(threads*tm) x (threads_x*tn)`` as in the
    optimized schedule (``threads_x`` defaults to ``threads``), but each thread's
    ``tm x tn`` registers split into ``vthreads x vthreads`` sub-tiles
    ``(threads*tm/vthreads)`` apart (``vthread``), so that consecutive threads read
    consecutive shared-memory words of B and store consecutive words of C. Every thread
    fetches ``vector`` consecutive elements of each panel (NVRTC stores 4 of them to shared
    memory in one 16-byte store); with ``transpose_a`` the A panel is stored k-major in
    shared memory (rows padded by 4 words against bank conflicts), so a thread's ``tm``
    values of A are consecutive too. Block tiles should divide the matrix: in a partial tile
    the register tile's loops get bounds that vary, and NVRTC keeps it in local memory.
    """
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    if transpose_a:
        AT = te.compute((K, M), lambda kk, i: A[i, kk], name="AT")
        C = te.compute((M, N), lambda i, j: te.sum(AT[k, i] * B[k, j], axis=k), name="C")
    else:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    if transpose_a:
        s[AT].set_scope("shared")
        AS = AT
    else:
        AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AS, "local", [C])
    BL = s.cache_read(BS, "local", [C])
    CL = s.cache_write(C, "local")

    threads_x = threads_x or threads

    def tile(axis, per_thread, nthreads, block_tag, thread_tag):
        b, rest = s[C].split(axis, factor=nthreads * per_thread)
        v, rest = s[C].split(rest, nparts=vthreads)
        t, inner = s[C].split(rest, nparts=nthreads)
        s[C].bind(b, te.thread_axis(block_tag))
        s[C].bind(v, te.thread_axis("vthread", name=f"v{thread_tag[-1]}"))
        s[C].bind(t, te.thread_axis(thread_tag))
        return b, v, t, inner

    bi, vi, ti, ii = tile(s[C].op.axis[0], tm, threads, "blockIdx.y", "threadIdx.y")
    bj, vj, tj, jj = tile(s[C].op.axis[1], tn, threads_x, "blockIdx.x", "threadIdx.x")
    s[C].reorder(bi, bj, vi, vj, ti, tj, ii, jj)
    s[C].unroll(ii)
    s[C].unroll(jj)
    s[CL].compute_at(s[C], tj)

    (kr,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kr, factor=tk)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    for ax in (ki, *s[CL].op.axis):
        s[CL].unroll(ax)
    for shared, local in ((AS, AL), (BS, BL)):
        s[shared].compute_at(s[CL], ko)
        s[local].compute_at(s[CL], ki)
        for ax in s[local].op.axis:
            s[local].unroll(ax)
        rows, cols = s[shared].op.axis
        if transpose_a and shared is AS:  # read A along its rows (k), 4 words at a time
            s[shared].reorder(cols, rows)
            rows, cols = cols, rows
        fused = s[shared].fuse(rows, cols)
        fused, vec = s[shared].split(fused, factor=vector)
        s[shared].vectorize(vec)
        _, t = s[shared].split(fused, factor=threads * threads_x)
        ty, tx = s[shared].split(t, factor=threads_x)
        s[shared].bind(ty, te.thread_axis("threadIdx.y"))
        s[shared].bind(tx, te.thread_axis("threadIdx.x"))
    if transpose_a:
        s[AS].storage_align(AS.op.axis[0], threads * tm, 4)
    return s, A, B, C


def _variant(make, **knobs):
    def schedule(M, K, N):
        return make(M, K, N, **knobs)

    schedule.__name__ = make.__name__
    return schedule


VARIANTS = {
    "baseline": make_gemm_gpu_scheduler_baseline,
    "optimized": make_gemm_gpu_scheduler,
    "optimized_8x8_tk8": _variant(make_gemm_gpu_scheduler, tm=8, tn=8, tk=8),
    "vthread_8x8_tk8": _variant(make_gemm_gpu_scheduler_vthread),
    "vthread_8x8_tk16": _variant(make_gemm_gpu_scheduler_vthread, tk=16),
    "vthread_8x8_tk8_at": _variant(make_gemm_gpu_scheduler_vthread, transpose_a=True),
    "vthread_8x8_tk16_at": _variant(make_gemm_gpu_scheduler_vthread, tk=16, transpose_a=True),
    "vthread_4x8_tk8": _variant(make_gemm_gpu_scheduler_vthread, tm=4),
    "contiguous_8x8_tk8": _variant(make_gemm_gpu_scheduler_vthread, vthreads=1),
    # 128 x 28 block tiles: they divide MobileNet's pointwise GEMMs (N = 56*56, 28*28, 14*14)
    "vthread_8x4_16x7_tk8": _variant(make_gemm_gpu_scheduler_vthread, tn=4, threads_x=7),
    # 64 x 64 block tiles: 256 blocks at 1024^3, the course's size (128 x 128 gives 64)
    "vthread_4x4_tk16_at": _variant(make_gemm_gpu_scheduler_vthread, tm=4, tn=4, tk=16,
                                    transpose_a=True),
}

STEPS = [
    ("baseline", make_gemm_gpu_scheduler_baseline),
    ("block tiling, shared memory", _variant(make_gemm_gpu_scheduler, tm=1, tn=1,
                                             unroll=False)),
    ("register tiling", _variant(make_gemm_gpu_scheduler, unroll=False)),
    ("unrolling", make_gemm_gpu_scheduler),
    ("virtual threads, A transposed in shared memory", VARIANTS["vthread_4x4_tk16_at"]),
]


@autotvm.template("assignment.gemm_gpu")
def gemm_gpu_template(M, K, N):
    """The AutoTVM template: the optimized schedule's sizes as knobs."""
    cfg = autotvm.get_config()
    cfg.define_knob("threads", [8, 16])
    cfg.define_knob("tm", [1, 2, 4, 8])
    cfg.define_knob("tn", [1, 2, 4, 8])
    cfg.define_knob("tk", [4, 8, 16])
    cfg.define_knob("unroll", [True, False])
    s, A, B, C = make_gemm_gpu_scheduler(M, K, N, cfg["threads"].val, cfg["tm"].val,
                                         cfg["tn"].val, cfg["tk"].val, cfg["unroll"].val)
    return s, [A, B, C]


if __name__ == "__main__":
    s, A, B, C = make_gemm_gpu_scheduler(256, 256, 256)
    print(tvm.lower(s, [A, B, C], simple_mode=True))
