"""Vectorize: a loop marked ``vectorized`` becomes vector code.

The loop variable is replaced by ``ramp(0, 1, n)``; loads at affine indices become vector
loads, scalars meeting vectors become ``xN(...)`` broadcasts, and stores write whole vectors.
Guarantee: the result computes the same values as the scalar loop. When the body holds
something this pass cannot express as vectors (an inner loop, a condition on the lane, a
math call, a non-constant extent, a lane count that is not a power of two — the C
vector extensions need one), the loop is kept as a scalar loop (as TVM does), which the
C compiler may still vectorize.
"""

from __future__ import annotations

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, rebuild
from kiln.ir.stmt import For, ForKind, SeqStmt, Store

_MAX_LANES = 64


class _CannotVectorize(Exception):
    pass


class _Vectorizer(Mutator):
    """Rewrite one loop body with ``var`` as a ramp of ``lanes`` lanes."""

    def __init__(self, var: E.Var, lanes: int):
        super().__init__()
        self.var = var
        self.lanes = lanes
        self.ramp = E.Ramp(E.IntImm(var.dtype, 0), E.IntImm(var.dtype, 1), lanes)

    # expressions ---------------------------------------------------------------------------
    def visit_Var(self, v):
        return self.ramp if v is self.var else v

    visit_SizeVar = visit_Var

    def _widen(self, e: E.PrimExpr) -> E.PrimExpr:
        return e if dt.lanes(e.dtype) > 1 else E.Broadcast(e, self.lanes)

    def _binary(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        if a is node.a and b is node.b:
            return node
        la, lb = dt.lanes(a.dtype), dt.lanes(b.dtype)
        if la == 1 and lb == 1:
            return rebuild(node, a=a, b=b)
        if isinstance(node, E.Add | E.Sub) and isinstance(a, E.Ramp) and lb == 1:
            return E.Ramp(type(node)(a.base, b), a.stride, a.lanes)
        if isinstance(node, E.Add) and isinstance(b, E.Ramp) and la == 1:
            return E.Ramp(E.Add(a, b.base), b.stride, b.lanes)
        if isinstance(node, E.Mul) and isinstance(a, E.Ramp) and lb == 1 and _is_int(b):
            return E.Ramp(E.Mul(a.base, b), E.Mul(a.stride, b), a.lanes)
        if isinstance(node, E.Mul) and isinstance(b, E.Ramp) and la == 1 and _is_int(a):
            return E.Ramp(E.Mul(b.base, a), E.Mul(b.stride, a), b.lanes)
        a, b = self._widen(a), self._widen(b)
        return type(node)(a, b, dt.with_lanes(node.dtype, self.lanes))

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_Min = visit_Max = _binary

    def _scalar_only(self, node):
        new = self.generic_visit(node)
        if _has_vector(new):
            raise _CannotVectorize(type(node).__name__)
        return new

    visit_Mod = visit_FloorDiv = visit_FloorMod = _scalar_only
    visit_EQ = visit_NE = visit_LT = visit_LE = visit_GT = visit_GE = _scalar_only
    visit_And = visit_Or = visit_Not = visit_Select = visit_Call = visit_Let = _scalar_only

    def visit_Cast(self, node):
        v = self.visit(node.value)
        if v is node.value:
            return node
        if dt.lanes(v.dtype) == 1:
            return E.Cast(node.dtype, v)
        return E.Cast(dt.with_lanes(node.dtype, self.lanes), v)

    def visit_Load(self, node):
        idx = self.visit(node.index)
        if idx is node.index:
            return node
        return E.Load(dt.with_lanes(node.dtype, self.lanes), node.buffer_var, idx)

    def visit_Ramp(self, node):
        raise _CannotVectorize("nested ramp")

    visit_Broadcast = visit_Ramp

    # statements ---------------------------------------------------------------------------
    def visit_Store(self, node):
        value, idx = self.visit(node.value), self.visit(node.index)
        if dt.lanes(idx.dtype) == 1:
            # every lane would write the same address: keep the scalar loop
            raise _CannotVectorize("store index does not depend on the vectorized loop")
        return Store(node.buffer_var, self._widen(value), idx)

    def visit_For(self, node):
        raise _CannotVectorize("inner loop")

    def visit_IfThenElse(self, node):
        raise _CannotVectorize("condition")

    def visit_Allocate(self, node):
        raise _CannotVectorize("allocation")

    visit_LetStmt = visit_AssertStmt = visit_Allocate


def _is_int(e) -> bool:
    return dt.is_integer(e.dtype) and dt.lanes(e.dtype) == 1


def _has_vector(e) -> bool:
    from kiln.ir.functor import post_order_visit

    found = []
    post_order_visit(e, lambda n: found.append(1) if isinstance(n, E.PrimExpr)
                     and dt.lanes(n.dtype) > 1 else None)
    return bool(found)


def _stores_in_order_safe(body) -> bool:
    """A sequence of stores is vectorizable lane-parallel only if no store feeds a later load
    of the same buffer at another lane; keep it simple: one store, or stores to distinct
    buffers that are not read afterwards in the body."""
    stores = body.seq if isinstance(body, SeqStmt) else [body]
    written = [s.buffer_var for s in stores if isinstance(s, Store)]
    return len(written) == len(set(written))


class _Pass(Mutator):
    def visit_For(self, node: For):
        body = self.visit(node.body)
        if node.kind != ForKind.VECTORIZED:
            return node if body is node.body else rebuild(node, body=body)
        ext = node.extent
        if (isinstance(ext, E.IntImm) and 1 < ext.value <= _MAX_LANES
                and ext.value & (ext.value - 1) == 0
                and isinstance(node.min, E.IntImm) and node.min.value == 0
                and _stores_in_order_safe(body)):
            try:
                return _Vectorizer(node.loop_var, ext.value).visit(body)
            except (_CannotVectorize, NotImplementedError):
                pass
        return rebuild(node, body=body)


def vectorize(stmt):
    """Replace each vectorized loop by vector code where possible (see module docstring)."""
    return _Pass().visit(stmt)
