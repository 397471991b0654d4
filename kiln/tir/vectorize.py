"""Vectorize: a loop marked ``vectorized`` becomes vector code.

The loop variable is replaced by ``ramp(0, 1, n)``; loads at affine indices become vector
loads, scalars meeting vectors become ``xN(...)`` broadcasts, and stores write whole vectors.
Conditions: ``if_then_else(c, a, b)`` and ``select(c, a, b)`` whose condition ``c`` does not
depend on the vectorized loop (padding in the NCHWc layout, where the loop is the channel
block) become one test choosing between two vectors. A condition on the lane
(``ramp(...) >= 1``) is vectorized only with ``lane_masks=True``, which ``kiln.build`` uses
for the C backend (TVM scalarizes these, and so does ``kiln.lower``'s printout): the
condition becomes a vector of lane masks, ``select`` blends both vectors, and
``if_then_else`` evaluates a branch only in the lanes that take it (the C code tests whether
all lanes, or none, take it, and reads memory lane by lane otherwise), so nothing is read
that the scalar loop would not read. Lane conditions must compare vectors of one element
width, and their branches may not divide integers or call functions (these may trap in an
unused lane) nor hold another lane condition.

A vectorized loop of run-time extent ``r`` bounded by a constant (the remainder of a
``tail="predicate"`` split, which ``kiln.tir.loop_partition`` marks with
:data:`MASKED_LANES`, the vector width it had) is vectorized too with ``lane_masks``: as a
vector of ``W`` lanes (the bound, rounded up to a power of two) whose loads and stores carry
the predicate ``ramp(0, 1, W) < r`` (masked loads and stores in C), inside ``if (0 < r)``, so
that no lane at or past ``r`` reads or writes memory and nothing is read when the loop is
empty. Its vector loads and stores must be contiguous (a masked gather moves lane by lane,
slower than the scalar loop), and its stored values may not divide integers nor call
functions but ``reinterpret`` (unused lanes compute them: a lane's bits reinterpreted cannot
trap, and ``topi.fast_exp`` builds its power of two so), nor hold a lane condition.

Guarantee: the result computes the same values as the scalar loop. When the body holds
something this pass cannot express as vectors (an inner loop, a math call, a non-constant
extent, a lane count that is not a power of two — the C vector extensions need one), the
loop is kept as a scalar loop (as TVM does), which the C compiler may still vectorize.
"""

from __future__ import annotations

from kiln.arith import Analyzer
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, rebuild
from kiln.ir.stmt import For, ForKind, IfThenElse, SeqStmt, Store

_MAX_LANES = 64

#: the ``For`` annotation of a scalar remainder loop that was vectorized: its vector width
MASKED_LANES = "masked_lanes"


class _CannotVectorize(Exception):
    pass


