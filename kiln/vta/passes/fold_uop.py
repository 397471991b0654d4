"""Micro-op kernels: a GEMM or ALU operation's tile indices folded into VTA's two loops.

An operation comes out of ``inject_gemm``/``inject_alu`` as an index array of shape
``(*loop extents, K, 3)``: for every iteration of its loop nest and each of the ``K``
micro-ops of the body, the accumulator (dst), input or source (src) and weight tile. A GEMM or
ALU instruction runs ``[uop_bgn, uop_end)`` inside ``iter_out x iter_in`` loops that add
``i0 * factor_out + i1 * factor_in`` to each index (isa.py). :func:`fold_uop_loops` drops
loops of extent 1, then folds the outermost loop, then the next, into those two loops when
the indices are affine in it with non-negative factors (TVM's ``FoldUopLoop``); every
remaining iteration becomes micro-ops.
The execution order is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..isa import LOOP_ITER_BITS, Uop

__all__ = ["UopKernel", "fold_uop_loops"]


@dataclass(frozen=True)
class UopKernel:
    """Micro-ops and the two loops around them."""

    uops: tuple[Uop, ...]
    iter_out: int = 1
    iter_in: int = 1
    factor_out: tuple[int, int, int] = (0, 0, 0)   # dst, src, wgt
    factor_in: tuple[int, int, int] = (0, 0, 0)

    def index_range(self, k: int) -> tuple[int, int]:
        """[lo, hi) of index ``k`` (0 dst, 1 src, 2 wgt) over the whole kernel."""
        values = [u.dst_idx if k == 0 else u.src_idx if k == 1 else u.wgt_idx
                  for u in self.uops]
        hi = max(values) + (self.iter_out - 1) * self.factor_out[k] + \
            (self.iter_in - 1) * self.factor_in[k]
        return min(values), hi + 1


def _affine_factor(idx: np.ndarray) -> tuple[int, int, int] | None:
    """The constant step of ``idx`` along axis 0, when every index is affine in it."""
    n = idx.shape[0]
    if n < 2 or n >= (1 << LOOP_ITER_BITS):
        return None
    step = idx[1] - idx[0]
    flat = step.reshape(-1, 3)
    if not (flat == flat[0]).all() or (flat[0] < 0).any():
        return None
    expect = idx[0][None] + np.arange(n).reshape((n,) + (1,) * (idx.ndim - 1)) * step[None]
    if not np.array_equal(idx, expect):
        return None
    return tuple(int(v) for v in flat[0])


def fold_uop_loops(idx: np.ndarray) -> UopKernel:
    """The kernel running the index array ``idx`` (shape ``(*loops, K, 3)``)."""
    idx = idx.reshape([n for n in idx.shape[:-2] if n != 1] + list(idx.shape[-2:]))
    loops = []
    while idx.ndim > 2 and len(loops) < 2:
        factor = _affine_factor(idx)
        if factor is None:
            break
        loops.append((idx.shape[0], factor))
        idx = idx[0]
    uops = tuple(Uop(int(d), int(s), int(w)) for d, s, w in idx.reshape(-1, 3))
    loops += [(1, (0, 0, 0))] * (2 - len(loops))
    (n_out, f_out), (n_in, f_in) = loops
    return UopKernel(uops, n_out, n_in, f_out, f_in)
