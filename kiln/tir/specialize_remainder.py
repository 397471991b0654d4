"""Specialize remainder: the tail block of a split over a symbolic extent, compiled once
for each number of iterations it can have left.

A split by ``f`` of a symbolic extent ``n`` whose outer loop ``o`` carries the pragma
``specialize_remainder`` (``s[T].pragma(o, "specialize_remainder", f)``) leaves, after
``loop_partition``, full tiles of constant loops and one tail tile whose loops over what is
left have the run-time extent ``r = n - o*f``, ``1 <= r < f``. Where such a tile is a
register block (``f`` rows of accumulators, their loop unrolled inside the reduction), a loop
of run-time extent cannot be unrolled and the C compiler keeps the block in memory. This
pass compiles the tile once per value of ``r``, so that each copy is a micro-kernel of
exactly the rows left, with constant loops::

    for (o, floordiv(n, 6), ...) {                  // the tail tile, r = n - o*6
      for (k, 0, K) { unrolled (i, 0, r) { acc[i] += ... } }
      for (i, 0, r) { C[o*6 + i] = acc[i] }
    }
 => for (o, floordiv(n, 6), ...) {
      if (r == 1) { the tile, every loop of extent r now of extent 1 }
      else if (r == 2) { ... } ... else { ... of extent 5 }
    }

The tile is the loop's body, or a branch of an ``if`` that is its body (the tail branch of
a parallel loop that ``loop_partition`` cut inside its body), whose loops of non-constant
extent depending on ``o`` have one extent ``r`` that the analyzer proves in ``[0, f)``;
where it proves only ``r <= f``, the case ``f`` too, and the case 0 is left out where it
proves ``r >= 1``. Of several such extents, the one the others are expressions of.
Nothing is specialised inside a loop nested in ``o``, so the test runs once per tile.
The code grows by ``f - 2`` copies of the tile: the pragma is for small factors.

A block's count of whole vectors in a run-time column tail (``f`` the vectors per block,
and ``f - w`` the extent of the masked vector's loop after them) is such an ``r``: each
copy's masked vector starts at a constant column.

Guarantee: the same iterations run in the same order; inside a test that ``r == c``, the
expression ``r`` is replaced by ``c``.
"""

from __future__ import annotations

from kiln.arith import Analyzer
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, post_order_visit, rebuild, uses_var
from kiln.ir.stmt import AttrStmt, For, ForKind, IfThenElse, Stmt
from kiln.ir.structural import structural_equal
from kiln.tir.loop_partition import strip_likely
from kiln.tir.vectorize import MASKED_LANES

#: the pragma (``s[T].pragma(axis, PRAGMA, f)``) and its attribute key in the loop program
PRAGMA = "specialize_remainder"
_KEY = "pragma_" + PRAGMA


def specialize_remainder(stmt: Stmt) -> Stmt:
    """Replace each tail tile of a loop marked ``specialize_remainder`` by one copy per
    value of its run-time extent (module docstring)."""
    return _Specialize().visit(stmt) if _has_pragma(stmt) else stmt


def _has_pragma(stmt: Stmt) -> bool:
    """Whether ``stmt`` holds the pragma (most programs do not)."""
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, AttrStmt)
                     and n.attr_key == _KEY else None)
    return bool(found)


