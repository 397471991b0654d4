"""x86 schedules of injective operators: parallel outer loops, vectorized inner loop.

A symbolic innermost axis (a transpose over a dynamic sequence length, docs/dynamic.md) is
split by the vector width with the tail strategy :data:`SYMBOLIC_TAIL`: guard-free whole
vectors, then a remainder loop bounded by the axis' length, inside the one parallel loop of
the outer axes, as a static axis is.

The vector width is one register of the widest scalar type the stage computes with
(:func:`compute_dtype`), not of its output: a float32 computation stored as uint16 (a bf16
rounding) or int8 runs on 16-lane float32 vectors with AVX-512, which the C compiler keeps in
registers, where 32 or 64 lanes would be split into halves and some operations (integer
divisions) done element by element.
"""

from __future__ import annotations

from kiln import te
from kiln.ir import dtype as dt
from kiln.ir.expr import Node, ProducerLoad
from kiln.ir.functor import collect_vars, post_order_visit
from kiln.te.tensor import ComputeOp, Tensor

from ..utils import as_list
from ._common import (
    PARALLEL_MIN_ELEMS,
    const_extent,
    find_anchor,
    fuse_parallel,
    inline_injective,
    is_pow2,
    lanes,
    num_threads,
    numel,
    parallel_when,
    work_expr,
)

#: the tail strategy of a symbolic axis split by the vector width (module docstring)
SYMBOLIC_TAIL = "predicate"


def _short_scattered_innermost(op: ComputeOp, extent: int | None, width: int) -> bool:
    """Whether the innermost axis is shorter than a vector, not a power of two, and indexes
    an input along another of its axes (a layout transform into ``NCHW3c``). Fused
    with the next axis and vectorized, every lane would then divide by the short extent
    and gather (measured 3x slower than the short axis unrolled)."""
    if extent is None or extent >= width or is_pow2(extent) or extent > 16:
        return False
    inner = op.axis[-1].var
    scattered = []

    def visit(n):
        if isinstance(n, ProducerLoad) and any(inner in collect_vars(i) for i in n.indices[:-1]):
            scattered.append(n)

    for b in op.body:
        post_order_visit(b, visit)
    return bool(scattered)


def _children(node: Node) -> list:
    """The values of the fields of ``node``, tuples (a call's arguments) flattened."""
    out: list = []
    for f in node._fields:
        v = getattr(node, f)
        out.extend(v if isinstance(v, tuple) else (v,))
    return out


def compute_dtype(op: ComputeOp) -> str:
    """The widest scalar type ``op`` computes with: its outputs', every tensor read's and
    every intermediate value's that depends on a read (a float32 rounding stored as uint16
    computes in float32 and uint32). Index arithmetic (iteration variables, constants, a
    padding condition on them) does not count: it is not data the vector lanes hold."""
    widest = max((op.output(i).dtype for i in range(op.num_outputs)), key=dt.itemsize)
    data: set[int] = set()  # ids of the nodes whose value depends on a tensor read

    def visit(n: Node) -> None:
        nonlocal widest
        if isinstance(n, ProducerLoad) or any(id(c) in data for c in _children(n)):
            data.add(id(n))
            scalar = dt.element_of(n.dtype)
            if dt.itemsize(scalar) > dt.itemsize(widest):
                widest = scalar

    for b in op.body:
        post_order_visit(b, visit)
    return widest


def schedule_injective_from_existing(sch, out):
    """Schedule the injective stage of ``out`` in ``sch``: the inner axes (fused while
    shorter than a vector) split by the vector width of the widest type the stage computes
    with (:func:`compute_dtype`) and vectorized, the outer loops fused into one parallel
    loop when the tensor is big enough. Returns ``sch``."""
    op = out.op if isinstance(out, Tensor) else out
    if not isinstance(op, ComputeOp) or op.reduce_axis:
        return sch
    st = sch[op]
    axes = list(op.axis)
    if not axes:
        return sch
    exts = [const_extent(a) for a in axes]
    width = lanes(compute_dtype(op))
    if len(axes) > 1 and _short_scattered_innermost(op, exts[-1], width):
        # e.g. NCHW -> NCHW3c: the 3 copies unrolled side by side, GCC vectorizes the row
        st.unroll(axes[-1])
        outer_axes, outer_exts = axes[:-2], exts[:-2]
    else:
        outer_axes, outer_exts = _vectorize_inner(st, axes, exts, width)
    total = numel(op)
    if outer_axes and (total is None or total >= PARALLEL_MIN_ELEMS):
        fused, _ = fuse_parallel(st, outer_axes, outer_exts, min_extent=4 * num_threads())
        parallel_when(st, fused, work_expr(op), PARALLEL_MIN_ELEMS)
    return sch


def _vectorize_inner(st, axes, exts, width):
    """Fuse the trailing axes while the innermost is shorter than a vector, split off and
    vectorize one vector of it; returns the loops outside (axes and extents)."""
    k = len(axes) - 1
    inner_ext = exts[k]
    while (k > 0 and inner_ext is not None and inner_ext < width and exts[k - 1] is not None):
        k -= 1
        inner_ext *= exts[k]
    if k < len(axes) - 1:
        inner = st.fuse(*axes[k:])
        axes, exts = axes[:k] + [inner], exts[:k] + [inner_ext]
    outer_axes, outer_exts = axes[:-1], exts[:-1]
    last, elast = axes[-1], exts[-1]
    if elast is None:  # symbolic: whole vectors guard-free, then a remainder loop
        xo, xi = st.split(last, factor=width, tail=SYMBOLIC_TAIL)
        st.vectorize(xi)
        return outer_axes + [xo], outer_exts + [None]
    if elast >= width:
        xo, xi = st.split(last, factor=width)
        st.vectorize(xi)
        return outer_axes + [xo], outer_exts + [-(-elast // width)]
    if is_pow2(elast) and elast > 1:
        st.vectorize(last)
        return outer_axes, outer_exts
    return outer_axes + [last], outer_exts + [elast]


def schedule_injective(outs):
    """Injective operators (elementwise, broadcast, reshape, transpose, concatenate, pad,
    batch norm ...): intermediate injective stages inlined, each output parallel over its
    outer loops and vectorized along the innermost."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    for t in outs:
        schedule_injective_from_existing(s, t)
    return s


schedule_elemwise = schedule_injective
schedule_broadcast = schedule_injective
schedule_batch_norm = schedule_injective


def schedule_others(s, outs, *scheduled) -> None:
    """The injective schedule for each output of ``outs`` whose operation is not among
    ``scheduled`` (the operations an operator's schedule has placed itself)."""
    for t in outs:
        if not any(t.op is op for op in scheduled):
            schedule_injective_from_existing(s, t)


def anchored_schedule(outs, tags) -> tuple[te.Schedule, list, ComputeOp | None]:
    """``(schedule, outs, anchor)``: a new schedule of ``outs`` (as a list) and the operation
    among them tagged one of ``tags`` (``find_anchor``), which the operator's schedule then
    blocks. Without one, every output gets the injective schedule and ``anchor`` is None."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    anchor = find_anchor(outs, tags)
    if anchor is None:
        schedule_others(s, outs)
    return s, outs, anchor


__all__ = [
    "schedule_injective", "schedule_injective_from_existing", "schedule_elemwise",
    "schedule_broadcast", "schedule_batch_norm", "anchored_schedule", "schedule_others",
]
