"""Helpers of the x86 schedules: vector widths, tile sizes, inlining, parallel loops.

The machine facts (vector width, vector registers) are the current target's
(``kiln.target.current_cpu``); the helpers here only turn them into schedule terms.
"""

from __future__ import annotations

import functools
import operator
import os

from kiln.ir import dtype as dt
from kiln.ir.expr import Call, PrimExpr
from kiln.ir.functor import post_order_visit
from kiln.ir.op import convert
from kiln.target import current_cpu
from kiln.te.tensor import ComputeOp, Operation, PlaceholderOp

from .. import tag as _tag
from ..utils import all_ops, get_const_int, input_tensors, is_const_int


def lanes(dtype: str) -> int:
    """Elements of ``dtype`` in one vector register of the CPU the kernels are built for
    (16 float32 with AVX-512, 8 with AVX2: ``kiln.target.current_cpu``)."""
    return current_cpu().vector_lanes(dt.itemsize(dt.element_of(dtype)))


def vector_registers() -> int:
    """Vector registers of the CPU the kernels are built for (32 with AVX-512, 16 with
    AVX2): the budget of a register tile, accumulators plus operands."""
    return current_cpu().vector_registers


#: Below this many output elements a loop nest stays sequential (an OpenMP fork costs more).
PARALLEL_MIN_ELEMS = 16384

_EXPENSIVE = {"exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
              "pow", "sin", "cos", "fmod"}


def num_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def const_extent(iv) -> int | None:
    ext = iv.dom.extent
    return get_const_int(ext) if is_const_int(ext) else None


def numel(op: Operation) -> int | None:
    n = 1
    for s in op.output(0).shape:
        if not is_const_int(s):
            return None
        n *= get_const_int(s)
    return n


def work(op: Operation) -> int | None:
    """Output elements times reduction extent: the inner-loop iterations of ``op``."""
    n = numel(op)
    if n is None:
        return None
    for iv in getattr(op, "reduce_axis", []):
        e = const_extent(iv)
        if e is None:
            return None
        n *= e
    return n


def worth_parallel(op: Operation) -> bool:
    """Whether ``op`` has enough work for a parallel loop (unknown sizes: yes)."""
    w = work(op)
    return w is None or w >= PARALLEL_MIN_ELEMS * 4


def work_expr(op: Operation, reduction: bool = True) -> PrimExpr:
    """:func:`work` (or, without ``reduction``, :func:`numel`) as an expression of the
    symbolic dimensions."""
    extents = list(op.output(0).shape)
    if reduction:
        extents += [iv.dom.extent for iv in getattr(op, "reduce_axis", [])]
    return functools.reduce(operator.mul, extents, convert(1))


