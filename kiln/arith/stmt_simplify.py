"""The statement simplifier: ``simplify_stmt`` (wired as the ``Simplify`` pass).

Walks a statement with an Analyzer, so every expression is simplified knowing the loops,
thread extents, lets and branch conditions around it:

* ``For``: the loop variable is bound to ``[min, min + extent - 1]`` in the body; a loop
  with a constant extent <= 0 is removed; a *serial* loop of extent 1 is replaced by its
  body with the loop variable substituted by ``min``; a loop whose body vanished goes too.
* ``IfThenElse``: a provable condition keeps only the taken branch; otherwise the
  condition is assumed in the then-branch and its negation in the else-branch.
* ``LetStmt``: constant or variable values are substituted; other values are bound.
* ``AssertStmt``: dropped when provably true.
* Stores, loads, allocations, realizes, evaluates: their expressions are simplified.
"""

from __future__ import annotations

from ..ir import expr as E
from ..ir import stmt as S
from ..ir.functor import Mutator, collect_vars, substitute
from ..ir.op import logical_not, make_const
from .analyzer import Analyzer

_THREAD_ATTRS = ("thread_extent", "virtual_thread")


def simplify_stmt(stmt, analyzer: Analyzer | None = None):
    """Simplify a statement or a PrimFunc (returns the same kind of object)."""
    return StmtSimplifier(analyzer or Analyzer()).visit(stmt)


def _has_call(e) -> bool:
    found = []

    def f(n):
        if isinstance(n, E.Call):
            found.append(n)

    from ..ir.functor import post_order_visit

    post_order_visit(e, f)
    return bool(found)


def _no_op(s) -> bool:
    return s is None or S.is_no_op(s)


class StmtSimplifier(Mutator):
    """Statement mutator whose expressions go through ``analyzer.simplify``."""

    def __init__(self, analyzer: Analyzer):
        super().__init__()
        self.an = analyzer

    def visit(self, node):
        if isinstance(node, E.PrimExpr):
            return self.an.simplify(node)
        return super().visit(node)

    # ---- functions and loops -------------------------------------------------------------
    def visit_PrimFunc(self, f: S.PrimFunc):
        body = self.visit(f.body)
        return f if body is f.body else f.with_body(body)

    def visit_For(self, s: S.For):
        lo, ext = self.visit(s.min), self.visit(s.extent)
        if isinstance(ext, E.IntImm) and ext.value <= 0:
            return S.Evaluate(0)
        if isinstance(ext, E.IntImm) and ext.value == 1 and s.kind == S.ForKind.SERIAL:
            return self.visit(substitute(s.body, {s.loop_var: lo}))
        with self.an.scope():
            self.an.bind(s.loop_var, E.Range.from_min_extent(lo, ext))
            body = self.visit(s.body)
        if _no_op(body):
            return S.Evaluate(0)
        if lo is s.min and ext is s.extent and body is s.body:
            return s
        return S.For(s.loop_var, lo, ext, s.kind, body, s.thread_tag, s.annotations)

    def visit_AttrStmt(self, s: S.AttrStmt):
        value = self.visit(s.value)
        node = s.node
        with self.an.scope():
            if s.attr_key in _THREAD_ATTRS and isinstance(node, E.IterVar):
                self.an.bind(node.var, E.Range.from_min_extent(make_const(0, value.dtype),
                                                               value))
            body = self.visit(s.body)
        if value is s.value and body is s.body:
            return s
        return S.AttrStmt(node, s.attr_key, value, body)

    # ---- bindings ----------------------------------------------------------------------------
    def visit_LetStmt(self, s: S.LetStmt):
        value = self.visit(s.value)
        if isinstance(value, E.IntImm | E.FloatImm | E.Var):
            return self.visit(substitute(s.body, {s.var: value}))
        with self.an.scope():
            self.an.bind(s.var, value)
            body = self.visit(s.body)
        if s.var not in collect_vars(body) and not _has_call(value):
            return body
        if value is s.value and body is s.body:
            return s
        return S.LetStmt(s.var, value, body)

    # ---- control flow ------------------------------------------------------------------------
    def visit_IfThenElse(self, s: S.IfThenElse):
        cond = self.visit(s.condition)
        if isinstance(cond, E.IntImm):
            if cond.value:
                return self.visit(s.then_case)
            return self.visit(s.else_case) if s.else_case is not None else S.Evaluate(0)
        with self.an.constraint(cond):
            then_case = self.visit(s.then_case)
        else_case = None
        if s.else_case is not None:
            with self.an.constraint(logical_not(cond)):
                else_case = self.visit(s.else_case)
        if _no_op(else_case):
            else_case = None
        if _no_op(then_case):
            if else_case is None:
                return S.Evaluate(0)
            return S.IfThenElse(self.an.simplify(logical_not(cond)), else_case)
        if cond is s.condition and then_case is s.then_case and else_case is s.else_case:
            return s
        return S.IfThenElse(cond, then_case, else_case)

    def visit_AssertStmt(self, s: S.AssertStmt):
        cond = self.visit(s.condition)
        body = self.visit(s.body)
        if isinstance(cond, E.IntImm) and cond.value:
            return body
        if cond is s.condition and body is s.body:
            return s
        return S.AssertStmt(cond, s.message, body)

    def visit_SeqStmt(self, s: S.SeqStmt):
        new = [self.visit(x) for x in s.seq]
        if all(a is b for a, b in zip(new, s.seq, strict=True)):
            return s
        return S.seq(*new)

    # ---- memory ----------------------------------------------------------------------------
    def visit_ProducerStore(self, s: S.ProducerStore):
        value = self.visit(s.value)
        indices = self.visit(s.indices)
        if value is s.value and indices is s.indices:
            return s
        return S.ProducerStore(s.producer, value, indices)

    def visit_ProducerRealize(self, s: S.ProducerRealize):
        bounds = tuple(self._range(r) for r in s.bounds)
        if all(a is b for a, b in zip(bounds, s.bounds, strict=True)):
            bounds = s.bounds
        cond = self.visit(s.condition) if isinstance(s.condition, E.PrimExpr) else s.condition
        body = self.visit(s.body)
        if bounds is s.bounds and cond is s.condition and body is s.body:
            return s
        return S.ProducerRealize(s.producer, bounds, cond, body, s.scope)

    def _range(self, r: E.Range) -> E.Range:
        lo, ext = self.visit(r.min), self.visit(r.extent)
        if lo is r.min and ext is r.extent:
            return r
        return E.Range.from_min_extent(lo, ext)

    def visit_Store(self, s: S.Store):
        value = self.visit(s.value)
        index = self.visit(s.index)
        pred = self.visit(s.predicate) if s.predicate is not None else None
        if value is s.value and index is s.index and pred is s.predicate:
            return s
        return S.Store(s.buffer_var, value, index, pred)

    def visit_Allocate(self, s: S.Allocate):
        extents = self.visit(s.extents)
        cond = self.visit(s.condition) if isinstance(s.condition, E.PrimExpr) else s.condition
        body = self.visit(s.body)
        if extents is s.extents and cond is s.condition and body is s.body:
            return s
        return S.Allocate(s.buffer_var, s.dtype, extents, cond, body, s.scope)

    def visit_Evaluate(self, s: S.Evaluate):
        v = self.visit(s.value)
        return s if v is s.value else S.Evaluate(v)
