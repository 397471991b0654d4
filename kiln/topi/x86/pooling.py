"""x86 schedules of pooling."""

from __future__ import annotations

from ..transform import _parse_layout
from ..utils import get_const_tuple
from ._common import (
    PARALLEL_MIN_ELEMS,
    anchor_and_pad,
    fuse_parallel,
    is_pow2,
    lanes,
    num_threads,
    numel,
    row_block,
)
from .injective import anchored_schedule
from .reduction import schedule_reduce


def schedule_pool(outs, layout=None):
    """pool2d / pool (max or avg, any layout): blocks of output columns (or of the packed
    channel block, when it is innermost) accumulated in a local cache, vectorized; the
    padding stage computed once in parallel."""
    s, outs, pool = anchored_schedule(outs, ("pool_max", "pool_sum"))
    if pool is None:
        return s
    layout = layout or (pool.attrs or {}).get("layout", "NCHW")
    names = [c for c, _ in _parse_layout(layout)]
    hax, wax = names.index("H"), names.index("W")
    out_st, inner = anchor_and_pad(s, outs, pool, channel_axis=1 if hax > 1 else 0)
    shape = get_const_tuple(pool.output(0).shape)
    width = lanes(pool.output(0).dtype)
    axes = list(out_st.op.axis)
    last = len(axes) - 1
    if last == wax:  # NCHW-like: vectorize along the output width
        vw = row_block(shape[wax], width)
        xo, xi = out_st.split(axes[wax], factor=vw)
        lead = axes[:hax]
        out_st.reorder(*lead, *axes[hax:wax], xo, xi)
        if is_pow2(vw):
            out_st.vectorize(xi)
        attach, vec_inner = xo, is_pow2(vw)
        unroll_pos = None
    else:  # the innermost axis is a channel (block): vectorize it, unroll a few pixels
        rw = row_block(shape[wax], 4)
        xo, xi = out_st.split(axes[wax], factor=rw)
        lead = axes[:hax]
        out_st.reorder(*lead, *axes[hax:wax], xo, xi, *axes[wax + 1:])
        vec_inner = is_pow2(shape[last]) and shape[last] <= 2 * width
        if vec_inner:
            out_st.vectorize(axes[last])
        attach, unroll_pos = xo, wax
    total = numel(pool)
    if lead and (total is None or total >= PARALLEL_MIN_ELEMS):
        fuse_parallel(out_st, lead, [shape[k] for k in range(hax)], 4 * num_threads())
    cs = s[inner]
    cs.compute_at(out_st, attach)
    inn = list(cs.op.axis)
    rh, rw_ = cs.op.reduce_axis
    spatial_last = inn[last]
    others = [a for k, a in enumerate(inn) if k != last and k != unroll_pos]
    if unroll_pos is None:
        cs.reorder(*others, rh, rw_, spatial_last)
    else:
        cs.reorder(*others, rh, rw_, inn[unroll_pos], spatial_last)
        cs.unroll(inn[unroll_pos])
    if vec_inner:
        cs.vectorize(spatial_last)
    return s


def schedule_adaptive_pool(outs):
    """adaptive_pool and global_pool: a reduction over each window, parallel over the other
    axes."""
    return schedule_reduce(outs)


schedule_global_pool = schedule_adaptive_pool

__all__ = ["schedule_pool", "schedule_adaptive_pool", "schedule_global_pool"]
