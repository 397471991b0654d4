"""Constant integer bounds: closed intervals ``(lo, hi)`` of Python ints, ``None`` = infinite.

These helpers are pure arithmetic on bounds; ``ConstIntBoundAnalyzer`` walks an expression
and combines them. A bound is always *sound*: every value the expression can take (under
the analyzer's bindings and assumptions) lies inside it.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.dtype import wrap_int, wrap_modulus  # noqa: F401 (the arith modules take them from here)

_INF = float("inf")


class ConstIntBound(NamedTuple):
    """``min_value <= e <= max_value``; ``None`` stands for -inf / +inf."""

    min_value: int | None
    max_value: int | None


Bound = tuple  # (lo, hi) with None for infinity

EVERYTHING: Bound = ConstIntBound(None, None)


# ---- conversions between None-based bounds and extended numbers ------------------------
def _lo(x):
    return -_INF if x is None else x


def _hi(x):
    return _INF if x is None else x


def _back(x):
    return None if x in (_INF, -_INF) else int(x)


def make(lo, hi) -> ConstIntBound:
    return ConstIntBound(_back(lo), _back(hi))


# ---- arithmetic ----------------------------------------------------------------------
def add(a: Bound, b: Bound) -> ConstIntBound:
    return make(_lo(a[0]) + _lo(b[0]), _hi(a[1]) + _hi(b[1]))


def neg(a: Bound) -> ConstIntBound:
    return make(-_hi(a[1]), -_lo(a[0]))


def sub(a: Bound, b: Bound) -> ConstIntBound:
    return add(a, neg(b))


def _xmul(x, y):
    if x == 0 or y == 0:
        return 0
    return x * y


def mul(a: Bound, b: Bound) -> ConstIntBound:
    xs = (_lo(a[0]), _hi(a[1]))
    ys = (_lo(b[0]), _hi(b[1]))
    corners = [_xmul(x, y) for x in xs for y in ys]
    return make(min(corners), max(corners))


def scale(a: Bound, k: int) -> ConstIntBound:
    return mul(a, (k, k))


def _positive_divisor(b: Bound):
    """The divisor interval with zero removed, as (sign, lo, hi) of its magnitude, or None
    when it spans both signs."""
    lo, hi = _lo(b[0]), _hi(b[1])
    if lo >= 0:
        return 1, max(lo, 1), hi
    if hi <= 0:
        return -1, max(-hi, 1), -lo
    return None


def _xfloordiv(x, y):
    """floor(x / y) for y > 0 on extended numbers."""
    if x in (_INF, -_INF):
        return x
    if y == _INF:
        return 0 if x >= 0 else -1
    return x // y


def _xtruncdiv(x, y):
    if x in (_INF, -_INF):
        return x
    if y == _INF:
        return 0
    q = abs(x) // y
    return q if x >= 0 else -q


def _div_corners(fn, a: Bound, b: Bound) -> ConstIntBound:
    d = _positive_divisor(b)
    if d is None:
        return EVERYTHING
    sign, blo, bhi = d
    lo, hi = _lo(a[0]), _hi(a[1])
    if sign < 0:  # x / -y == (-x) / y for both floor and trunc division
        lo, hi = -hi, -lo
    corners = [fn(x, y) for x in (lo, hi) for y in (blo, bhi)]
    return make(min(corners), max(corners))


def floordiv(a: Bound, b: Bound) -> ConstIntBound:
    return _div_corners(_xfloordiv, a, b)


def truncdiv(a: Bound, b: Bound) -> ConstIntBound:
    return _div_corners(_xtruncdiv, a, b)


def floormod(a: Bound, b: Bound) -> ConstIntBound:
    d = _positive_divisor(b)
    if d is None:
        return EVERYTHING
    sign, _, bhi = d
    if sign > 0:
        if b[0] == b[1] and a[0] is not None and a[1] is not None:
            c = b[0]
            if a[0] // c == a[1] // c:
                return make(a[0] % c, a[1] % c)
        top = bhi - 1
        if a[0] is not None and a[0] >= 0:
            top = min(top, _hi(a[1]))
        return make(0, top)
    return make(-(bhi - 1), 0)


def truncmod(a: Bound, b: Bound) -> ConstIntBound:
    d = _positive_divisor(b)
    if d is None:
        return EVERYTHING
    m = d[2] - 1  # |result| <= |divisor| - 1
    lo, hi = _lo(a[0]), _hi(a[1])
    if lo >= 0:
        return make(0, min(hi, m))
    if hi <= 0:
        return make(max(lo, -m), 0)
    return make(max(lo, -m), min(hi, m))


def bmin(a: Bound, b: Bound) -> ConstIntBound:
    return make(min(_lo(a[0]), _lo(b[0])), min(_hi(a[1]), _hi(b[1])))


def bmax(a: Bound, b: Bound) -> ConstIntBound:
    return make(max(_lo(a[0]), _lo(b[0])), max(_hi(a[1]), _hi(b[1])))


def union(a: Bound, b: Bound) -> ConstIntBound:
    return make(min(_lo(a[0]), _lo(b[0])), max(_hi(a[1]), _hi(b[1])))


def intersect(a: Bound, b: Bound) -> ConstIntBound:
    return make(max(_lo(a[0]), _lo(b[0])), min(_hi(a[1]), _hi(b[1])))


def contains(a: Bound, v: int) -> bool:
    return _lo(a[0]) <= v <= _hi(a[1])


# ---- dtypes ----------------------------------------------------------------------------
def dtype_bound(dtype: str) -> ConstIntBound:
    """The values an integer dtype can hold (everything for floats and handles)."""
    d = dt.parse(dtype)
    if d.code == "bool":
        return ConstIntBound(0, 1)
    if d.code == "int":
        return ConstIntBound(-(2 ** (d.bits - 1)), 2 ** (d.bits - 1) - 1)
    if d.code == "uint":
        return ConstIntBound(0, 2**d.bits - 1)
    return EVERYTHING


def wrapped_bound(raw: Bound, dtype: str) -> ConstIntBound:
    """The bound of a result of ``dtype`` whose unwrapped value lies in ``raw``: ``raw``
    itself where the dtype cannot wrap or ``raw`` fits its range, else the whole range."""
    if wrap_modulus(dtype) is None:
        return ConstIntBound(*raw)
    full = dtype_bound(dtype)
    if raw[0] is not None and raw[1] is not None and contains(full, raw[0]) and \
            contains(full, raw[1]):
        return ConstIntBound(*raw)
    return full


def is_int_scalar(dtype: str) -> bool:
    """int/uint scalars: the dtypes the linear canonical form works on."""
    d = dt.parse(dtype)
    return d.code in ("int", "uint") and d.lanes == 1


def const_value(e) -> int | None:
    """The value of an integer constant expression (IntImm), else None."""
    if isinstance(e, E.IntImm):
        return e.value
    return None
