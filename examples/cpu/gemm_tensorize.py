"""A tensorized CPU GEMM (fp32, ``C = A @ B``): kiln's loops around a hand-written micro-kernel.

``gemm_tensorize_schedule(N, ...)`` returns ``s, (A, B, C)``:

* a packing stage ``PB[jo, k, ji] = B[k, jo*nr + ji]``, computed inside each column panel,
  so the ``nr`` columns one step of the micro-kernel reads are contiguous;
* ``C`` tiled ``mr x nr`` (6 x 64 with AVX-512) with the reduction split by ``kc``; loop order
  ``j.outer (parallel), k.outer, i.outer | i.inner, j.inner, k.inner``;
* ``s[C].tensorize(i.inner, gemm_block_intrin(mr, nr, kc))``: the ``mr x nr x kc`` block
  becomes one call of the micro-kernel of ``kiln.topi.x86.tensor_intrin`` (AVX-512 or AVX2
  intrinsics, by this machine's vector width), whose C is linked into the module with
  ``pragma import_c``; the reduction split across the tensorized region gives a reset of each
  block before the ``k.outer`` loop and an update inside it.

``M``, ``N`` and ``K`` must be multiples of ``mr``, ``nr`` and ``kc`` (768 and 1536 are, on
AVX-512 and AVX2 machines). Run ``python examples/cpu/gemm_tensorize.py`` to print the
lowered IR; ``kiln bench cpu`` measures it against numpy and examples/cpu/gemm.py
(docs/tensorize.md has figures).
"""

import kiln as tvm
from kiln import te
from kiln.topi.x86.tensor_intrin import default_block, gemm_block_intrin, gemm_block_source


def gemm_tensorize_schedule(N, mr=None, nr=None, kc=None, M=None, K=None):
    """Schedule of ``C[i, j] = sum_k A[i, k] * B[k, j]`` (A: M x K, B: K x N; M = K = N by
    default) around the micro-kernel; ``kc`` (the reduction block) defaults to ``K``, which
    measured fastest (the packed B panel stays in L2). Returns ``s, (A, B, C)``."""
    auto_mr, auto_nr = default_block()
    mr, nr = mr or auto_mr, nr or auto_nr
    M = N if M is None else M
    K = N if K is None else K
    kc = K if kc is None else kc
    for name, size, block in (("M", M, mr), ("N", N, nr), ("K", K, kc)):
        if size % block:
            raise ValueError(f"gemm_tensorize_schedule: {name}={size} is not a multiple of "
                             f"the block's {block}")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    PB = te.compute((N // nr, K, nr), lambda jo, k, ji: B[k, jo * nr + ji], name="PB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * PB[j // nr, k, j % nr], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=mr)
    jo, ji = s[C].split(j, factor=nr)
    ko, ki = s[C].split(k, factor=kc)
    s[C].reorder(jo, ko, io, ii, ji, ki)
    s[C].parallel(jo)
    s[C].tensorize(ii, gemm_block_intrin(mr, nr, kc))
    s[C].pragma(jo, "import_c", gemm_block_source(mr, nr))
    s[PB].compute_at(s[C], jo)
    s[PB].vectorize(PB.op.axis[2])
    return s, (A, B, C)


if __name__ == "__main__":
    sch, args = gemm_tensorize_schedule(768)
    print(tvm.lower(sch, args, simple_mode=True))
