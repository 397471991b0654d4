"""The course assignment's 1-D convolution on CPU (seed 000, section "1D Convolution on CPU").

B = A * W, the full convolution: A has M elements, W has N, B has M + N - 1 and
B[n] = sum_k A[k] W[n - k] (numpy: ``np.convolve(A, W)``).

Every ``make_conv1d_cpu_scheduler*`` function takes ``(M, N)`` and returns ``s, A, W, B``:

* ``make_conv1d_cpu_scheduler`` - the baseline handed out with the assignment: one reduce
  axis over all M + N - 1 positions, an if_then_else zeroing the out-of-range terms.
* ``make_conv1d_cpu_scheduler_split_vectorize`` - split the output axis by ``factor``, move
  the reduction outside the inner part and vectorize it (optimizations 1 and 4).
* ``make_conv1d_cpu_scheduler_reorder_unroll`` - split the output and the reduce axis,
  reorder to ``x_out, k_out, k_in, x_in`` and unroll ``k_in`` (optimizations 1-3).
* ``make_conv1d_cpu_scheduler_padded_cache`` - an explicit zero-padding stage ``A_Pad`` so
  the reduction runs over the N taps of W without conditions, with ``cache_read`` copies of
  ``A_Pad`` and ``W`` computed at ``k_out`` (optimization 5).
* ``make_conv1d_cpu_scheduler_optimized`` - all of them together, plus a parallel outer loop.
* ``make_conv1d_cpu_scheduler_toeplitz`` - kiln's fastest (beyond the assignment): the
  convolution as a small matrix product whose inner loop is a GEMM micro-kernel, see
  :func:`conv1d_toeplitz`.

``VARIANTS`` maps a short name to each function; ``STEPS`` is the same sequence, in the
order ``kiln report assignment`` measures it, and ``conv1d_cpu_template`` the AutoTVM
template.
"""

import kiln as tvm
from kiln import autotvm, te
from kiln.topi.x86 import lanes  # fp32 lanes of one vector register (16 AVX-512, 8 AVX2)


def conv1d_full(M, N):
    """The assignment's compute as handed out: ``A, W, B``, one reduction over all
    M + N - 1 positions with an if_then_else zeroing the out-of-range terms."""
    A = te.placeholder((M,), name="A")
    W = te.placeholder((N,), name="W")
    k = te.reduce_axis((0, M + N - 1), "k")
    B = te.compute(
        (M + N - 1,),
        lambda n: te.sum(
            tvm.tir.if_then_else(
                tvm.tir.any(k < 0, k >= M, n - k < 0, n - k >= N),
                tvm.tir.const(0.0, "float32"),
                A[k] * W[n - k],
            ),
            axis=k,
        ),
        name="B",
    )
    return A, W, B


def make_conv1d_cpu_scheduler(M, N):
    """The baseline: returns ``s, A, W, B``."""
    A, W, B = conv1d_full(M, N)
    s = te.create_schedule(B.op)
    return s, A, W, B


def make_conv1d_cpu_scheduler_split_vectorize(M, N, factor=8):
    """Baseline compute; output axis split by ``factor``, its inner part vectorized."""
    s, A, W, B = make_conv1d_cpu_scheduler(M, N)
    (k,) = B.op.reduce_axis
    x_out, x_in = s[B].split(B.op.axis[0], factor=factor)
    s[B].reorder(x_out, k, x_in)
    s[B].vectorize(x_in)
    return s, A, W, B


def make_conv1d_cpu_scheduler_reorder_unroll(M, N, factor=8):
    """Baseline compute; both axes split by ``factor``, reordered, inner reduction unrolled."""
    s, A, W, B = make_conv1d_cpu_scheduler(M, N)
    (k,) = B.op.reduce_axis
    x_out, x_in = s[B].split(B.op.axis[0], factor=factor)
    k_out, k_in = s[B].split(k, factor=factor)
    s[B].reorder(x_out, k_out, k_in, x_in)
    s[B].unroll(k_in)
    return s, A, W, B


