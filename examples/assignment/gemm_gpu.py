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
"""

import kiln as tvm
from kiln import te


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


def make_gemm_gpu_scheduler(M, K, N, threads=16, tm=4, tn=4, tk=16):
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


VARIANTS = {
    "baseline": make_gemm_gpu_scheduler_baseline,
    "optimized": make_gemm_gpu_scheduler,
}

if __name__ == "__main__":
    s, A, B, C = make_gemm_gpu_scheduler(256, 256, 256)
    print(tvm.lower(s, [A, B, C], simple_mode=True))
