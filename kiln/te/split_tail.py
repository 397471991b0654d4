"""Tail strategies of a split whose factor may not divide the extent (issue 19).

``s[C].split(i, factor=8, tail=...)`` chooses how the iterations past the extent ``n`` of
``i`` are handled; the loop nests below are for ``C[i] = A[i]*2`` (docs/dynamic.md shows them
lowered side by side):

* ``None`` (the default): the ``likely`` guard, which ``kiln.tir.loop_partition`` cuts into
  guard-free full tiles and a guarded tail (unless ``partition_const_loop`` is off for a
  constant extent), exactly as before this option existed.
* ``"guard"``: one loop nest, ``if (likely(i.outer*8 + i.inner < n))`` in every iteration;
  ``loop_partition`` leaves its loops alone (the smallest code).
* ``"partition"``: the guard, and its loops are always cut, even for a constant extent with
  ``partition_const_loop`` off::

      for (i.outer, 0, floordiv(n, 8)) { for (i.inner, 0, 8) { C[...] = ... } }
      for (i.outer, floordiv(n, 8), ...) { for (i.inner, 0, 8) { if (likely(...)) ... } }

* ``"predicate"``: partitioned as above, and in the tail the guard becomes the bound of the
  inner loop, a remainder loop with no test; a vectorized one becomes, in C, one vector of
  the factor's lanes whose loads and stores are masked (``kiln.tir.vectorize``)::

      for (i.outer, floordiv(n, 8), ...) { for (i.inner, 0, (n - (i.outer*8))) { ... } }

* ``"shift_inwards"`` (Halide's ShiftInwards): the last tile moves back to end at ``n`` and
  overlaps the one before it, so every tile is full and no test is left::

      for (i.outer, 0, floordiv((n + 7), 8)) { for (i.inner, 0, 8) {
        C[(min((i.outer*8), (n - 8)) + i.inner)] = ... } }

  Elements of the overlap are computed twice, so the stage must be a pure ``te.compute``
  with no reduction (a reduced element computed twice would be reset and summed again:
  ScheduleError). An extent below the factor has no full tile: a constant one falls back to
  the default guard; a symbolic one gets both nests, ``if (8 <= n) {shifted} else
  {default}``. A stage with other stages computed inside its loops (a ``cache_write``'s
  local stage at a loop of it) keeps the default guard too: their regions are inferred for
  the unshifted tiles.
* ``"pad"``: the stage's buffer is rounded up to whole tiles (the split's outer extent
  times its inner extent) and the last tile stores into the padding with no test; its
  values are computed at the last element (the axis clamped to ``n - 1``, and into the
  axis's domain: ``pad_value``), so that nothing past an input's end is read. Bound
  inference gives the stages computed inside its loops the region of the clamped reads.
  Only for an intermediate that kiln allocates (not an output nor an argument:
  ScheduleError) and a split of one of the operation's data-parallel axes.
* ``"dispatch"``: partitioned as for ``"predicate"``, and the remainder loop (its extent
  ``r`` below the factor) is cut into paths of descending widths that dispatch on ``r`` at
  run time: for a factor of 16 with the widths ``(8, 1)`` the bulk runs 16-wide, then an
  8-wide path when ``8 <= r``, then a scalar loop (``kiln.tir.dispatch_remainder``)::

      for (i.outer, floordiv(n, 16), ...) {
        if (8 <= (n - (i.outer*16))) { vectorized (i.inner.l8, 0, 8) { ... } }
        for (i.inner, floordiv(...)*8, ...) { ... } }

  ``kiln.cost.dispatch_choice`` keeps a width only where the cost model predicts that it
  pays (``Split.dispatch_widths``; with none kept, the scalar loop alone, as
  ``"predicate"``). For a data-parallel axis; a split by ``nparts`` or a symbolic factor,
  or whose inner loop is split or fused again, gets the scalar loop alone.
* ``"auto"``: ``kiln.cost.tail_choice`` lowers the candidates and keeps the one the cost model
  predicts fastest.

Guarantee: whatever the strategies, every element of the stage's region is stored with the
value of the computation; only ``"shift_inwards"`` (same value twice) and ``"pad"`` (elements
of the padding) store more.
"""

from __future__ import annotations

from kiln.errors import ScheduleError
from kiln.ir.expr import IntImm, IterVar, PrimExpr, Range
from kiln.ir.op import emax, emin
from kiln.tir.dispatch_remainder import DISPATCH_ANNOTATION
from kiln.tir.loop_partition import TAIL_ANNOTATION

from .schedule import Fuse, Split, Stage
from .tensor import ComputeOp

TAIL_STRATEGIES = ("guard", "partition", "predicate", "shift_inwards", "pad", "dispatch",
                   "auto")


