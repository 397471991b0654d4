"""x86 schedules of dense, matmul and batch_matmul.

Two plans, chosen by which operand is contiguous along the reduction:

* dot plan (dense, ``transpose_b=True``): both operands are contiguous along ``k``. The
  reduction is split into vector-wide slices and ``rfactor``'ed: a register block of
  ``MB x NB`` vector partial sums is accumulated over ``k`` (vector loads of both operands),
  then reduced across the lanes.
* gemm plan (``transpose_b=False``): ``B`` rows are contiguous along ``n``. A register block
  of 8 rows x one vector of columns is accumulated in a local cache over ``k``, broadcasting
  one element of ``A`` per row (the book's §4.6 blocking).
"""

from __future__ import annotations

from kiln import te

from ..utils import as_list, get_const_tuple
from ._common import (
    anchor_stages,
    const_extent,
    find_anchor,
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
from .injective import schedule_injective_from_existing


def _block_order(st, batch, mo, no, mi, ni, mcount, ncount, parallel=True):
    """Order (batch..., outer blocks, inner blocks) with a parallel loop outermost (unless
    ``parallel`` is false); returns the inner of the two outer block axes (where a block's
    stages are computed)."""
    first_m = bool(batch) or mcount >= ncount or mcount >= 2 * num_threads()
    outer = [mo, no] if first_m else [no, mo]
    st.reorder(*batch, *outer, mi, ni)
    if parallel:
        st.parallel(batch[0] if batch else outer[0])
    return outer[1]


def dot_plan_params(op) -> dict | None:
    """The hand sizes of the rfactor plan: ``kv`` (vector slice of ``k``), ``mb`` x ``nb``
    (register block); None when ``k`` is not a multiple of 4 (autotvm's dense template
    tunes these, see tunable.py)."""
    kext = const_extent(op.reduce_axis[0])
    width = lanes(op.output(0).dtype)
    kv = next((v for v in (width, width // 2, 4) if kext is not None and kext % v == 0), None)
    if kv is None or kv < 4:
        return None
    shape = get_const_tuple(op.output(0).shape)
    mb = largest_divisor(shape[-2], 4)
    return {"kv": kv, "mb": mb, "nb": largest_divisor(shape[-1], 8 if mb == 1 else 4)}


def _dot_plan(s, outs, op, params=None) -> bool:
    """The rfactor plan (sizes ``params``, default :func:`dot_plan_params`); returns False
    (nothing scheduled) when ``k`` is not a multiple of 4."""
    params = params or dot_plan_params(op)
    if params is None:
        return False
    k = op.reduce_axis[0]
    kv, mb, nb = params["kv"], params["mb"], params["nb"]
    inline_injective(s, outs)
    out = outs[0].op
    shape = get_const_tuple(op.output(0).shape)
    m_ext, n_ext = shape[-2], shape[-1]
    tensor = op.output(0)
    st = s[tensor]
    _, ki = st.split(k, factor=kv)
    rf = s.rfactor(tensor, ki, factor_axis=len(op.axis))
    st = s[tensor]
    epilogue = out is not op and same_const_shape(out, op) and not out.reduce_axis
    top = s[out] if epilogue else st
    axes = list(top.op.axis)
    batch, m, n = axes[:-2], axes[-2], axes[-1]
    mo, mi = top.split(m, factor=mb)
    no, ni = top.split(n, factor=nb)
    block = _block_order(top, batch, mo, no, mi, ni, m_ext // mb, n_ext // nb,
                         worth_parallel(op))
    rst = s[rf]
    if epilogue:
        st.compute_at(top, block)
        outer, _ = unit_split2(st, st.op.axis)
        rst.compute_at(st, outer[-1])
    else:
        rst.compute_at(top, block)
    rinner = list(rst.op.axis)
    (rko,) = rst.op.reduce_axis
    rst.reorder(*rinner[:-3], rko, *rinner[-3:])
    rst.unroll(rinner[-3])
    rst.unroll(rinner[-2])
    rst.vectorize(rinner[-1])
    for t in outs:
        if t.op is not op and not (epilogue and t.op is out):
            schedule_injective_from_existing(s, t)
    return True


def _gemm_plan(s, outs, op) -> None:
    out_st, inner = anchor_stages(s, outs, op, keep_inputs=False)
    shape = get_const_tuple(op.output(0).shape)
    m_ext, n_ext = shape[-2], shape[-1]
    width = lanes(op.output(0).dtype)
    # 8 rows x one vector of columns: 8 independent accumulators hide the FMA latency
    nb = row_block(n_ext, width)
    mb = 8 if m_ext >= 8 else m_ext
    axes = list(out_st.op.axis)
    batch, m, n = axes[:-2], axes[-2], axes[-1]
    mo, mi = out_st.split(m, factor=mb)
    no, ni = out_st.split(n, factor=nb)
    block = _block_order(out_st, batch, mo, no, mi, ni, -(-m_ext // mb), -(-n_ext // nb),
                         worth_parallel(op))
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
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    op = find_anchor(outs, tags)
    if op is None:
        for t in outs:
            schedule_injective_from_existing(s, t)
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


def schedule_matmul(outs):
    """topi.matmul."""
    return _schedule_mm(outs, ("matmul",))


def schedule_batch_matmul(outs):
    """batch_matmul (batch axis parallel)."""
    return _schedule_mm(outs, ("batch_matmul",))


__all__ = ["schedule_dense", "schedule_matmul", "schedule_batch_matmul"]
