"""Modular sets: every value of ``e`` is ``coeff * k + base`` for some integer ``k``.

``coeff == 0`` means ``e`` is exactly ``base``; ``coeff == 1`` means nothing is known.
``base`` is normalized into ``[0, coeff)`` when ``coeff > 0``. In dtypes that wrap around
(``bound.wrap_modulus``) a set is only kept modulo ``2**bits``: ``coeff`` becomes
``gcd(coeff, 2**bits)`` (``x*3`` on uint8 is any value, ``x*4`` stays a multiple of 4).
"""

from __future__ import annotations

from math import gcd
from typing import TYPE_CHECKING, NamedTuple

from ..ir import dtype as dt
from ..ir import expr as E
from .bound import wrap_int, wrap_modulus

if TYPE_CHECKING:
    from .analyzer import Analyzer


class ModularSet(NamedTuple):
    coeff: int
    base: int


def make(coeff: int, base: int) -> ModularSet:
    coeff = abs(coeff)
    return ModularSet(coeff, base % coeff if coeff else base)


EVERYTHING = ModularSet(1, 0)


def _wrapped(m: ModularSet, dtype: str) -> ModularSet:
    """``m`` for a result of ``dtype`` taken modulo its ``2**bits`` where it wraps."""
    modulus = wrap_modulus(dtype)
    if modulus is None:
        return m
    if m.coeff == 0:
        return ModularSet(0, wrap_int(m.base, dtype))
    return make(gcd(m.coeff, modulus), m.base)


def _union(a: ModularSet, b: ModularSet) -> ModularSet:
    return make(gcd(gcd(a.coeff, b.coeff), a.base - b.base), a.base)


class ModularWalker:
    """Bottom-up modular set of integer expressions (memoized per Analyzer state)."""

    def __init__(self, analyzer: Analyzer):
        self.an = analyzer
        self.cache: dict[int, tuple[E.PrimExpr, ModularSet]] = {}

    def clear(self) -> None:
        self.cache.clear()

    def __call__(self, e: E.PrimExpr) -> ModularSet:
        hit = self.cache.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        r = self._compute(e)
        if r is not EVERYTHING and dt.is_integer(e.dtype):
            r = _wrapped(r, e.dtype)
        if len(self.cache) > 100_000:
            self.cache.clear()
        self.cache[id(e)] = (e, r)
        return r

    def _compute(self, e) -> ModularSet:
        if isinstance(e, E.IntImm):
            return ModularSet(0, e.value)
        if not dt.is_integer(e.dtype) or dt.lanes(e.dtype) != 1:
            return EVERYTHING
        if isinstance(e, E.Var):
            lo, hi = self.an.const_int_bound(e)
            return ModularSet(0, lo) if lo is not None and lo == hi else EVERYTHING
        t = type(e)
        if t is E.Add or t is E.Sub:
            a, b = self(e.a), self(e.b)
            base = a.base + b.base if t is E.Add else a.base - b.base
            return make(gcd(a.coeff, b.coeff), base)
        if t is E.Mul:
            a, b = self(e.a), self(e.b)
            return make(gcd(gcd(a.coeff * b.coeff, a.coeff * b.base), b.coeff * a.base),
                        a.base * b.base)
        if t in (E.FloorDiv, E.Div) and isinstance(e.b, E.IntImm) and e.b.value != 0:
            a, c = self(e.a), e.b.value
            if a.coeff % c == 0 and a.base % c == 0:
                return make(a.coeff // c, a.base // c)
            return EVERYTHING
        if t is E.FloorMod and isinstance(e.b, E.IntImm) and e.b.value > 0:
            a, c = self(e.a), e.b.value
            if a.coeff == 0:
                return ModularSet(0, a.base % c)
            return make(gcd(a.coeff, c), a.base)
        if t in (E.Min, E.Max):
            return _union(self(e.a), self(e.b))
        if t is E.Select:
            return _union(self(e.true_value), self(e.false_value))
        return EVERYTHING
