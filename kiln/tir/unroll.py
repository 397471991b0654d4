"""Automatic unrolling under ``pragma auto_unroll_max_step``.

Inside a loop annotated ``s[C].pragma(axis, "auto_unroll_max_step", n)``, every serial loop
with a constant extent whose whole nest runs at most ``n`` steps is marked ``unrolled`` (the C
backend emits ``#pragma GCC unroll``). Guarantee: only loop kinds change, never the order of
iterations.
"""

from __future__ import annotations

from kiln.ir.expr import IntImm
from kiln.ir.functor import Mutator, rebuild
from kiln.ir.stmt import For, ForKind


def _steps(stmt) -> int | None:
    """Iterations of the deepest loop nest under ``stmt`` (None if not constant)."""
    if isinstance(stmt, For):
        if not isinstance(stmt.extent, IntImm):
            return None
        inner = _steps(stmt.body)
        return None if inner is None else stmt.extent.value * inner
    worst = 1
    for f in getattr(stmt, "_fields", ()):
        v = getattr(stmt, f)
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, For) or hasattr(x, "body") or hasattr(x, "seq"):
                k = _steps(x)
                if k is None:
                    return None
                worst = max(worst, k)
    return worst


class _AutoUnroll(Mutator):
    def __init__(self):
        super().__init__()
        self.limit = 0

    def visit_AttrStmt(self, node):
        if node.attr_key != "pragma_auto_unroll_max_step":
            return self.generic_visit(node)
        saved, self.limit = self.limit, int(node.value.value)
        body = self.visit(node.body)
        self.limit = saved
        return body

    def visit_For(self, node: For):
        body = self.visit(node.body)
        if self.limit and node.kind == ForKind.SERIAL:
            steps = _steps(rebuild(node, body=body))
            if steps is not None and steps <= self.limit:
                return rebuild(node, body=body, kind=ForKind.UNROLLED)
        return node if body is node.body else rebuild(node, body=body)


def auto_unroll(stmt):
    """Mark small constant loop nests under auto_unroll_max_step as unrolled."""
    return _AutoUnroll().visit(stmt)
