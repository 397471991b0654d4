"""kiln's best CPU GEMM schedule (fp32, ``C = A @ B``), written with public primitives only.

``gemm_schedule(N, ...)`` returns ``s, (A, B, C)``:

* packing stages ``PB[jo, k, ji] = B[k, jo*bn + ji]`` and ``PA[io, k, ii] = A[io*mr + ii, k]``
  (zero past the edge), so the ``bn`` columns of B and the ``mr`` values of A that one step
  of the register tile reads are contiguous for every ``k``;
* ``C`` is tiled ``mr x bn``; the column-panel loop runs in parallel (OpenMP), and the row
  tiles of one panel reuse its packed B panel from cache;
* a ``local`` write cache of each tile (``cache_write`` + ``compute_at``) holds the
  ``mr x bn`` accumulators; the reduction is split by ``ku`` and its inner part unrolled,
  the ``mr`` rows unrolled, and the ``bn`` columns split into ``bn / vl`` unrolled machine
  vectors of ``vl`` lanes (by default one register of this machine: 16 fp32 with AVX-512,
  8 with AVX2), so the inner body is ``mr * bn / vl`` independent FMAs on register-resident
  accumulators (by default 6 x 4 = 24 of AVX-512's 32 registers, 6 x 2 = 12 of AVX2's 16),
  each reusing one broadcast A value and ``bn / vl`` B vectors.

Run ``python examples/cpu/gemm.py`` to print the lowered IR; docs/performance.md has figures.
"""

import kiln as tvm
from kiln import te


def default_tile():
    """``(vl, bn)`` for this machine: one vector register of fp32 lanes, and panels of 4
    vectors with 32 vector registers (AVX-512), else 2."""
    from kiln.topi.x86 import lanes, vector_registers

    vl = lanes("float32")
    return vl, vl * (4 if vector_registers() >= 32 else 2)


def gemm_schedule(N, mr=6, bn=None, ku=4, vl=None, pack_a=False, pack_b_in_panel=True, M=None,
                  K=None):
    """Schedule of ``C[i, j] = sum_k A[i, k] * B[k, j]`` (A: M x K, B: K x N; M = K = N by
    default). Returns ``s, (A, B, C)``. Any sizes work; non-multiples of the tiles are
    handled by the packing stage (zero fill) and kiln's loop bound guards. ``vl``/``bn``
    default to :func:`default_tile`."""
    auto_vl, auto_bn = default_tile()
    vl = vl or auto_vl
    bn = bn or auto_bn
    M = N if M is None else M
    K = N if K is None else K
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    nb = (N + bn - 1) // bn
    if N % bn == 0:
        PB = te.compute((nb, K, bn), lambda jo, k, ji: B[k, jo * bn + ji], name="PB")
    else:
        PB = te.compute(
            (nb, K, bn),
            lambda jo, k, ji: te.if_then_else(jo * bn + ji < N, B[k, jo * bn + ji], 0.0),
            name="PB")
    k = te.reduce_axis((0, K), name="k")
    if pack_a:
        mb = (M + mr - 1) // mr
        if M % mr == 0:
            PA = te.compute((mb, K, mr), lambda io, kk, ii: A[io * mr + ii, kk], name="PA")
        else:
            PA = te.compute(
                (mb, K, mr),
                lambda io, kk, ii: te.if_then_else(io * mr + ii < M, A[io * mr + ii, kk], 0.0),
                name="PA")

        def a_at(i, kk):
            return PA[i // mr, kk, i % mr]
    else:
        def a_at(i, kk):
            return A[i, kk]
    # columns not a multiple of bn: compute a zero-padded (M, nb*bn) product and copy its
    # first N columns out, so the register tile never needs a bound guard (a guard on the
    # vector lanes would turn the kernel into scalar code)
    pad = N % bn != 0
    C = te.compute(
        (M, nb * bn if pad else N),
        lambda i, j: te.sum(a_at(i, k) * PB[j // bn, k, j % bn], axis=k),
        name="Cpad" if pad else "C")
    out = te.compute((M, N), lambda i, j: C[i, j], name="C") if pad else C

    s = te.create_schedule(out.op)
    if pad:
        s[out].parallel(out.op.axis[0])
    # packing: parallel over column panels, contiguous inner copy vectorized
    pjo, pk, pji = s[PB].op.axis
    if not pack_b_in_panel:
        s[PB].parallel(pjo)
    s[PB].vectorize(pji)

    if pack_a:
        pio, pk, pii = s[PA].op.axis
        s[PA].parallel(pio)
        s[PA].unroll(pii)

    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*C.op.axis, mr, bn)
    s[C].reorder(jo, io, ii, ji)
    # parallel over column panels (no fuse: a fused index would need floordiv/floormod in
    # the innermost address arithmetic)
    s[C].parallel(jo)
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], io)
    if pack_b_in_panel:
        # each parallel iteration packs its own B panel: one OpenMP region less per call
        # (kiln's threads sleep between regions, so every region costs a wake-up)
        s[PB].compute_at(s[C], jo)

    xc, yc = s[CC].op.axis
    ko, ki = s[CC].split(CC.op.reduce_axis[0], factor=ku)
    # vl = one machine vector (16 fp32 lanes on AVX-512): wider vector types make GCC spill
    # the accumulators to the stack, so the bn columns are bn/vl unrolled vectors
    yo, yi = s[CC].split(yc, factor=vl)
    s[CC].reorder(ko, ki, xc, yo, yi)
    s[CC].unroll(ki)
    s[CC].unroll(xc)
    s[CC].unroll(yo)
    s[CC].vectorize(yi)
    return s, (A, B, out)


def build(N, target="llvm", **kw):
    s, args = gemm_schedule(N, **kw)
    return tvm.build(s, args, target)


if __name__ == "__main__":
    s, args = gemm_schedule(256)
    print(tvm.lower(s, args, simple_mode=True))
