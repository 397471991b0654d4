"""Walking a stage's iteration-variable relations (split / fuse) in both directions.

``pass_down`` turns ranges of the root axes into ranges of the leaf loops;
``pass_up`` turns the values of the leaf loops into the values of the root axes (an int64
fused loop gives int32 values to the int32 axes it fuses).
"""

from __future__ import annotations

from kiln.ir import dtype as dt
from kiln.ir.expr import IntImm, IterVar, PrimExpr, Range
from kiln.ir.op import cast, floordiv, floormod, widen

from .schedule import Fuse, Split, Stage
from .split_tail import shifted_base


def _ceildiv(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.dtype, -(-a.value // b.value))
    return floordiv(a + b - 1, b)


def root_iter_vars(stage: Stage) -> list[IterVar]:
    return stage.op.root_iter_vars()


def pass_down(stage: Stage, ranges: dict[IterVar, Range], simplify) -> None:
    """Fill ``ranges`` for every derived iteration variable from its parents' ranges."""
    for rel in stage.relations:
        if isinstance(rel, Split):
            parent = ranges[rel.parent]
            if rel.factor is not None:
                ranges[rel.inner] = Range.from_min_extent(0, rel.factor)
                ranges[rel.outer] = Range.from_min_extent(
                    0, simplify(_ceildiv(parent.extent, rel.factor)))
            else:
                ranges[rel.outer] = Range.from_min_extent(0, rel.nparts)
                ranges[rel.inner] = Range.from_min_extent(
                    0, simplify(_ceildiv(parent.extent, rel.nparts)))
        elif isinstance(rel, Fuse):
            dtype = rel.fused.var.dtype
            a, b = ranges[rel.outer], ranges[rel.inner]
            ranges[rel.fused] = Range.from_min_extent(
                0, simplify(widen(a.extent, dtype) * widen(b.extent, dtype)))


def static_extents(stage: Stage) -> dict[IterVar, PrimExpr]:
    """The extent of every iteration variable of ``stage`` from its axes' domains alone,
    before bound inference (which may narrow them): what ``fuse`` chooses a dtype by."""
    ranges = {iv: iv.dom for iv in root_iter_vars(stage)}
    pass_down(stage, ranges, lambda e: e)
    return {iv: r.extent for iv, r in ranges.items()}


def split_factor(rel: Split, ranges: dict[IterVar, Range]) -> PrimExpr:
    """The inner extent of a split (its factor, or derived from nparts)."""
    return rel.factor if rel.factor is not None else ranges[rel.inner].extent


def pass_up(stage: Stage, ranges: dict[IterVar, Range],
            leaf_values: dict[IterVar, PrimExpr],
            shift_inwards: bool = False) -> dict[IterVar, PrimExpr]:
    """Values of all iteration variables given the values of the leaf loops; with
    ``shift_inwards``, the last tile of a ``tail="shift_inwards"`` split is moved back to
    end at its parent's extent (``kiln.te.split_tail``)."""
    values = dict(leaf_values)
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            f = split_factor(rel, ranges)
            if shift_inwards and rel.strategy == "shift_inwards":
                start = shifted_base(values[rel.outer], f, ranges[rel.parent].extent)
            else:
                start = values[rel.outer] * f
            base = start + values[rel.inner]
            pmin = ranges[rel.parent].min
            values[rel.parent] = base + pmin if not _is_zero(pmin) else base
        elif isinstance(rel, Fuse):
            inner_ext = ranges[rel.inner].extent
            fused = values[rel.fused]
            o = _narrow_to(rel.outer, rel.fused, floordiv(fused, inner_ext))
            i = _narrow_to(rel.inner, rel.fused, floormod(fused, inner_ext))
            omin, imin = ranges[rel.outer].min, ranges[rel.inner].min
            values[rel.outer] = o + omin if not _is_zero(omin) else o
            values[rel.inner] = i + imin if not _is_zero(imin) else i
    return values


def _narrow_to(iv: IterVar, fused: IterVar, value: PrimExpr) -> PrimExpr:
    """The value of ``iv`` recovered from the wider loop ``fused`` (an int64 fusion of int32
    axes), in ``iv``'s dtype; otherwise ``value`` as it is."""
    if dt.bits(fused.var.dtype) > dt.bits(iv.var.dtype):
        return cast(value, iv.var.dtype)
    return value


def _is_zero(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 0


def leaf_values(stage: Stage, ranges: dict[IterVar, Range]) -> dict[IterVar, PrimExpr]:
    """Each leaf loop's value: its loop variable plus the loop's minimum."""
    out = {}
    for iv in stage.leaf_iter_vars:
        r = ranges[iv]
        out[iv] = iv.var + r.min if not _is_zero(r.min) else iv.var
    return out


def is_reduce_leaf(iv: IterVar) -> bool:
    return iv.iter_type == IterVar.CommReduce
