"""Inlining: the body of each stage with its inlined producers substituted in.

A stage marked ``compute_inline`` has no loops and no storage; every read ``B[idx]`` of it is
replaced by B's expression with B's axes bound to ``idx``. The result is computed once per
lowering and shared by bound inference and loop-nest generation.
"""

from __future__ import annotations

from kiln.ir.expr import ProducerLoad
from kiln.ir.functor import Mutator, substitute
from kiln.ir.stmt import Stmt

from .schedule import Schedule
from .tensor import ComputeOp


class _Inliner(Mutator):
    def __init__(self, inlined: dict):
        super().__init__()
        self.inlined = inlined  # Operation -> ComputeOp

    def visit_ProducerLoad(self, node: ProducerLoad):
        indices = tuple(self.visit(i) for i in node.indices)
        op = node.producer.op
        if op in self.inlined:
            body = op.body[node.producer.value_index]
            vmap = {iv.var: idx for iv, idx in zip(op.axis, indices, strict=True)}
            return self.visit(substitute(body, vmap))
        if all(a is b for a, b in zip(indices, node.indices, strict=True)):
            return node
        return ProducerLoad(node.producer, indices)


def _inliner(sch: Schedule) -> _Inliner:
    return _Inliner({st.op: st.op for st in sch.stages
                     if st.attach_type == "inline" and isinstance(st.op, ComputeOp)})


def inline_stages(sch: Schedule, stmt: Stmt) -> Stmt:
    """``stmt`` (the body of an operation that lowers itself, e.g. a hybrid function) with
    the inlined stages of ``sch`` substituted, as TVM inlines into hybrid bodies."""
    return _inliner(sch).visit(stmt)


def effective_bodies(sch: Schedule) -> dict:
    """Map each compute stage's op to its body with inlined stages substituted."""
    mut = _inliner(sch)
    out: dict = {}
    for st in sch.stages:
        if isinstance(st.op, ComputeOp):
            out[st.op] = [mut.visit(b) for b in st.op.body]
    return out

