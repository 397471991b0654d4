"""Constant integer bound of an expression under an Analyzer's bindings."""

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

    def clear(self) -> None:
        self.cache.clear()

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

    def _compute(self, e) -> ConstIntBound:  # noqa: C901 - a flat type switch
        if isinstance(e, E.IntImm):
            return ConstIntBound(e.value, e.value)
        if isinstance(e, E.Var):
            return self.var_bound(e)
        if not dt.is_integer(e.dtype):
            return B.EVERYTHING
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