def parallel_when(stage, axis, amount: PrimExpr, least: int) -> None:
    """Run ``axis`` of ``stage`` in parallel, forking the threads only when ``amount`` (the
    work, an expression of the symbolic dimensions) reaches ``least`` at run time; below,
    the loop runs in the calling thread (``pragma parallel_if``: an OpenMP fork costs about
    a microsecond even on one thread, more than a small kernel's whole work)."""
    if is_const_int(amount):
        if get_const_int(amount) >= least:
            stage.parallel(axis)
        return
    stage.parallel(axis)
    stage.pragma(axis, "parallel_if", amount >= least)


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (at least 1)."""
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def row_block(extent: int, lanes_: int) -> int:
    """Tile of a vectorized row: the widest power of two up to the vector width whose
    remainder tile (peeled off by loop partitioning) is empty or a power of two too, so
    that every tile vectorizes."""
    b = 1
    while b * 2 <= min(extent, lanes_):
        b *= 2
    while b > 1:
        tail = extent % b
        if tail == 0 or is_pow2(tail):
            return b
        b //= 2
    return 1


def has_expensive_call(op: Operation) -> bool:
    found = []

    def visit(n):
        if isinstance(n, Call) and n.op in _EXPENSIVE:
            found.append(n)

    if isinstance(op, ComputeOp):
        for b in op.body:
            post_order_visit(b, visit)
    return bool(found)


def inline_injective(s, outs, keep=()) -> None:
    """Inline the injective stages of ``s`` that are not outputs, except those in ``keep``
    and small stages with an expensive call (per-channel ``rsqrt`` of a batch norm ...),
    which are cheaper computed once than inlined into a bigger consumer."""
    keep_ids = {id(op) for op in keep}
    ops = all_ops(outs)
    biggest = max((numel(t.op) or 0) for t in outs) if outs else 0
    for op in ops:
        if isinstance(op, PlaceholderOp) or id(op) in keep_ids or op.reduce_axis:
            continue
        st = s[op]
        if st.is_output or st.attach_type != "root" or st.relations or st.iter_var_attrs:
            continue
        if not (_tag.is_injective(op.tag) or not op.tag):
            continue
        n = numel(op)
        if has_expensive_call(op) and n is not None and n * 4 <= biggest:
            continue
        st.compute_inline()


def fuse_parallel(stage, axes, extents, min_extent: int = 0):
    """Fuse the shortest prefix of ``axes`` (consecutive leaves, outer to inner, with
    ``extents``; None = unknown) whose extent reaches ``min_extent`` (all of them when 0)
    and mark it parallel. Returns ``(fused axis, number of axes fused)``; ``(None, 0)``
    when there is no axis."""
    if not axes:
        return None, 0
    take, ext = [], 1
    for a, e in zip(axes, extents, strict=True):
        take.append(a)
        ext = ext * e if (e is not None and ext is not None) else None
        if min_extent and ext is not None and ext >= min_extent:
            break
    fused = stage.fuse(*take) if len(take) > 1 else take[0]
    stage.parallel(fused)
    return fused, len(take)


def same_const_shape(a: Operation, b: Operation) -> bool:
    sa = [get_const_int(x) if is_const_int(x) else None for x in a.output(0).shape]
    sb = [get_const_int(x) if is_const_int(x) else None for x in b.output(0).shape]
    return len(sa) == len(sb) and None not in sa and sa == sb


def anchor_stages(s, outs, anchor: Operation, keep_inputs: bool = True):
    """Prepare the schedule of a complex operator ``anchor`` (convolution, dense, pooling)
    that may be followed by an elementwise epilogue (bias, relu, add ...).

    Inlines the injective stages around it (not its direct inputs, which the operator's
    schedule places itself, when ``keep_inputs``) and returns ``(out_stage, inner)``: the
    stage whose loops are blocked and parallelized, and the tensor computed per block inside
    it (``compute_at``). When ``anchor`` is the output, ``inner`` is a local cache of it
    (``cache_write``); when an epilogue of the same shape follows, ``out_stage`` is the
    epilogue and ``inner`` is ``anchor``; otherwise ``anchor`` is blocked with a cache of
    its own and the other outputs get injective schedules.
    """
    from .injective import schedule_injective_from_existing

    keep = [t.op for t in input_tensors(anchor)] if keep_inputs else []
    inline_injective(s, outs, keep=keep)
    out = outs[0].op
    if out is anchor:
        cache = s.cache_write(anchor.output(0), "local")
        return s[anchor.output(0)], cache
    if same_const_shape(out, anchor) and s[out].attach_type == "root" and not out.reduce_axis:
        for t in outs[1:]:
            if t.op is not anchor:
                schedule_injective_from_existing(s, t)
        return s[out], anchor.output(0)
    cache = s.cache_write(anchor.output(0), "local")
    for t in outs:
        if t.op is not anchor:
            schedule_injective_from_existing(s, t)
    return s[anchor.output(0)], cache


def unit_split2(stage, axes) -> tuple[list, list]:
    """Split every axis into (1, extent); returns ``(outer axes, inner axes)``. The outer
    loops (one iteration each) give an attach point that covers the whole block."""
    pairs = [stage.split(a, nparts=1) for a in axes]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def find_anchor(outs, tags) -> Operation | None:
    """The operation reachable from ``outs`` whose tag is one of ``tags`` (the last found,
    i.e. the one closest to the outputs)."""
    found = None
    for op in all_ops(outs):
        if (getattr(op, "tag", "") or "") in tags:
            found = op
    return found


def pad_stage_of(t) -> Operation | None:
    """The padding stage that produces tensor ``t``, if any."""
    op = t.op
    if isinstance(op, ComputeOp) and "pad" in (op.tag or "").split(","):
        return op
    return None


def schedule_pad(s, op: Operation, channel_axis: int = 1) -> None:
    """A padding (or packing) stage at the root: parallel over its channel axis (fused with
    the next axes while shorter than 4 x the threads) when big; a branch-free (masked)
    padding whose innermost axis is a short power of two (a packed channel block)
    vectorized along it."""
    st = s[op]
    if st.attach_type != "root":
        return
    axes = list(op.axis)
    if (op.attrs or {}).get("masked") and len(axes) > 1:
        e = const_extent(axes[-1])
        if e is not None and is_pow2(e) and 1 < e <= 2 * lanes(op.output(0).dtype):
            st.vectorize(axes[-1])
    n = numel(op)
    if n is not None and n < PARALLEL_MIN_ELEMS:
        return
    if len(axes) > channel_axis + 1:
        # with few channel (blocks), rows join the parallel loop: the stem's NCHW3c input
        # has one block, and its padding ran on one thread (0.3 ms)
        outer = axes[channel_axis:-1]
        fuse_parallel(st, outer, [const_extent(a) for a in outer], min_extent=4 * num_threads())
    elif len(axes) > channel_axis:
        st.parallel(axes[channel_axis])


__all__ = [
    "PARALLEL_MIN_ELEMS", "vector_registers", "lanes",
    "num_threads", "const_extent", "numel", "work", "worth_parallel",
    "largest_divisor", "is_pow2", "row_block", "has_expensive_call", "inline_injective",
    "unit_split2", "fuse_parallel", "same_const_shape", "anchor_stages",
    "find_anchor", "pad_stage_of", "schedule_pad",
]


def anchor_and_pad(s, outs, anchor: Operation, channel_axis: int = 1,
                   inline_pad: bool = False):
    """``anchor_stages`` plus the schedule of the anchor's padding input, when it has one
    (with ``inline_pad``, a branch-free masked padding is computed inline instead: the
    anchor reads the input directly, clamped and masked)."""
    from ..utils import input_tensors

    out_st, inner = anchor_stages(s, outs, anchor)
    pad = pad_stage_of(input_tensors(anchor)[0])
    if pad is not None:
        if inline_pad and (pad.attrs or {}).get("masked"):
            s[pad].compute_inline()
        else:
            schedule_pad(s, pad, channel_axis=channel_axis)
    return out_st, inner
