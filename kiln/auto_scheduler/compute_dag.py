"""The compute DAG of a workload: its operations in order, what the sketch rules need to
know of each, and the replay of a :class:`~.loop_state.State` onto a fresh schedule.

``ComputeDAG(tensors)`` (TVM's ``auto_scheduler.ComputeDAG``) takes the inputs and outputs
of a computation; ``print(dag)`` shows one line per operation (``C(i, j) += (A[i, k]*B[k,
j])``); ``dag.apply_steps_from_state(state)`` returns ``(schedule, tensors)`` with the
state's steps applied, ready for ``kiln.lower``/``kiln.build``. The analyses
(:meth:`is_inlinable`, :meth:`has_data_reuse`, :meth:`consumers`) describe the DAG as
written, before any step.

Steps name stages by :meth:`stage_name`: the operation's name, made unique by a suffix
(``T_add``, ``T_add_1``) where two operations share one, as two ``add`` of a fused relay
group do. :meth:`workload_key` names a DAG that no registered function builds (a fused
group of a relay graph): ``["<hash of the printed DAG>", <shape>, ...]``, equal for two
DAGs exactly when they compute the same thing on the same shapes.
"""

from __future__ import annotations

import hashlib
import json

from kiln.ir.expr import Add, Div, Max, Min, Mul, ProducerLoad, Reduce, Sub
from kiln.ir.functor import collect_vars, post_order_visit
from kiln.ir.printer import to_text
from kiln.te.schedule import create_schedule
from kiln.te.tensor import ComputeOp, PlaceholderOp, Tensor

from .layout_rewrite import (
    LayoutRewrite,
    LayoutRewriteOption,
    apply_steps_with_rewrites,
    plan_layout_rewrites,
    rewrite_tensors,
)
from .loop_state import ReplayContext, State

__all__ = ["ComputeDAG"]