def check_tail(stage: Stage, parent: IterVar, tail: str) -> None:
    """Raise ScheduleError, at ``split``, when ``tail`` is unknown or illegal for ``parent``."""
    where = f"split on stage '{stage.name}', axis '{parent.var.name}'"
    if tail not in TAIL_STRATEGIES:
        raise ScheduleError(f"{where}: unknown tail strategy {tail!r}; use one of "
                            f"{', '.join(map(repr, TAIL_STRATEGIES))}")
    if tail == "shift_inwards":
        if parent.iter_type == IterVar.CommReduce or not isinstance(stage.op, ComputeOp) \
                or stage.op.reduce_axis:
            raise ScheduleError(
                f"{where}: tail='shift_inwards' computes the elements where the last two tiles "
                f"overlap twice, which is legal only for a pure te.compute without reduction "
                f"('{stage.name}' reduces into its output); use tail='partition' or "
                f"'predicate'")
    if tail == "dispatch" and parent.iter_type == IterVar.CommReduce:
        raise ScheduleError(
            f"{where}: tail='dispatch' runs the remainder as vector paths, which needs a "
            f"data-parallel axis ('{parent.var.name}' is a reduction axis); use "
            f"tail='predicate' or 'partition'")
    if tail == "pad":
        if stage.is_output:
            raise ScheduleError(
                f"{where}: tail='pad' rounds the stage's buffer up to whole tiles; "
                f"'{stage.name}' is an output of the schedule, whose buffer the caller "
                f"allocates. Use tail='partition', 'predicate' or 'shift_inwards'")
        if not isinstance(stage.op, ComputeOp) or parent not in stage.op.axis:
            raise ScheduleError(
                f"{where}: tail='pad' applies to a split of one of the operation's "
                f"data-parallel axes (s[{stage.name}].op.axis)")


def legal_tails(stage: Stage, axis: IterVar) -> list[str]:
    """The tail strategies ``split`` accepts for ``axis`` of ``stage``, "auto" left out: the
    candidates of an AutoTVM knob, ``cfg.define_knob("tail", legal_tails(s[C], x))`` and then
    ``s[C].split(x, factor=cfg["tile"].val, tail=cfg["tail"].val)``."""
    out = []
    for tail in TAIL_STRATEGIES[:-1]:
        try:
            check_tail(stage, axis, tail)
        except ScheduleError:
            continue
        out.append(tail)
    return out


def check_pad_allocated(stage: Stage, arg_tensors) -> None:
    """Raise ScheduleError when a padded stage's tensor is a function argument (found only
    when lowering: the argument list is given then)."""
    if any(rel.strategy == "pad" for rel in _splits(stage)) and \
            any(t in arg_tensors for t in stage.op.outputs):
        raise ScheduleError(
            f"split on stage '{stage.name}': tail='pad' rounds the buffer of '{stage.name}' "
            f"up to whole tiles, but it is an argument of the function (its caller allocates "
            f"it); leave it out of the arguments or use another tail strategy")


def _splits(stage: Stage) -> list[Split]:
    return [rel for rel in stage.relations if isinstance(rel, Split)]


def governing_split(stage: Stage, iv: IterVar) -> Split | None:
    """The first split below ``iv`` (through fusions): the one whose tail may overrun it."""
    for rel in stage.relations:
        if isinstance(rel, Split) and rel.parent is iv:
            return rel
        if isinstance(rel, Fuse) and iv in (rel.outer, rel.inner):
            return governing_split(stage, rel.fused)
    return None


def _leaves_below(stage: Stage, iv: IterVar) -> list[IterVar]:
    """The leaf loops that ``iv`` became through splits and fusions."""
    if iv in stage.leaf_iter_vars:
        return [iv]
    for rel in stage.relations:
        if isinstance(rel, Split) and rel.parent is iv:
            return _leaves_below(stage, rel.outer) + _leaves_below(stage, rel.inner)
        if isinstance(rel, Fuse) and iv in (rel.outer, rel.inner):
            return _leaves_below(stage, rel.fused)
    return []


#: the loop annotation of a split's outer and inner leaves, per strategy
_OUTER_INNER = {"guard": ("guard", "guard"), "partition": ("partition", None),
                "predicate": ("partition", "remainder"), "dispatch": ("partition", "remainder")}