def conv1d_padded(M, N, pad_name="A_Pad"):
    """The padded formulation: ``A, W, A_Pad, B``.

    A_Pad (a stage named ``pad_name``) is A with N - 1 zeros on each side, and
    B[n] = sum_{k < N} A_Pad[n + k] W[N-1-k]: the reduction covers only the N taps of W and
    needs no condition.
    """
    A = te.placeholder((M,), name="A")
    W = te.placeholder((N,), name="W")
    A_Pad = te.compute(
        (M + 2 * (N - 1),),
        lambda i: te.if_then_else(te.any(i < N - 1, i >= M + N - 1), 0.0, A[i - (N - 1)]),
        name=pad_name,
    )
    k = te.reduce_axis((0, N), "k")
    B = te.compute(
        (M + N - 1,), lambda n: te.sum(A_Pad[n + k] * W[N - 1 - k], axis=k), name="B"
    )
    return A, W, A_Pad, B


def make_conv1d_cpu_scheduler_padded_cache(M, N, factor=8):
    """Padding stage; local copies of A_Pad's and W's current windows made at ``k_out``."""
    A, W, A_Pad, B = conv1d_padded(M, N)
    s = te.create_schedule(B.op)
    (k,) = B.op.reduce_axis
    x_out, x_in = s[B].split(B.op.axis[0], factor=factor)
    k_out, k_in = s[B].split(k, factor=factor)
    s[B].reorder(x_out, k_out, k_in, x_in)
    s[s.cache_read(A_Pad, "local", [B])].compute_at(s[B], k_out)
    s[s.cache_read(W, "local", [B])].compute_at(s[B], k_out)
    return s, A, W, B


def make_conv1d_cpu_scheduler_optimized(M, N, factor=8):
    """All of the above: padding, split, reorder, unroll, vectorize, cache_read at k_out,
    and the output blocks computed in parallel (as is the padding)."""
    A, W, A_Pad, B = conv1d_padded(M, N)
    s = te.create_schedule(B.op)
    (k,) = B.op.reduce_axis
    x_out, x_in = s[B].split(B.op.axis[0], factor=factor)
    k_out, k_in = s[B].split(k, factor=factor)
    s[B].reorder(x_out, k_out, k_in, x_in)
    s[B].unroll(k_in)
    s[B].vectorize(x_in)
    s[B].parallel(x_out)
    s[s.cache_read(A_Pad, "local", [B])].compute_at(s[B], k_out)
    s[s.cache_read(W, "local", [B])].compute_at(s[B], k_out)
    p_out, p_in = s[A_Pad].split(A_Pad.op.axis[0], factor=factor)
    s[A_Pad].parallel(p_out)
    return s, A, W, B


