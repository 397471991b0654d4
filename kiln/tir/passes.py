"""The loop-IR pass pipeline that ``kiln.lower`` runs after storage flattening, in order."""

from __future__ import annotations

from kiln.arith import simplify_stmt
from kiln.ir.expr import Var
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import Allocate, AttrStmt, For, LetStmt

from .inject_virtual_thread import inject_virtual_thread
from .loop_partition import loop_partition
from .lower_divmod import lower_divmod
from .partition_conditions import partition_conditions
from .remove_no_op import remove_no_op
from .storage_flatten import storage_flatten
from .unroll import auto_unroll
from .vectorize import vectorize, vectorize_lane_masks


def simplify(stmt):
    """Simplify every expression, knowing each loop variable's range."""
    return simplify_stmt(stmt)


PIPELINE = [
    ("simplify", simplify),
    ("inject_virtual_thread", inject_virtual_thread),
    ("loop_partition", loop_partition),
    ("simplify", simplify),
    ("vectorize", vectorize),
    ("auto_unroll", auto_unroll),
    ("simplify", simplify),
    ("remove_no_op", remove_no_op),
]


#: Passes ``kiln.build`` runs on lowered functions for the C backend, after ``kiln.lower``'s
#: PIPELINE: target-specific lowering that the printed loop program does not show.
C_PIPELINE = [
    ("partition_conditions", partition_conditions),
    ("vectorize_lane_masks", vectorize_lane_masks),
    ("simplify", simplify),
    ("lower_divmod", lower_divmod),
]


def defined_vars(stmt) -> set[Var]:
    """Variables a statement defines itself: loop variables, lets, allocations."""
    out: set[Var] = set()

    def visit(n):
        if isinstance(n, For):
            out.add(n.loop_var)
        elif isinstance(n, LetStmt):
            out.add(n.var)
        elif isinstance(n, Allocate):
            out.add(n.buffer_var)
        elif isinstance(n, AttrStmt) and n.attr_key == "thread_extent":
            out.add(n.node.var)

    post_order_visit(stmt, visit)
    return out


__all__ = ["PIPELINE", "C_PIPELINE", "storage_flatten", "simplify", "loop_partition",
           "vectorize", "remove_no_op", "inject_virtual_thread", "auto_unroll", "lower_divmod",
           "partition_conditions", "defined_vars"]