class ComputeDAG:
    """The operations reachable from ``tensors``' outputs, inputs first."""

    def __init__(self, tensors) -> None:
        self.tensors: list[Tensor] = list(tensors)
        placeholders = {t.op for t in self.tensors if isinstance(t.op, PlaceholderOp)}
        self.outputs = [t for t in self.tensors if t.op not in placeholders]
        if not self.outputs:
            raise ValueError("ComputeDAG needs at least one computed output tensor")
        self.ops = _topological_order([t.op for t in self.outputs])
        self._consumers = {op: [c for c in self.ops if op in
                                {t.op for t in c.input_tensors}] for op in self.ops}
        self._stage_names = _unique_names(self.compute_ops)

    # ---- analysis -------------------------------------------------------------------
    @property
    def compute_ops(self) -> list:
        """The compute operations, producers before consumers."""
        return [op for op in self.ops if isinstance(op, ComputeOp)]

    def stage_name(self, op) -> str:
        """The name by which steps refer to compute operation ``op``'s stage."""
        return self._stage_names[op]

    def is_output(self, op) -> bool:
        return any(t.op is op for t in self.outputs)

    def consumers(self, op) -> list:
        """The operations that read ``op``'s output."""
        return self._consumers.get(op, [])

    def is_inlinable(self, op) -> bool:
        """An elementwise compute stage that is not an output: ``compute_inline`` can move
        its expression into its consumers."""
        return (isinstance(op, ComputeOp) and not op.reduce_axis and not self.is_output(op)
                and len(op.body) == 1)

    def has_data_reuse(self, op) -> bool:
        """A reduction one of whose reads does not use some spatial axis (longer than 1):
        an element read is used by several outputs, which multi-level tiling keeps in cache
        (GEMM, conv)."""
        if not isinstance(op, ComputeOp) or not op.reduce_axis:
            return False
        spatial = {iv.var for iv in op.axis if int(iv.dom.extent.value) > 1}
        reuse = False

        def visit(node):
            nonlocal reuse
            if isinstance(node, ProducerLoad):
                used = set().union(*[collect_vars(i) for i in node.indices]) if node.indices \
                    else set()
                reuse = reuse or bool(spatial - used)

        for b in op.body:
            post_order_visit(b, visit)
        return reuse

    # ---- schedules ------------------------------------------------------------------
    def init_state(self) -> State:
        """The state with no steps: the default schedule."""
        return State([])

    def apply_steps_from_state(
            self, state: State,
            layout_rewrite: LayoutRewriteOption = LayoutRewriteOption.NO_REWRITE):
        """``(schedule, tensors)``: a fresh schedule with ``state``'s steps applied, the
        layout-free weights re-laid out for the state's tiling as ``layout_rewrite`` says
        (:mod:`.layout_rewrite`; a copy stage runs in parallel at the root)."""
        if layout_rewrite != LayoutRewriteOption.NO_REWRITE:
            return apply_steps_with_rewrites(self, state, lambda _: layout_rewrite)
        sch = create_schedule([t.op for t in self.outputs])
        ctx = ReplayContext(sch, {}, {}, {})
        for op in self.compute_ops:
            ctx.add_stage(self.stage_name(op), op.output(0))
        for step in state.steps:
            step.apply(ctx)
        return sch, list(self.tensors)

    def layout_rewrites(self, state: State) -> list[LayoutRewrite]:
        """The new layouts of the layout-free weights under ``state``'s tiling (each
        with its ``transform`` of a weight array)."""
        return plan_layout_rewrites(self, state)

    def rewrite_layout_from_state(self, state: State) -> ComputeDAG:
        """The DAG taking its layout-free weights pre-transformed for ``state``."""
        pre = LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED
        tensors, _ = rewrite_tensors(self, [(r, pre) for r in self.layout_rewrites(state)])
        return ComputeDAG(tensors)

    def print_python_code_from_state(self, state: State) -> str:
        """The state's steps, one line each."""
        return str(state)

    def flop_ct(self) -> float:
        """Floating-point operations of one run: each compute stage's arithmetic per output
        element times its iterations (a GEMM: ``2 * N * L * M``)."""
        total = 0.0
        for op in self.compute_ops:
            iters = 1
            for iv in list(op.axis) + list(op.reduce_axis):
                iters *= int(iv.dom.extent.value)
            total += iters * max(1, _count_arith(op.body[0]))
        return total

    def workload_key(self) -> str:
        """``'["<md5>", [shape], ...]'``: the key of this computation, for records of a DAG
        that no registered function builds. The hash covers the printed DAG and every
        operation's shape and dtype; the shapes listed are its inputs' (in :attr:`ops`
        order), then its outputs'. It depends on the operations only, not on which tensors
        the DAG was given."""
        shapes = [[int(d) for d in op.output(0).shape] for op in self.ops]
        dtypes = [str(op.output(0).dtype) for op in self.ops]
        digest = hashlib.md5(f"{self}{shapes}{dtypes}".encode()).hexdigest()
        inputs = [s for op, s in zip(self.ops, shapes, strict=True)
                  if isinstance(op, PlaceholderOp)]
        outputs = [[int(d) for d in t.shape] for t in self.outputs]
        return json.dumps([digest, *inputs, *outputs])

    def __str__(self) -> str:
        lines = []
        for op in self.ops:
            if isinstance(op, PlaceholderOp):
                lines.append(f"{op.name} = PLACEHOLDER {list(op.shape)}")
                continue
            if not isinstance(op, ComputeOp):
                lines.append(f"{op.name} = {type(op).__name__}")
                continue
            axes = ", ".join(iv.var.name for iv in op.axis)
            body = op.body[0]
            if isinstance(body, Reduce):
                red = f" (over {', '.join(iv.var.name for iv in body.axis)})"
                lines.append(f"{op.name}({axes}) reduce= {to_text(body.source[0])}{red}")
            else:
                lines.append(f"{op.name}({axes}) = {to_text(body)}")
        return "\n".join(lines) + "\n"

    __repr__ = __str__


def _unique_names(ops: list) -> dict:
    """``op -> name``: each operation's name, the second one of a name ``name_1`` ...."""
    names: dict = {}
    taken: set[str] = set()
    for op in ops:
        name, k = op.name, 0
        while name in taken:
            k += 1
            name = f"{op.name}_{k}"
        taken.add(name)
        names[op] = name
    return names


def _topological_order(outputs: list) -> list:
    """The operations ``outputs`` depend on, each after its inputs."""
    order: list = []
    seen: set = set()

    def visit(op):
        if op in seen:
            return
        seen.add(op)
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def _count_arith(expr) -> int:
    """Arithmetic nodes of an expression (the reduction's combine counts one)."""
    kinds = (Add, Sub, Mul, Div, Max, Min)
    count = 0

    def visit(node):
        nonlocal count
        if isinstance(node, kinds) and str(node.dtype).startswith("float"):
            count += 1
        elif isinstance(node, Reduce):
            count += 1

    post_order_visit(expr, visit)
    return count