def conv1d_toeplitz(M, N, vl=None, rows=8):
    """The convolution as a matrix product: ``A, W, Pad, WT, Bt, B``.

    Convolution commutes, so let ``X`` be the longer of A and W (length ``LX``) and ``K`` the
    shorter (``LK``). Output ``n = vl * p + l`` (block p, lane l) is
    ``sum_m Pad[vl*p + m] * WT[m, l]``, where Pad is X with ``LK - 1`` zeros on each side and
    ``WT[m, l] = K[LK-1-(m-l)]`` where ``0 <= m - l < LK`` (else 0): K reversed and shifted
    once per lane, (LK + vl - 1) x vl, small enough to stay in cache. So
    ``Bt[p, :] = Pad[vl*p : ...] @ WT`` reads WT as aligned vectors and Pad one scalar at a
    time (a broadcast), as a GEMM micro-kernel does; the formulation that loads windows of
    Pad as vectors (``A_Pad[n + k]`` for 16 consecutive n) needs one unaligned load, crossing
    a cache line, per multiply-add. It costs (LK + vl - 1) / LK times the multiply-adds. The
    blocks are padded to a multiple of ``rows`` (Pad has zeros past the end) and
    ``B[n] = Bt[n // vl, n % vl]``.
    """
    vl = vl or lanes("float32")
    L = M + N - 1
    P = -(-L // vl)
    P = -(-P // rows) * rows
    A = te.placeholder((M,), name="A")
    W = te.placeholder((N,), name="W")
    (X, LX), (K, LK) = ((A, M), (W, N)) if M >= N else ((W, N), (A, M))
    T = LK + vl - 1
    Pad = te.compute(
        (vl * (P - 1) + T,),
        lambda i: te.if_then_else(te.any(i < LK - 1, i >= L), 0.0, X[i - (LK - 1)]),
        name="A_Pad" if X is A else "W_Pad")
    WT = te.compute(
        (T, vl),
        lambda m, lane: te.if_then_else(te.all(m - lane >= 0, m - lane < LK),
                                        K[LK - 1 - m + lane], 0.0),
        name="WT" if K is W else "AT")
    m = te.reduce_axis((0, T), "m")
    Bt = te.compute((P, vl), lambda p, lane: te.sum(Pad[vl * p + m] * WT[m, lane], axis=m),
                    name="Bt")
    B = te.compute((L,), lambda n: Bt[n // vl, n % vl], name="B")
    return A, W, Pad, WT, Bt, B


def make_conv1d_cpu_scheduler_toeplitz(M, N, factor=2, vl=None, rows=8,
                                       min_parallel=1 << 21):
    """:func:`conv1d_toeplitz` scheduled as a GEMM micro-kernel: per block of ``rows``
    output vectors, ``rows`` accumulators of ``vl`` lanes (a local stage computed at the
    block, in registers), the reduction split by ``factor`` and unrolled (2: with 4, GCC
    keeps 32 broadcast operands live and spills them on a 16-register machine, 2.3x
    slower); the padding and the shifted kernel are vectorized (at 4096x128 on AVX2: 30 ->
    22 us); the blocks run in parallel when there are at least ``min_parallel``
    multiply-adds (below that, waking a second thread costs more than it saves: at M=4096,
    N=128 the call takes ~10-20 us)."""
    vl = vl or lanes("float32")
    A, W, Pad, WT, Bt, B = conv1d_toeplitz(M, N, vl, rows)
    s = te.create_schedule(B.op)
    _, pad_lane = s[Pad].split(Pad.op.axis[0], factor=vl)
    s[Pad].vectorize(pad_lane)
    s[WT].vectorize(WT.op.axis[1])
    xo, xi = s[B].split(B.op.axis[0], factor=rows * vl)
    _, lane = s[B].split(xi, factor=vl)
    s[B].vectorize(lane)
    if (M + N - 1) * (min(M, N) + vl - 1) >= min_parallel:
        s[B].parallel(xo)
    s[Bt].compute_at(s[B], xo)
    p, lane = Bt.op.axis
    mo, mi = s[Bt].split(Bt.op.reduce_axis[0], factor=factor)
    s[Bt].reorder(mo, mi, p, lane)
    s[Bt].unroll(mi)
    s[Bt].unroll(p)
    s[Bt].vectorize(lane)
    return s, A, W, B


VARIANTS = {
    "baseline": make_conv1d_cpu_scheduler,
    "split_vectorize": make_conv1d_cpu_scheduler_split_vectorize,
    "reorder_unroll": make_conv1d_cpu_scheduler_reorder_unroll,
    "padded_cache": make_conv1d_cpu_scheduler_padded_cache,
    "optimized": make_conv1d_cpu_scheduler_optimized,
    "toeplitz": make_conv1d_cpu_scheduler_toeplitz,
}

STEPS = list(VARIANTS.items())


@autotvm.template("assignment.conv1d_cpu")
def conv1d_cpu_template(M, N):
    """The AutoTVM template: the padded compute in the order ``x_out, k_out, k_in, x_in``,
    with the two split factors and the unrolling and vectorization of the inner loops as
    knobs, and a parallel outer loop."""
    A, W, A_Pad, B = conv1d_padded(M, N)
    s = te.create_schedule(B.op)
    cfg = autotvm.get_config()
    x, (k,) = B.op.axis[0], B.op.reduce_axis
    cfg.define_split("tile_x", x, num_outputs=2, policy="power2", max_factor=64)
    cfg.define_split("tile_k", k, num_outputs=2, policy="power2", max_factor=32)
    x_out, x_in = cfg["tile_x"].apply(s, B, x)
    k_out, k_in = cfg["tile_k"].apply(s, B, k)
    s[B].reorder(x_out, k_out, k_in, x_in)
    cfg.define_annotate("ann", [k_in, x_in], policy="try_unroll_vec")
    cfg["ann"].apply(s, B, [k_in, x_in])
    s[B].parallel(x_out)
    s[A_Pad].parallel(A_Pad.op.axis[0])
    return s, [A, W, B]


if __name__ == "__main__":
    for name, make in VARIANTS.items():
        s, A, W, B = make(20, 5)
        print(f"# {name}")
        print(tvm.lower(s, [A, W, B], simple_mode=True))