class _Vectorizer(Mutator):
    """Rewrite one loop body with ``var`` as a ramp of ``lanes`` lanes."""

    def __init__(self, var: E.Var, lanes: int, lane_masks: bool = False,
                 active: E.PrimExpr | None = None):
        super().__init__()
        self.var = var
        self.lanes = lanes
        self.lane_masks = lane_masks
        self.in_condition = False
        self.ramp = E.Ramp(E.IntImm(var.dtype, 0), E.IntImm(var.dtype, 1), lanes)
        # the predicate of every vector load and store: the lanes below ``active``
        self.predicate = None if active is None else E.LT(self.ramp, E.Broadcast(active, lanes))

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
    visit_Let = _scalar_only

    # conditions ---------------------------------------------------------------------------
    def _compare(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        if dt.lanes(a.dtype) == 1 and dt.lanes(b.dtype) == 1:
            return node if a is node.a and b is node.b else rebuild(node, a=a, b=b)
        if not self.in_condition:
            raise _CannotVectorize("vector comparison or logic outside a condition")
        return type(node)(self._widen(a), self._widen(b))

    visit_EQ = visit_NE = visit_LT = visit_LE = visit_GT = visit_GE = _compare

    visit_And = visit_Or = _compare

    def visit_Not(self, node):
        a = self.visit(node.a)
        if dt.lanes(a.dtype) > 1 and not self.in_condition:
            raise _CannotVectorize("vector logic outside a condition")
        return node if a is node.a else E.Not(a)

    def _condition(self, c: E.PrimExpr) -> E.PrimExpr:
        """The condition vectorized: scalar when uniform across the lanes, else a checked
        vector of lane masks (only with ``lane_masks``)."""
        saved, self.in_condition = self.in_condition, self.lane_masks
        try:
            new = self.visit(c)
        finally:
            self.in_condition = saved
        if dt.lanes(new.dtype) > 1:
            _check_lane_condition(new)
        return new

    def _branches(self, node, a, b):
        ta, tb = self.visit(a), self.visit(b)
        if dt.lanes(ta.dtype) == 1 and dt.lanes(tb.dtype) == 1:
            return None
        return self._widen(ta), self._widen(tb)

    def visit_Select(self, node):
        c = self._condition(node.condition)
        br = self._branches(node, node.true_value, node.false_value)
        if br is None and dt.lanes(c.dtype) == 1:
            return rebuild(node, condition=c) if c is not node.condition else node
        a, b = br if br is not None else (self._widen(node.true_value),
                                          self._widen(node.false_value))
        return E.Select(c, a, b)

    def _if_then_else(self, node):
        c = self._condition(node.args[0])
        br = self._branches(node, node.args[1], node.args[2])
        if br is None and dt.lanes(c.dtype) == 1:
            return node if c is node.args[0] else rebuild(node, args=(c,) + node.args[1:])
        a, b = br if br is not None else (self._widen(node.args[1]),
                                          self._widen(node.args[2]))
        if dt.lanes(c.dtype) > 1:
            _check_masked_branch(a)
            _check_masked_branch(b)
        return E.Call(dt.with_lanes(node.dtype, self.lanes), "tvm_if_then_else", [c, a, b])

    def visit_Call(self, node):
        if node.op == "tvm_if_then_else" and len(node.args) == 3:
            return self._if_then_else(node)
        if node.op == "reinterpret":  # lane-wise: each lane's bits
            v = self.visit(node.args[0])
            if v is node.args[0]:
                return node
            return E.Call(dt.with_lanes(node.dtype, dt.lanes(v.dtype)), node.op, [v])
        return self._scalar_only(node)

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
        self._check_masked_index(idx)
        return E.Load(dt.with_lanes(node.dtype, self.lanes), node.buffer_var, idx,
                      self.predicate)

    def _check_masked_index(self, idx: E.PrimExpr) -> None:
        """Under a predicate, only contiguous vectors: a masked gather or scatter moves lane
        by lane, slower than the scalar loop it replaces."""
        if self.predicate is not None and not (isinstance(idx, E.Ramp) and isinstance(
                idx.stride, E.IntImm) and idx.stride.value == 1):
            raise _CannotVectorize("masked access that is not contiguous")

    def visit_Ramp(self, node):
        raise _CannotVectorize("nested ramp")

    visit_Broadcast = visit_Ramp

    # statements ---------------------------------------------------------------------------
    def visit_Store(self, node):
        if self.predicate is not None:  # the lanes past the extent compute the value too
            _check_masked_branch(node.value)
        value, idx = self.visit(node.value), self.visit(node.index)
        if dt.lanes(idx.dtype) == 1:
            # every lane would write the same address: keep the scalar loop
            raise _CannotVectorize("store index does not depend on the vectorized loop")
        self._check_masked_index(idx)
        return Store(node.buffer_var, self._widen(value), idx, self.predicate)

    def visit_For(self, node):
        raise _CannotVectorize("inner loop")

    def visit_IfThenElse(self, node):
        raise _CannotVectorize("condition")

    def visit_Allocate(self, node):
        raise _CannotVectorize("allocation")

    visit_LetStmt = visit_AssertStmt = visit_Allocate


def _check_lane_condition(c: E.PrimExpr) -> None:
    """A vector condition the C backend can turn into lane masks: comparisons of vectors of
    one element width, combined by and/or/not, with uniform (broadcast) parts."""
    widths: set[int] = set()

    def walk(e):
        if dt.lanes(e.dtype) == 1:
            return
        if isinstance(e, E.And | E.Or):
            walk(e.a)
            walk(e.b)
        elif isinstance(e, E.Not):
            walk(e.a)
        elif isinstance(e, E.Broadcast) and dt.is_bool(e.value.dtype):
            pass
        elif isinstance(e, E.CmpOp) and not dt.is_bool(e.a.dtype):
            widths.add(dt.bits(e.a.dtype))
        else:
            raise _CannotVectorize(f"lane condition {type(e).__name__}")

    walk(c)
    if len(widths) != 1:
        raise _CannotVectorize("lane condition compares vectors of different widths")


def _check_masked_branch(e: E.PrimExpr) -> None:
    """A branch evaluated in lanes that do not take it may not trap or hold another lane
    condition: no integer division, no call but ``reinterpret`` (each lane's bits: the
    exponent of ``topi.fast_exp``), no vector condition."""
    from kiln.ir.functor import post_order_visit

    bad = []

    def visit(n):
        if isinstance(n, E.Div | E.Mod | E.FloorDiv | E.FloorMod) and dt.is_integer(n.dtype):
            bad.append(n)
        elif (isinstance(n, E.Call) and n.op != "reinterpret") or isinstance(n, E.Let) or (
                isinstance(n, E.Select | E.CmpOp) and dt.lanes(n.dtype) > 1):
            bad.append(n)

    post_order_visit(e, visit)
    if bad:
        raise _CannotVectorize(f"{type(bad[0]).__name__} in a branch under a lane condition")


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


def _masked_lanes(node: For) -> int | None:
    """The vector width of a loop of run-time extent to vectorize with lane masks: a
    vectorized one's bounded extent, or a remainder loop's :data:`MASKED_LANES`, rounded up
    to a power of two; None for any other loop or a bound past ``_MAX_LANES``."""
    if isinstance(node.extent, E.IntImm) or not (isinstance(node.min, E.IntImm)
                                                 and node.min.value == 0):
        return None
    marked = dict(node.annotations).get(MASKED_LANES)
    if marked is None and node.kind != ForKind.VECTORIZED:
        return None
    hi = marked if marked is not None else Analyzer().const_int_bound(node.extent)[1]
    if hi is None or not 1 < hi <= _MAX_LANES:
        return None
    return 1 << (hi - 1).bit_length()


class _Pass(Mutator):
    def __init__(self, lane_masks: bool):
        super().__init__()
        self.lane_masks = lane_masks

    def visit_For(self, node: For):
        body = self.visit(node.body)
        lanes = _masked_lanes(node) if self.lane_masks else None
        if lanes is not None and _stores_in_order_safe(body):
            try:
                vector = _Vectorizer(node.loop_var, lanes, True, node.extent).visit(body)
                return IfThenElse(E.LT(E.IntImm(node.extent.dtype, 0), node.extent), vector)
            except (_CannotVectorize, NotImplementedError):
                pass
        if node.kind != ForKind.VECTORIZED:
            return node if body is node.body else rebuild(node, body=body)
        ext = node.extent
        if (isinstance(ext, E.IntImm) and 1 < ext.value <= _MAX_LANES
                and ext.value & (ext.value - 1) == 0
                and isinstance(node.min, E.IntImm) and node.min.value == 0
                and _stores_in_order_safe(body)):
            try:
                return _Vectorizer(node.loop_var, ext.value, self.lane_masks).visit(body)
            except (_CannotVectorize, NotImplementedError):
                pass
        return rebuild(node, body=body)


def vectorize(stmt, lane_masks: bool = False):
    """Replace each vectorized loop by vector code where possible (see module docstring);
    ``lane_masks`` also vectorizes conditions that differ between lanes."""
    return _Pass(lane_masks).visit(stmt)


def vectorize_lane_masks(stmt):
    """``vectorize`` with lane masks: the C backend's second try at the loops still marked
    vectorized after ``kiln.lower``."""
    return vectorize(stmt, lane_masks=True)