def loop_annotations(stage: Stage) -> dict[IterVar, tuple[tuple[str, object], ...]]:
    """The ``For`` annotations of each leaf loop of a split with an explicit guard,
    partition, predicate or dispatch tail. ``TAIL_ANNOTATION`` says what ``loop_partition``
    does with the loop: "guard" (never cut), "partition" (always cut), "remainder" (in the
    tail, the guard becomes the loop's bound); the outermost split claims a leaf first. The
    inner leaf of a dispatch split also gets ``DISPATCH_ANNOTATION``: the factor, then the
    widths of its remainder's paths (``dispatch_paths``)."""
    out: dict[IterVar, tuple[tuple[str, object], ...]] = {}
    for rel in _splits(stage):
        outer_inner = _OUTER_INNER.get(rel.strategy)
        if outer_inner is None:
            continue
        for side, mark in zip((rel.outer, rel.inner), outer_inner, strict=True):
            if mark is not None:
                for leaf in _leaves_below(stage, side):
                    out.setdefault(leaf, ((TAIL_ANNOTATION, mark),))
        paths = dispatch_paths(rel)
        if paths and out.get(rel.inner) == ((TAIL_ANNOTATION, "remainder"),):
            out[rel.inner] += ((DISPATCH_ANNOTATION, paths),)
    return out


def dispatch_factor(rel: Split) -> int | None:
    """The constant factor of a dispatch split, whose divisors its paths may take (None for
    another strategy, an ``nparts`` split or a symbolic factor)."""
    if rel.strategy != "dispatch" or not isinstance(rel.factor, IntImm):
        return None
    return int(rel.factor.value)


def dispatch_paths(rel: Split) -> tuple[int, ...] | None:
    """``(factor, w_1, ..., 1)``: the full tile's width, then the widths of the remainder's
    paths that the cost model chose (``Split.dispatch_widths``); None where there is
    nothing to dispatch (no dispatch factor, or only the scalar path)."""
    factor = dispatch_factor(rel)
    widths = tuple(w for w in (rel.dispatch_widths or ()) if 1 < w < (factor or 0))
    if factor is None or not widths:
        return None
    return (factor, *widths, 1)


def guard_group(stage: Stage, iv: IterVar) -> str | None:
    """The strategy whose guard checks root (or split parent) axis ``iv``: the strategy of
    its governing split, None for the default guard."""
    rel = governing_split(stage, iv)
    return None if rel is None else rel.strategy


def shift_splits(stage: Stage) -> list[Split]:
    return [rel for rel in _splits(stage) if rel.strategy == "shift_inwards"]


def shifted_base(outer: PrimExpr, factor: PrimExpr, extent: PrimExpr) -> PrimExpr:
    """Where tile ``outer`` starts with the last tile shifted to end at ``extent``."""
    return emin(outer * factor, extent - factor)


def padded_extent(rel: Split, ranges: dict[IterVar, Range]) -> PrimExpr:
    """The elements a padded split stores: its outer loop's extent times its inner
    loop's, whole tiles. For ``factor=f`` that is ``ceil(n/f)*f``; for ``nparts=p`` it is
    ``p*ceil(n/p)``, which may exceed ``n`` rounded up to tiles of ``ceil(n/p)`` (``n=1,
    p=4``: four tiles of one element)."""
    return ranges[rel.outer].extent * ranges[rel.inner].extent


def padded_ranges(stage: Stage, ranges: dict[IterVar, Range]) -> list[Range]:
    """The realize region of a stage whose padded axes are rounded up to whole tiles."""
    out = []
    for iv in stage.op.axis:
        r = ranges[iv]
        rel = governing_split(stage, iv)
        if rel is not None and rel.strategy == "pad" and rel.parent is iv:
            r = Range.from_min_extent(r.min, padded_extent(rel, ranges))
        out.append(r)
    return out


def pad_value(value: PrimExpr, computed: Range, dom: Range | None, can_prove) -> PrimExpr:
    """The element whose value a padded axis computes at ``value``: ``value`` clamped into
    the range the stage computes, and into the axis's domain where that range may leave it
    (a stage computed at a loop of its consumer's guarded tail, whose rows run past ``n``),
    so that nothing outside an input is read."""
    lo, end = computed.min, computed.min + computed.extent
    if dom is not None:
        if not can_prove(dom.min <= lo):
            lo = emax(lo, dom.min)
        if not can_prove(end <= dom.min + dom.extent):
            end = emin(end, dom.min + dom.extent)
    clamped = emin(value, end - 1)
    return clamped if lo is computed.min else emax(clamped, lo)


def pad_axes(stage: Stage) -> list[IterVar]:
    return [rel.parent for rel in _splits(stage) if rel.strategy == "pad"]


__all__ = ["TAIL_STRATEGIES", "check_tail", "legal_tails",
           "check_pad_allocated",
           "governing_split", "loop_annotations", "dispatch_factor", "dispatch_paths",
           "guard_group", "shift_splits",
           "shifted_base", "padded_extent", "padded_ranges", "pad_value", "pad_axes"]
