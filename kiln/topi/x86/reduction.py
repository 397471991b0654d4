"""x86 schedule of reductions (sum, max, min, prod, mean, all, any, argmax, argmin)."""

from __future__ import annotations

from kiln import te
from kiln.ir.expr import ProducerLoad, Reduce
from kiln.ir.functor import post_order_visit
from kiln.te.tensor import ComputeOp

from ..utils import all_ops, as_list
from ._common import (
    PARALLEL_MIN_ELEMS,
    const_extent,
    fuse_parallel,
    inline_injective,
    lanes,
    num_threads,
)
from .injective import schedule_injective_from_existing


def _innermost_reduced(op: ComputeOp) -> bool:
    """True when the reduction runs along the innermost axis of the tensor it reads."""
    red = op.body[0]
    if not isinstance(red, Reduce):
        return False
    rvars = {iv.var for iv in op.reduce_axis}
    loads = []
    post_order_visit(red.source[0], lambda n: loads.append(n) if isinstance(n, ProducerLoad)
                     else None)
    if not loads:
        return False
    last = loads[0].indices[-1] if loads[0].indices else None
    return last in rvars


def _work(op: ComputeOp) -> int | None:
    n = 1
    for iv in list(op.axis) + list(op.reduce_axis):
        e = const_extent(iv)
        if e is None:
            return None
        n *= e
    return n


def schedule_reduce_stage(s, tensor) -> None:
    """Schedule one reduction stage in ``s`` (parallel data axes; vectorized along the
    innermost data axis when the reduction does not run along it, else along an rfactor'ed
    slice of the reduction axis)."""
    op = s[tensor].op
    st = s[tensor]
    data = list(op.axis)
    dext = [const_extent(a) for a in data]
    reds = list(op.reduce_axis)
    work = _work(op)
    par_ok = work is None or work >= PARALLEL_MIN_ELEMS
    min_par = 4 * num_threads()
    width = lanes(op.output(0).dtype)
    if len(op.body) > 1:  # argmax/argmin: parallel over the data axes only
        if data and par_ok:
            fuse_parallel(st, data, dext, min_par)
        return
    if data and not _innermost_reduced(op):
        last, elast = data[-1], dext[-1]
        if elast is not None and elast >= 2:
            if elast >= width:
                lo, li = st.split(last, factor=width)
                st.reorder(*data[:-1], lo, *reds, li)
                st.vectorize(li)
                outer, oext = data[:-1] + [lo], dext[:-1] + [-(-elast // width)]
            else:
                st.reorder(*data[:-1], *reds, last)
                if elast & (elast - 1) == 0:
                    st.vectorize(last)
                outer, oext = data[:-1], dext[:-1]
            if outer and par_ok:
                fuse_parallel(st, outer, oext, min_par)
            return
    rlast = reds[-1]
    rext = const_extent(rlast)
    if rext is None or rext < width:
        if data and par_ok:
            fuse_parallel(st, data, dext, min_par)
        return
    # vectorize along the reduction: partial sums over width-wide slices, then a short sum
    ko, ki = st.split(rlast, factor=width)
    rf = s.rfactor(tensor, ki, factor_axis=len(data))
    st = s[tensor]
    rst = s[rf]
    rdata = list(rf.op.axis)
    inner = rdata
    rreds = list(rf.op.reduce_axis)
    rst.reorder(*inner[:-1], *rreds, inner[-1])
    rst.vectorize(inner[-1])
    if data:
        fused = None
        if par_ok:
            fused, count = fuse_parallel(st, data, dext, min_par)
            rest = data[count:]
        else:
            rest = data
        at = rest[-1] if rest else fused
        rst.compute_at(st, at)


def schedule_reduce(outs):
    """Reductions: injective producers inlined, each reduction parallel over its data axes
    and vectorized; an injective output after a reduction (``mean``'s division, argmax's
    index) is scheduled as injective."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    reds = [op for op in all_ops(outs) if isinstance(op, ComputeOp) and op.reduce_axis]
    for op in reds:
        schedule_reduce_stage(s, op.output(0))
    for t in outs:
        if not t.op.reduce_axis:
            schedule_injective_from_existing(s, t)
    return s


__all__ = ["schedule_reduce", "schedule_reduce_stage"]
