"""x86 schedules of dense, matmul and batch_matmul.

Two plans, chosen by which operand is contiguous along the reduction:

* dot plan (dense, ``transpose_b=True``): both operands are contiguous along ``k``. The
  reduction is split into vector-wide slices and ``rfactor``'ed: a register block of
  ``MB x NB`` vector partial sums is accumulated over ``k`` (vector loads of both operands),
  then reduced across the lanes by halves (``rfactor`` again per level: 16 -> 8 -> 4 -> 2
  lanes, each level one vector add, instead of a chain of scalar adds per output). The
  columns are tiled so that a tile of ``B`` (``NT`` rows of ``k``) stays in L2 while every
  row block of ``A`` passes over it; the tiles run in parallel.
* gemm plan (``transpose_b=False``): ``B`` rows are contiguous along ``n``. A register block
  of 8 rows x one vector of columns is accumulated in a local cache over ``k``, broadcasting
  one element of ``A`` per row (the book's §4.6 blocking). A column count that the vector
  does not divide (197 tokens) keeps full vectors and a remainder loop for the last
  columns; batched products with a rows' tail run the column blocks outside the row blocks,
  so that the tail block stays vectorized.
"""

from __future__ import annotations

import numpy as np

from kiln import te

from ..utils import get_const_tuple
from ._common import (
    anchor_stages,
    const_extent,
    inline_injective,
    is_pow2,
    lanes,
    largest_divisor,
    num_threads,
    row_block,
    same_const_shape,
    unit_split2,
    worth_parallel,
)
from .injective import anchored_schedule, schedule_injective_from_existing


def _block_order(st, batch, mo, no, mi, ni, mcount, ncount, row_tail, parallel=True):
    """Order (batch..., outer blocks, inner blocks) with a parallel loop outermost (unless
    ``parallel`` is false); returns the inner of the two outer block axes (where a block's
    stages are computed). With a batch, the row blocks go first unless the rows have a tail
    (``row_tail``): columns first then keep the tail block's columns vectorized."""
    if batch:
        first_m = not row_tail
    else:
        first_m = mcount >= ncount or mcount >= 2 * num_threads()
    outer = [mo, no] if first_m else [no, mo]
    st.reorder(*batch, *outer, mi, ni)
    if parallel:
        st.parallel(batch[0] if batch else outer[0])
    return outer[1]


#: L2 bytes a column tile of the dot plan's ``B`` operand may take (as conv2d's weights)
TILE_BYTES = 256 * 1024


