"""Lower floor division to C division where the operands are provably non-negative.

``floordiv(a, b)`` and ``floormod(a, b)`` round toward minus infinity; C's ``/`` and ``%``
truncate toward zero. They agree when ``a >= 0`` and ``b > 0``, which holds for almost every
index expression: loop variables start at 0, and fused loops are split back with
``floordiv(fused, 58)`` / ``floormod(fused, 58)``. Plain ``/`` and ``%`` are pure,
branch-free arithmetic that the C compiler hoists out of inner loops and strength-reduces;
the generic ``kiln_floordiv``/``kiln_floormod`` helpers carry a sign fix-up.

Guarantee: every rewritten division computes the same value as before, for every value the
loop ranges (and lets) around it allow; anything not provable is left as it is. Run by
``kiln.build`` for the C backend only, so ``kiln.lower``'s printout keeps TVM's floordiv.
"""

from __future__ import annotations

from kiln.arith import Analyzer
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, rebuild
from kiln.ir.stmt import For, LetStmt


class _LowerDivMod(Mutator):
    def __init__(self):
        super().__init__()
        self.an = Analyzer()

    def visit_For(self, node: For):
        lo, ext = self.visit(node.min), self.visit(node.extent)
        with self.an.scope():
            self.an.bind(node.loop_var, E.Range.from_min_extent(node.min, node.extent))
            body = self.visit(node.body)
        if lo is node.min and ext is node.extent and body is node.body:
            return node
        return rebuild(node, min=lo, extent=ext, body=body)

    def visit_LetStmt(self, node: LetStmt):
        value = self.visit(node.value)
        with self.an.scope():
            if dt.is_integer(value.dtype) and dt.lanes(value.dtype) == 1:
                self.an.bind(node.var, value)
            body = self.visit(node.body)
        if value is node.value and body is node.body:
            return node
        return rebuild(node, value=value, body=body)

    def _truncating(self, node) -> bool:
        return (dt.is_integer(node.dtype) and dt.lanes(node.dtype) == 1
                and self.an.can_prove(node.a >= 0) and self.an.can_prove(node.b > 0))

    def visit_FloorDiv(self, node: E.FloorDiv):
        new = self.generic_visit(node)
        return E.Div(new.a, new.b, new.dtype) if self._truncating(new) else new

    def visit_FloorMod(self, node: E.FloorMod):
        new = self.generic_visit(node)
        return E.Mod(new.a, new.b, new.dtype) if self._truncating(new) else new


def lower_divmod(stmt):
    """Replace provably non-negative floordiv/floormod by truncating Div/Mod (see module
    docstring)."""
    return _LowerDivMod().visit(stmt)
