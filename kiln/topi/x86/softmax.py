"""x86 schedules of softmax, log_softmax and layer_norm: the rows (the axes before the
normalized ones) run in parallel, each row's intermediate results (maximum, exponentials,
sums, deviation) computed inside the row's iteration in local buffers, the output row
vectorized. Normalized over the last axis, softmax's exponentials are vectorized too (with
``topi.fast_exp`` a vector loop; libm's ``expf`` stays a call per element) and a row's
maximum and sums (softmax's, layer_norm's) are one vector of partial results, then a
reduction of its lanes.

The normalized axis may be symbolic (attention's scores over a dynamic sequence length,
docs/dynamic.md): its loops are then split by the target's vector width with the tail
strategy :data:`SYMBOLIC_TAIL` (guard-free whole vectors, then a remainder loop bounded by
the row's length), and a row reduction's partial results take whole vectors guard-free too
(``rfactor``'s bound is a ``likely`` guard that ``loop_partition`` cuts), so every row is
vector code for any length, 0 included. A row's buffers then have a symbolic size (heap
allocations), so the parallel loop runs over blocks of rows, one allocation per block
(:func:`_rows`), and forks the threads only from ``PARALLEL_MIN_ELEMS`` elements on, tested
at run time (:func:`._common.parallel_when`; below, as for a small static shape, the rows
run in the calling thread).

Guarantee: the schedules compute exactly the operator's compute, for every value of its
symbolic dimensions.
"""

from __future__ import annotations

from kiln import te

from ..utils import all_ops, as_list, get_const_tuple
from ._common import (
    PARALLEL_MIN_ELEMS,
    const_extent,
    fuse_parallel,
    inline_injective,
    is_pow2,
    lanes,
    numel,
    parallel_when,
    work_expr,
)
from .injective import SYMBOLIC_TAIL, schedule_injective_from_existing, schedule_others


def _named(outs, name):
    return next((op for op in all_ops(outs) if op.name == name), None)


#: rows per iteration of the parallel loop when a row's buffers have a symbolic size (module
#: docstring), and the tail strategy of that split: one parallel loop, a test per row
ROW_BLOCK = 8
ROW_BLOCK_TAIL = "guard"


def _count(shape) -> int | None:
    """The product of ``shape`` (the rows' dimensions), None when one is symbolic."""
    count = 1
    for d in shape:
        if not isinstance(d, int):
            return None
        count *= d
    return count


def _rows(st, op, nlead: int):
    """The loop over the first ``nlead`` axes of ``op`` (fused; parallel when big), the
    attach point of each row's intermediate results; over symbolic sizes, in parallel only
    when the tensor has ``PARALLEL_MIN_ELEMS`` elements at run time. When a row has a
    symbolic length, its buffers are allocated on the heap at each iteration of that loop:
    the loop then runs over blocks of :data:`ROW_BLOCK` rows, one allocation per block."""
    lead = list(op.axis[:nlead])
    if not lead:
        return None
    total = numel(op)
    if total is not None and total < PARALLEL_MIN_ELEMS:
        return st.fuse(*lead) if len(lead) > 1 else lead[0]
    shape = get_const_tuple(op.output(0).shape)
    if all(isinstance(d, int) for d in shape[nlead:]):
        fused, _ = fuse_parallel(st, lead, list(shape[:nlead]), 0)
        parallel_when(st, fused, work_expr(op, reduction=False), PARALLEL_MIN_ELEMS)
        return fused
    rows = st.fuse(*lead) if len(lead) > 1 else lead[0]
    count = _count(shape[:nlead])
    factor = ROW_BLOCK if count is None else max(1, min(ROW_BLOCK, count))
    blocks, _ = st.split(rows, factor=factor, tail=ROW_BLOCK_TAIL)
    parallel_when(st, blocks, work_expr(op, reduction=False), PARALLEL_MIN_ELEMS)
    return blocks


