"""Remove no-ops: loops and branches whose bodies do nothing, and empty sequences.

Guarantee: only statements without effects are removed (a For over an empty body, an
IfThenElse with both branches empty, Evaluate of a constant).
"""

from __future__ import annotations

from kiln.ir.expr import IntImm
from kiln.ir.functor import Mutator, rebuild
from kiln.ir.stmt import Evaluate, IfThenElse, is_no_op, seq


class _RemoveNoOp(Mutator):
    def visit_SeqStmt(self, node):
        return seq(*(self.visit(s) for s in node.seq))

    def visit_For(self, node):
        body = self.visit(node.body)
        if is_no_op(body) or (isinstance(node.extent, IntImm) and node.extent.value <= 0):
            return Evaluate(0)
        return node if body is node.body else rebuild(node, body=body)

    def visit_IfThenElse(self, node):
        then = self.visit(node.then_case)
        other = self.visit(node.else_case) if node.else_case is not None else None
        if other is not None and is_no_op(other):
            other = None
        if is_no_op(then) and other is None:
            return Evaluate(0)
        if isinstance(node.condition, IntImm):
            return then if node.condition.value else (other or Evaluate(0))
        if then is node.then_case and other is node.else_case:
            return node
        return IfThenElse(node.condition, then, other)

    def visit_AttrStmt(self, node):
        body = self.visit(node.body)
        if is_no_op(body) and node.attr_key != "produce":
            return body
        return node if body is node.body else rebuild(node, body=body)


def remove_no_op(stmt):
    """Drop statements that have no effect (see module docstring)."""
    return _RemoveNoOp().visit(stmt)
