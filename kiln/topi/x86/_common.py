"""Helpers of the x86 schedules: vector widths, tile sizes, inlining, parallel loops."""

from __future__ import annotations

import os

from kiln.ir import dtype as dt
from kiln.ir.expr import Call
from kiln.ir.functor import post_order_visit
from kiln.te.tensor import ComputeOp, Operation, PlaceholderOp

from .. import tag as _tag
from ..utils import all_ops, get_const_int, is_const_int

#: Bytes of one SIMD register the schedules target (AVX-512; on narrower machines the C
#: compiler splits a 64-byte vector into two or four registers).
VECTOR_BYTES = 64

#: Below this many output elements a loop nest stays sequential (an OpenMP fork costs more).
PARALLEL_MIN_ELEMS = 16384

_EXPENSIVE = {"exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
              "pow", "sin", "cos", "fmod"}


def lanes(dtype: str) -> int:
    """Elements of ``dtype`` in one vector register."""
    return max(1, VECTOR_BYTES // dt.itemsize(dt.element_of(dtype)))


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


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (at least 1)."""
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def row_block(extent: int, lanes_: int) -> int:
    """Tile of a vectorized row: the vector width when it leaves at least two full tiles or
    divides the row, the whole row when it is at most one vector."""
    if extent <= lanes_:
        return extent
    if extent % lanes_ == 0 or extent // lanes_ >= 2:
        return lanes_
    # one full tile and a partial one: a narrower tile (kiln cannot yet peel a single tile
    # of a loop whose body allocates, see docs/topi.md)
    half = lanes_ // 2
    while half > 1 and extent // half < 2:
        half //= 2
    return max(half, 1)


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


def unit_split(stage, axes) -> list:
    """Split every axis into (1, extent) and return the inner axes.

    A stage computed inside another stage's loop reads root stages (padding, packing)
    through these inner loops; splitting gives its bound inference the absolute index of
    every axis (kiln bug bound_root_producer_of_attached_consumer, docs/topi.md)."""
    return [stage.split(a, nparts=1)[1] for a in axes]


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


__all__ = [
    "VECTOR_BYTES", "PARALLEL_MIN_ELEMS", "lanes", "num_threads", "const_extent", "numel",
    "largest_divisor", "is_pow2", "row_block", "has_expensive_call", "inline_injective",
    "unit_split", "fuse_parallel",
]
