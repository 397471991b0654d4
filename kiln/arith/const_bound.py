"""Constant integer bound of an expression under an Analyzer's bindings.

Where an integer dtype wraps around (``bound.wrap_modulus``: unsigned and narrow signed
types), a result whose interval leaves the dtype's range gets the whole range
(``a + b`` on uint8 is ``[0, 255]`` unless it provably does not overflow), and
``may_wrap`` tells whether an expression's value can differ from its value under
unbounded arithmetic, the meaning the linear forms and the rewrite rules give it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import dtype as dt
from ..ir import expr as E
from . import bound as B
from .bound import ConstIntBound

if TYPE_CHECKING:
    from .analyzer import Analyzer

_CMP = (E.CmpOp, E.Not)


class ConstBoundWalker:
    """Computes ``ConstIntBound``s bottom-up, memoized per Analyzer state."""

    def __init__(self, analyzer: Analyzer):
        self.an = analyzer
        self.cache: dict[int, tuple[E.PrimExpr, ConstIntBound]] = {}
        self._let: dict[E.Var, ConstIntBound] = {}
        self._wraps: dict[int, tuple[E.PrimExpr, bool]] = {}

    def clear(self) -> None:
        self.cache.clear()
        self._wraps.clear()

    def __call__(self, e: E.PrimExpr) -> ConstIntBound:
        hit = self.cache.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        r = self._compute(e)
        if len(self.cache) > 100_000:
            self.cache.clear()
        self.cache[id(e)] = (e, r)
        return r

    # ------------------------------------------------------------------------------------
    def var_bound(self, v: E.Var) -> ConstIntBound:
        b = self._let.get(v)
        if b is not None:
            return b
        b = self.an._bounds.get(v)
        if b is not None:
            return b
        d = dt.parse(v.dtype)
        if d.code == "bool":
            return ConstIntBound(0, 1)
        if d.code == "uint" or isinstance(v, E.SizeVar):
            return ConstIntBound(0, None)
        if d.code == "int" and self.an.nonneg_free_vars:
            return ConstIntBound(0, None)
        return B.EVERYTHING

    def may_wrap(self, e: E.PrimExpr) -> bool:
        """Whether some integer sub-expression of ``e`` (``e`` included) of a wrapping dtype
        can leave that dtype's range, i.e. wrap around."""
        hit = self._wraps.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        r = self._leaves_range(e) or any(self.may_wrap(c) for c in _children(e))
        self._wraps[id(e)] = (e, r)
        return r

    def _leaves_range(self, e: E.PrimExpr) -> bool:
        if isinstance(e, E.IntImm | E.Var) or not dt.is_integer(e.dtype) or \
                B.wrap_modulus(e.dtype) is None:
            return False
        raw = self._op_bound(e)
        return B.wrapped_bound(raw, e.dtype) != raw

    def _compute(self, e) -> ConstIntBound:
        if isinstance(e, E.IntImm):
            return ConstIntBound(e.value, e.value)
        if isinstance(e, E.Var):
            return self.var_bound(e)
        if not dt.is_integer(e.dtype):
            return B.EVERYTHING
        raw = self._op_bound(e)
        if B.wrap_modulus(e.dtype) is None:
            return raw
        return B.wrapped_bound(raw, e.dtype)

    def _op_bound(self, e) -> ConstIntBound:  # noqa: C901 - a flat type switch
        """The bound of integer operation ``e`` under unbounded arithmetic."""
        t = type(e)
        if t is E.Add:
            return B.add(self(e.a), self(e.b))
        if t is E.Sub:
            return B.sub(self(e.a), self(e.b))
        if t is E.Mul:
            return B.mul(self(e.a), self(e.b))
        if t is E.FloorDiv:
            return B.floordiv(self(e.a), self(e.b))
        if t is E.FloorMod:
            return B.floormod(self(e.a), self(e.b))
        if t is E.Div:
            return B.truncdiv(self(e.a), self(e.b))
        if t is E.Mod:
            return B.truncmod(self(e.a), self(e.b))
        if t is E.Min:
            return B.bmin(self(e.a), self(e.b))
        if t is E.Max:
            return B.bmax(self(e.a), self(e.b))
        if isinstance(e, _CMP):
            return ConstIntBound(0, 1)
        if t is E.Select:
            return B.union(self(e.true_value), self(e.false_value))
        if t is E.Cast:
            return self._cast(e)
        if t is E.Let:
            old = self._let.get(e.var)
            self._let[e.var] = self(e.value)
            try:
                return self._compute(e.body)
            finally:
                if old is None:
                    del self._let[e.var]
                else:
                    self._let[e.var] = old
        if t is E.Call:
            if e.op == "likely" and e.args:
                return self(e.args[0])
            if e.op in ("if_then_else", "tvm_if_then_else") and len(e.args) == 3:
                return B.union(self(e.args[1]), self(e.args[2]))
            return B.dtype_bound(e.dtype)
        if t is E.Broadcast:
            return self(e.value)
        if t is E.Ramp:
            last = B.add(self(e.base), B.scale(self(e.stride), e.lanes - 1))
            return B.union(self(e.base), last)
        return B.dtype_bound(e.dtype)

    def _cast(self, e: E.Cast) -> ConstIntBound:
        target = B.dtype_bound(e.dtype)
        if not dt.is_integer(e.value.dtype):
            return target
        src = self(e.value)
        if src[0] is not None and src[1] is not None and B.contains(target, src[0]) and \
                B.contains(target, src[1]):
            return src
        srange = B.dtype_bound(e.value.dtype)
        if B.contains(target, srange[0]) and B.contains(target, srange[1]):
            return B.intersect(src, srange)  # a widening cast keeps every value
        return target


def _children(e: E.PrimExpr):
    """The expression operands of ``e``."""
    for f in e._fields:
        v = getattr(e, f)
        if isinstance(v, E.PrimExpr):
            yield v
        elif isinstance(v, tuple):
            yield from (x for x in v if isinstance(x, E.PrimExpr))