class _Specialize(Mutator):
    def __init__(self):
        super().__init__()
        self.an = Analyzer()
        self.marked: dict[E.Var, int] = {}  # loop variable -> factor

    def visit_AttrStmt(self, node: AttrStmt) -> Stmt:
        if node.attr_key != _KEY:
            return self.generic_visit(node)
        var = node.node.var if isinstance(node.node, E.IterVar) else node.node
        self.marked[var] = int(node.value.value)
        try:
            return self.visit(node.body)  # the pragma is consumed
        finally:
            del self.marked[var]

    def visit_For(self, node: For) -> Stmt:
        factor = self.marked.get(node.loop_var)
        if factor is None:
            return self.generic_visit(node)
        with self.an.scope():
            self.an.bind(node.loop_var, E.Range.from_min_extent(node.min, node.extent))
            body = self._tile(node.body, node.loop_var, factor)
        return rebuild(node, body=body)

    def _tile(self, stmt: Stmt, var: E.Var, factor: int) -> Stmt:
        """``stmt`` specialised on its remainder; an ``if``'s branches each in turn (the
        full tiles' branch is left as it is)."""
        if not isinstance(stmt, IfThenElse):
            cases = self._cases(stmt, var, factor)
            return stmt if cases is None else _chain(stmt, *cases, self.an.simplify(cases[0]))
        cond = strip_likely(stmt.condition)
        with self.an.constraint(cond):
            then = self._tile(stmt.then_case, var, factor)
        other = stmt.else_case
        if other is not None:
            with self.an.constraint(E.Not(cond)):
                other = self._tile(other, var, factor)
        return rebuild(stmt, then_case=then, else_case=other)

    def _cases(self, stmt: Stmt, var: E.Var, factor: int) -> tuple[E.PrimExpr, int, int] | None:
        """``(r, first, last)``: the run-time extent ``r`` of ``stmt``'s loops that depends on
        ``var``, is provably in ``[0, factor]`` and that the others are expressions of, and
        the values it can take; None where there is not exactly one."""
        extents = [e for e in _remainder_extents(stmt, var)
                   if self.an.can_prove(e <= factor) and self.an.can_prove(e >= 0)]
        # the one that the others are expressions of (``w`` of ``2 - w``)
        roots = [e for e in extents if all(o is e or _contains(o, e) for o in extents)]
        if len(roots) != 1:
            return None
        (r,) = roots
        return (r, 1 if self.an.can_prove(r >= 1) else 0,
                factor - 1 if self.an.can_prove(r < factor) else factor)


def _remainder_extents(stmt: Stmt, var: E.Var) -> list[E.PrimExpr]:
    """The distinct non-constant extents of the loops in ``stmt`` that depend on ``var``."""
    out: list[E.PrimExpr] = []

    def visit(n) -> None:
        if (isinstance(n, For) and not isinstance(n.extent, E.IntImm)
                and uses_var(n.extent, lambda v: v is var)
                and not any(structural_equal(n.extent, e) for e in out)):
            out.append(n.extent)

    post_order_visit(stmt, visit)
    return out


def _contains(expr: E.PrimExpr, part: E.PrimExpr) -> bool:
    """Whether ``part`` is a subexpression of ``expr``."""
    found = []
    post_order_visit(expr, lambda n: found.append(n) if isinstance(n, E.PrimExpr)
                     and structural_equal(n, part) else None)
    return bool(found)


def _chain(stmt: Stmt, r: E.PrimExpr, first: int, last: int, tested: E.PrimExpr) -> Stmt:
    """``if (r == first) stmt[r := first] else if ... else stmt[r := last]``, testing
    ``tested`` (``r`` simplified where ``stmt`` runs)."""
    out = _Replace(r, last).visit(stmt)
    for c in range(last - 1, first - 1, -1):
        out = IfThenElse(E.EQ(tested, E.IntImm(r.dtype, c)), _Replace(r, c).visit(stmt), out)
    return out


class _Replace(Mutator):
    """Every occurrence of ``expr`` (loop extents, bounds, indices) replaced by the constant
    ``value``; sound inside a test that ``expr == value``, as the variables of ``expr``
    (the marked loop's and the symbolic sizes) are the same everywhere in the tile.

    A vectorized loop of run-time extent keeps the constant bound its extent had as its
    ``masked_lanes`` width (``kiln.tir.vectorize``): once the loops around it are
    constant, the simplifier drops a ``min(x, 16)`` that it proves redundant, which was
    the only bound the masked vector's width was read from."""

    def __init__(self, expr: E.PrimExpr, value: int):
        super().__init__()
        self.expr, self.value = expr, E.IntImm(expr.dtype, value)

    def visit(self, node):
        if isinstance(node, E.PrimExpr) and structural_equal(node, self.expr):
            return self.value
        return super().visit(node)

    def visit_For(self, node: For) -> Stmt:
        out = self.generic_visit(node)
        if (node.kind != ForKind.VECTORIZED or isinstance(out.extent, E.IntImm)
                or MASKED_LANES in dict(node.annotations)):
            return out
        hi = Analyzer().const_int_bound(node.extent)[1]
        return out if hi is None else rebuild(
            out, annotations=(*out.annotations, (MASKED_LANES, hi)))


__all__ = ["PRAGMA", "specialize_remainder"]