def _vectorize_last(st, op):
    axes = list(op.axis)
    ext = get_const_tuple(op.output(0).shape)[-1]
    width = lanes(op.output(0).dtype)
    if not isinstance(ext, int):
        _, xi = st.split(axes[-1], factor=width, tail=SYMBOLIC_TAIL)
        st.vectorize(xi)
    elif ext >= width:
        _, xi = st.split(axes[-1], factor=width)
        st.vectorize(xi)
    elif is_pow2(ext) and ext > 1:
        st.vectorize(axes[-1])


def schedule_softmax(outs):
    """softmax / log_softmax along any axis (rows = the axes before it)."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    out = outs[0].op
    maxe = _named(outs, "T_softmax_maxelem")
    esum = _named(outs, "T_softmax_expsum")
    if maxe is None or esum is None or "axis" not in (out.attrs or {}):
        for t in outs:
            schedule_injective_from_existing(s, t)
        return s
    axis = out.attrs["axis"]
    exp = _named(outs, "T_softmax_exp")
    st = s[out]
    row = _rows(st, out, axis)
    if row is not None:
        s[esum].compute_at(st, row)
        if exp is not None:
            s[exp].compute_at(st, row)
            s[maxe].compute_at(s[exp], s[exp].op.axis[axis - 1])
        else:  # log_softmax: the output reads the maximum too
            s[maxe].compute_at(st, row)
    if axis == len(out.axis) - 1:
        _vectorize_last(st, out)
        if exp is not None and row is not None:  # the exponentials: the costly stage
            _vectorize_last(s[exp], exp)
            _vectorize_row_reduction(s, maxe)
            _vectorize_row_reduction(s, esum)
    return s


def _vectorize_row_reduction(s, red) -> None:
    """A reduction along the row (the last axis, computed inside the row's iteration) as
    ``width`` partial results over vector lanes (``rfactor``), then a reduction of the
    lanes: the scalar loop is one dependent ``max``/``add`` after another. A row length
    that is not a whole number of vectors (ViT's 197 tokens: its softmax 4.5x faster than
    with the scalar loop) or symbolic too: the whole vectors guard-free, the last, partial
    one guarded."""
    k = red.reduce_axis[-1]
    ext = const_extent(k)
    width = lanes(red.output(0).dtype)
    if ext is not None and ext < 2 * width:
        return
    _, ki = s[red].split(k, factor=width)
    rf = s.rfactor(red.output(0), ki, factor_axis=len(red.axis))
    rst = s[rf]
    lane = rf.op.axis[-1]
    rst.reorder(*rf.op.axis[:-1], *rf.op.reduce_axis, lane)
    rst.vectorize(lane)
    rst.compute_at(s[red], s[red].op.axis[-1])


def schedule_layer_norm(outs):
    """layer_norm: when normalized over trailing axes, rows in parallel with their sums
    and deviation computed per row (over one axis: each sum as vector lanes of partial
    sums, :func:`_vectorize_row_reduction`)."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    ln = next((op for op in all_ops(outs) if op.tag == "layer_norm"), None)
    if ln is None:
        for t in outs:
            schedule_injective_from_existing(s, t)
        return s
    s1 = _named(outs, "T_layer_norm_sum")
    s2 = _named(outs, "T_layer_norm_var")
    rstd = _named(outs, "T_layer_norm_rstd")
    inline_injective(s, outs, keep=[rstd])
    axes = list(ln.attrs["axis"])
    ndim = len(ln.axis)
    nlead = ndim - len(axes)
    trailing = axes == list(range(nlead, ndim))
    if outs[0].op is ln and trailing and nlead > 0:
        st = s[ln]
        row = _rows(st, ln, nlead)
        s[s1].compute_at(st, row)
        s[rstd].compute_at(st, row)
        s[s2].compute_at(s[rstd], s[rstd].op.axis[nlead - 1])
        _vectorize_last(st, ln)
        if len(axes) == 1:
            _vectorize_row_reduction(s, s1)
            _vectorize_row_reduction(s, s2)
    schedule_others(s, outs, ln)
    return s


__all__ = ["schedule_softmax", "schedule_layer_norm"]
