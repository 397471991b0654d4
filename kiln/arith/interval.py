"""Symbolic closed intervals ``[min, max]`` of integer expressions.

An end is a PrimExpr or one of the sentinels ``neg_inf`` / ``pos_inf``. The interval
evaluation of expressions lives in ``interval_eval.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import expr as E
from ..ir.op import add, convert, emax, emin, make_const, sub
from ..ir.printer import expr_text

if TYPE_CHECKING:
    from .analyzer import Analyzer


class _Infinity:
    """The ends of unbounded intervals: ``pos_inf`` and ``neg_inf``."""

    __slots__ = ("sign",)

    def __init__(self, sign: int):
        self.sign = sign

    def __repr__(self) -> str:
        return "pos_inf" if self.sign > 0 else "neg_inf"

    def __neg__(self) -> _Infinity:
        return neg_inf if self.sign > 0 else pos_inf


pos_inf = _Infinity(1)
neg_inf = _Infinity(-1)

End = E.PrimExpr | _Infinity


def _end(x, default: _Infinity) -> End:
    if x is None or isinstance(x, _Infinity):
        return default if x is None else x
    return convert(x)


class IntervalSet:
    """The closed interval ``[min_value, max_value]``; an end may be ``neg_inf``/``pos_inf``
    (``None`` is accepted for either)."""

    __slots__ = ("min_value", "max_value")

    def __init__(self, min_value, max_value):
        object.__setattr__(self, "min_value", _end(min_value, neg_inf))
        object.__setattr__(self, "max_value", _end(max_value, pos_inf))

    def __setattr__(self, key, value):
        raise AttributeError("IntervalSet is immutable")

    @property
    def min(self) -> End:
        return self.min_value

    @property
    def max(self) -> End:
        return self.max_value

    # ---- constructors -----------------------------------------------------------------
    @staticmethod
    def single_point(e) -> IntervalSet:
        e = convert(e)
        return IntervalSet(e, e)

    @staticmethod
    def everything() -> IntervalSet:
        return IntervalSet(neg_inf, pos_inf)

    @staticmethod
    def interval(lo, hi) -> IntervalSet:
        return IntervalSet(lo, hi)

    @staticmethod
    def from_range(r: E.Range, analyzer: Analyzer | None = None) -> IntervalSet:
        """``[min, min + extent - 1]`` of a Range."""
        return from_range(r, analyzer)

    # ---- queries ----------------------------------------------------------------------
    def is_single_point(self) -> bool:
        a, b = self.min_value, self.max_value
        if a is b:
            return not isinstance(a, _Infinity)
        if isinstance(a, _Infinity) or isinstance(b, _Infinity):
            return False
        from ..ir.structural import structural_equal

        return structural_equal(a, b)

    def is_everything(self) -> bool:
        return self.min_value is neg_inf and self.max_value is pos_inf

    def has_lower_bound(self) -> bool:
        return self.min_value is not neg_inf

    def has_upper_bound(self) -> bool:
        return self.max_value is not pos_inf

    def is_finite(self) -> bool:
        return self.has_lower_bound() and self.has_upper_bound()

    def to_range(self, analyzer: Analyzer | None = None) -> E.Range:
        """``Range(min, extent = max - min + 1)`` with the extent simplified."""
        if not self.is_finite():
            raise ValueError(f"cannot make a Range of the unbounded interval {self}")
        an = _analyzer(analyzer)
        ext = an.simplify(add(sub(self.max_value, self.min_value), 1))
        return E.Range.from_min_extent(self.min_value, ext)

    def union(self, other: IntervalSet, analyzer: Analyzer | None = None) -> IntervalSet:
        return union(self, other, analyzer)

    def intersect(self, other: IntervalSet, analyzer: Analyzer | None = None) -> IntervalSet:
        return intersect(self, other, analyzer)

    def __repr__(self) -> str:
        def t(x):
            return repr(x) if isinstance(x, _Infinity) else expr_text(x)

        return f"[{t(self.min_value)}, {t(self.max_value)}]"


def _analyzer(analyzer):
    if analyzer is not None:
        return analyzer
    from .analyzer import Analyzer

    return Analyzer()


def from_range(r: E.Range, analyzer: Analyzer | None = None) -> IntervalSet:
    """The interval ``[r.min, r.min + r.extent - 1]`` (simplified)."""
    an = _analyzer(analyzer)
    return IntervalSet(r.min, an.simplify(sub(add(r.min, r.extent), 1)))


def union(a: IntervalSet, b: IntervalSet, analyzer: Analyzer | None = None) -> IntervalSet:
    """The smallest interval holding both (ends simplified)."""
    an = _analyzer(analyzer)
    return simplify_set(raw_union(a, b), an)


def intersect(a: IntervalSet, b: IntervalSet, analyzer: Analyzer | None = None) -> IntervalSet:
    """``[max(a.min, b.min), min(a.max, b.max)]`` (ends simplified; may be empty)."""
    an = _analyzer(analyzer)
    return simplify_set(IntervalSet(max_end(a.min_value, b.min_value),
                                    min_end(a.max_value, b.max_value)), an)


def simplify_set(s: IntervalSet, an: Analyzer) -> IntervalSet:
    lo, hi = s.min_value, s.max_value
    lo = lo if isinstance(lo, _Infinity) else an.simplify(lo)
    if hi is s.min_value:
        return IntervalSet(lo, lo)
    hi = hi if isinstance(hi, _Infinity) else an.simplify(hi)
    return IntervalSet(lo, hi)


# ---- arithmetic on ends (trivially folded, unsimplified) ------------------------------------
def add_end(x: End, y: End) -> End:
    if isinstance(x, _Infinity):
        return x
    if isinstance(y, _Infinity):
        return y
    if isinstance(x, E.IntImm) and isinstance(y, E.IntImm):  # an exact end, not wrapped
        return E.IntImm(x.dtype, x.value + y.value)
    return add(x, y)


def neg_end(x: End) -> End:
    if isinstance(x, _Infinity):
        return -x
    if isinstance(x, E.IntImm):  # an exact end, not wrapped
        return E.IntImm(x.dtype, -x.value)
    return sub(make_const(0, x.dtype), x)


def min_end(x: End, y: End) -> End:
    if x is neg_inf or y is neg_inf:
        return neg_inf
    if x is pos_inf:
        return y
    if y is pos_inf:
        return x
    return emin(x, y)


def max_end(x: End, y: End) -> End:
    if x is pos_inf or y is pos_inf:
        return pos_inf
    if x is neg_inf:
        return y
    if y is neg_inf:
        return x
    return emax(x, y)


def raw_union(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    return IntervalSet(min_end(a.min_value, b.min_value), max_end(a.max_value, b.max_value))
