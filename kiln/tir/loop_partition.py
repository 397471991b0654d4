"""Loop partitioning: split a loop at the point where a ``likely`` guard stops being needed.

A split whose factor does not divide the extent leaves ``if (likely(o*8 + i < 103))`` in the
loop body. For a loop ``o`` this pass finds the largest prefix ``[0, p)`` on which the guard
holds for every value of the loops inside it, and emits two loops: the prefix with the guard
removed (the fast full tiles) and the rest with the guard kept (the tail)::

    for (o, 0, 13) { for (i, 0, 8) { if (likely(o*8 + i < 103)) S } }
 => for (o, 0, 12) { for (i, 0, 8) { S } }
    for (o, 12, 1) { for (i, 0, 8) { if (likely(o*8 + i < 103)) S } }

Loops are tried outermost first, so inner vectorized loops keep their constant extents. The
split point may be symbolic (dynamic shapes, seed 004); it is clamped to the loop's range.
Guarantee: every iteration runs exactly once and sees the same guard outcome as before.
"""

from __future__ import annotations

from kiln.arith import Analyzer, IntervalSet, eval_interval
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, collect_vars, rebuild, substitute
from kiln.ir.op import emax, emin, floordiv
from kiln.ir.stmt import For, IfThenElse, seq


def _conjuncts(c: E.PrimExpr) -> list[E.PrimExpr]:
    if isinstance(c, E.And):
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _guards(stmt, inner: dict, out: list) -> None:
    """Collect (IfThenElse, inner-loop ranges) for every likely-guard under ``stmt``."""
    if isinstance(stmt, For):
        inner = dict(inner)
        inner[stmt.loop_var] = IntervalSet(stmt.min, stmt.min + stmt.extent - 1)
        _guards(stmt.body, inner, out)
    elif isinstance(stmt, IfThenElse):
        c = stmt.condition
        if isinstance(c, E.Call) and c.op == "likely":
            out.append((stmt, inner))
        _guards(stmt.then_case, inner, out)
        if stmt.else_case is not None:
            _guards(stmt.else_case, inner, out)
    else:
        for f in getattr(stmt, "_fields", ()):
            v = getattr(stmt, f)
            if isinstance(v, tuple):
                for x in v:
                    if isinstance(x, E.Node) and not isinstance(x, E.PrimExpr):
                        _guards(x, inner, out)
            elif isinstance(v, E.Node) and not isinstance(v, E.PrimExpr):
                _guards(v, inner, out)


def _split_point(cond: E.PrimExpr, v: E.Var, inner: dict, an: Analyzer):
    """The first value of ``v`` from which ``cond`` may fail, or None if not linear in v."""
    points = []
    for c in _conjuncts(cond):
        if isinstance(c, E.LT):
            diff = c.a - c.b  # need diff <= -1
        elif isinstance(c, E.LE):
            diff = c.a - c.b - 1
        elif isinstance(c, E.GT):
            diff = c.b - c.a
        elif isinstance(c, E.GE):
            diff = c.b - c.a - 1
        else:
            return None
        hi = eval_interval(an.simplify(diff), inner).max_value
        if not isinstance(hi, E.PrimExpr) or v not in collect_vars(hi):
            if isinstance(hi, E.PrimExpr) and an.can_prove(hi < 0):
                continue
            return None
        a = an.simplify(substitute(hi, {v: v + 1}) - hi)
        if not (isinstance(a, E.IntImm) and a.value > 0):
            return None
        b = an.simplify(substitute(hi, {v: E.IntImm(v.dtype, 0)}))
        points.append(an.simplify(floordiv(a - 1 - b, a)))
    if not points:
        return None
    p = points[0]
    for q in points[1:]:
        p = emin(p, q)
    return p


class _DropGuard(Mutator):
    def __init__(self, target: IfThenElse):
        super().__init__()
        self.target = target

    def visit_IfThenElse(self, node):
        if node is self.target:
            return self.visit(node.then_case)
        return self.generic_visit(node)


class _Partition(Mutator):
    def __init__(self):
        super().__init__()
        self.an = Analyzer()

    def visit_For(self, node: For):
        if not (isinstance(node.min, E.IntImm) and node.min.value == 0):
            return self.generic_visit(node)
        found: list = []
        _guards(node.body, {}, found)
        for guard, inner in found:
            if node.loop_var not in collect_vars(guard.condition):
                continue
            cond = guard.condition.args[0]
            p = _split_point(cond, node.loop_var, inner, self.an)
            if p is None:
                continue
            p = self.an.simplify(emax(emin(p, node.extent), E.IntImm(p.dtype, 0)))
            if isinstance(p, E.IntImm) and (p.value == 0 or self.an.can_prove(
                    node.extent <= p)):
                continue
            fast = rebuild(node, extent=p, body=_DropGuard(guard).visit(node.body))
            tail = rebuild(node, min=p, extent=self.an.simplify(node.extent - p))
            return seq(self.visit(fast), self.visit(tail))
        return self.generic_visit(node)


def loop_partition(stmt):
    """Split guarded loops into a guard-free part and a guarded tail (see module docstring)."""
    return _Partition().visit(stmt)