def _column_tile(n_ext: int, k_ext: int, nb: int, itemsize: int) -> int:
    """Columns per cache tile: the most blocks of ``nb`` columns dividing ``n_ext`` whose
    ``k_ext``-long rows fit :data:`TILE_BYTES` (at least one block)."""
    blocks = n_ext // nb
    fit = max(1, TILE_BYTES // (k_ext * itemsize * nb))
    return nb * largest_divisor(blocks, fit)


def dot_plan_params(op) -> dict | None:
    """The hand sizes of the rfactor plan: ``kv`` (vector slice of ``k``), ``mb`` x ``nb``
    (register block), ``nt`` (columns per cache tile); None when ``k`` is not a multiple of
    4 (autotvm's dense template tunes ``kv``, ``mb``, ``nb``, see tunable.py)."""
    kext = const_extent(op.reduce_axis[0])
    dtype = op.output(0).dtype
    width = lanes(dtype)
    kv = next((v for v in (width, width // 2, 4) if kext is not None and kext % v == 0), None)
    if kv is None or kv < 4:
        return None
    shape = get_const_tuple(op.output(0).shape)
    # 4 x 4 vector accumulators (a prime row count, e.g. 197 tokens, leaves a tail block)
    mb = min(shape[-2], 4)
    nb = largest_divisor(shape[-1], 8 if mb == 1 else 4)
    return {"kv": kv, "mb": mb, "nb": nb,
            "nt": _column_tile(shape[-1], kext, nb, np.dtype(dtype).itemsize)}


def _lane_tree(s, tensor, kv: int) -> list[te.Tensor]:
    """``rfactor`` the lane reduction of ``tensor`` (``kv`` lanes) by halves down to two
    lanes; returns the partial-sum tensors, widest first."""
    stages = []
    width = kv
    while width > 2:
        _, inner = s[tensor].split(s[tensor].op.reduce_axis[0], factor=width // 2)
        stages.append(s.rfactor(tensor, inner, factor_axis=len(tensor.op.axis)))
        width //= 2
    return stages


def _schedule_register_block(stage, reduce_first: bool) -> None:
    """Unroll a ``[..., MB, NB, lanes]`` partial-sum stage's block, vectorize its lanes,
    its reduction outside the block (``reduce_first``) or inside it."""
    axes = list(stage.op.axis)
    (r,) = stage.op.reduce_axis
    if reduce_first:
        stage.reorder(*axes[:-3], r, *axes[-3:])
    else:
        stage.reorder(*axes[:-1], r, axes[-1])
        stage.unroll(r)
    stage.unroll(axes[-3])
    stage.unroll(axes[-2])
    stage.vectorize(axes[-1])


def _dot_plan(s, outs, op, params=None) -> bool:
    """The rfactor plan (sizes ``params``, default :func:`dot_plan_params`; without ``nt``
    one tile spans every column); returns False (nothing scheduled) when ``k`` is not a
    multiple of 4."""
    params = params or dot_plan_params(op)
    if params is None:
        return False
    k = op.reduce_axis[0]
    kv, mb, nb = params["kv"], params["mb"], params["nb"]
    inline_injective(s, outs)
    out = outs[0].op
    n_ext = get_const_tuple(op.output(0).shape)[-1]
    nt = params.get("nt", n_ext)
    tensor = op.output(0)
    _, ki = s[tensor].split(k, factor=kv)
    rf = s.rfactor(tensor, ki, factor_axis=len(op.axis))
    tree = _lane_tree(s, tensor, kv)
    st = s[tensor]
    epilogue = out is not op and same_const_shape(out, op) and not out.reduce_axis
    top = s[out] if epilogue else st
    axes = list(top.op.axis)
    batch, m, n = axes[:-2], axes[-2], axes[-1]
    mo, mi = top.split(m, factor=mb)
    no, ni = top.split(n, factor=nb)
    tiles, no = top.split(no, factor=nt // nb)
    # column tiles outermost (in parallel) when there are enough, else the row blocks
    blocks = [tiles, mo] if batch or n_ext // nt >= num_threads() else [mo, tiles]
    top.reorder(*batch, *blocks, no, mi, ni)
    if worth_parallel(op):
        top.parallel(batch[0] if batch else blocks[0])
    block = no
    if epilogue:
        st.compute_at(top, block)
        outer, inner = unit_split2(st, st.op.axis)
        st.reorder(*outer, *inner)
        top, block = st, outer[-1]
    for t in (rf, *tree):
        s[t].compute_at(top, block)
    _schedule_register_block(s[rf], reduce_first=True)
    for t in tree:
        _schedule_register_block(s[t], reduce_first=False)
    for t in outs:
        if t.op is not op and not (epilogue and t.op is out):
            schedule_injective_from_existing(s, t)
    return True


def _gemm_tile(extent: int, tile: int) -> int:
    """The tile of a split of ``extent``: ``tile`` when it divides ``extent`` or leaves
    most of it in whole tiles (a remainder loop takes the tail, e.g. the last 5 of 197
    attention columns), else :func:`row_block`'s power-of-two tile."""
    if extent % tile == 0 or extent < tile:
        return min(extent, tile)
    if extent >= 4 * tile:
        return tile
    return row_block(extent, tile)


def _gemm_plan(s, outs, op) -> None:
    out_st, inner = anchor_stages(s, outs, op, keep_inputs=False)
    shape = get_const_tuple(op.output(0).shape)
    m_ext, n_ext = shape[-2], shape[-1]
    width = lanes(op.output(0).dtype)
    # 8 rows x one vector of columns: 8 independent accumulators hide the FMA latency
    nb = _gemm_tile(n_ext, width)
    mb = min(m_ext, 8)
    axes = list(out_st.op.axis)
    batch, m, n = axes[:-2], axes[-2], axes[-1]
    mo, mi = out_st.split(m, factor=mb)
    # a column tail (the last 5 of 197 attention columns) as a remainder loop with no test,
    # which the C compiler vectorizes (1.7x faster than the guarded tail on 12x197x64x197)
    no, ni = out_st.split(n, factor=nb, tail="predicate" if n_ext % nb else None)
    block = _block_order(out_st, batch, mo, no, mi, ni, -(-m_ext // mb), -(-n_ext // nb),
                         m_ext % mb != 0, worth_parallel(op))
    vec = is_pow2(nb)
    if vec:
        out_st.vectorize(ni)
    cs = s[inner]
    cs.compute_at(out_st, block)
    inn = list(cs.op.axis)
    (k,) = cs.op.reduce_axis
    cs.reorder(*inn[:-2], k, inn[-2], inn[-1])
    cs.unroll(inn[-2])
    if vec:
        cs.vectorize(inn[-1])


def _schedule_mm(outs, tags):
    s, outs, op = anchored_schedule(outs, tags)
    if op is None:
        return s
    attrs = op.attrs or {}
    if attrs.get("transpose_b", False) and not attrs.get("transpose_a", False):
        if _dot_plan(s, outs, op):
            return s
    _gemm_plan(s, outs, op)
    return s


def schedule_dense(outs):
    """dense (optionally with bias and an elementwise epilogue)."""
    return _schedule_mm(outs, ("dense",))


__all__ = ["schedule_dense"]
