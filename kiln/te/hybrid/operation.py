"""``HybridOp``: an operation whose body is a loop program written in hybrid script.

The body is a statement over tensors (``ProducerStore`` / ``ProducerLoad``, ``For``,
``IfThenElse``, ``ProducerRealize`` of its own buffers) that writes every element of the
outputs. As in TVM, the operation's axes are its loops (``op.axis``, outer before inner, in
program order); a stage of it starts with those loops, and ``split`` / ``fuse`` / ``reorder``
/ annotations rewrite the body when it is lowered (``loop_schedule``). Bound inference gives
the operation its inputs and outputs whole.
"""

from __future__ import annotations

from kiln.errors import ScheduleError
from kiln.ir.expr import IterVar, ProducerLoad, Range
from kiln.ir.functor import Mutator
from kiln.ir.stmt import ProducerStore, Stmt

from ..inline import inline_stages
from ..tensor import Operation, Tensor
from .loop_schedule import apply_loop_schedule, loops_in_order


class HybridOp(Operation):
    """The operation of a hybrid-script function (``te.HybridOp(name, tag, attrs, inputs,
    outputs, body)``, TVM's signature): ``outputs`` are the tensors ``body`` writes, which
    the operation's own output tensors replace."""

    def __init__(self, name: str, tag: str, attrs: dict | None, inputs: list[Tensor],
                 outputs: list[Tensor], body: Stmt):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.inputs = list(inputs)
        self.outputs = [Tensor(t.shape, t.dtype, self, k) for k, t in enumerate(outputs)]
        self.body = _ReplaceTensors(dict(zip(outputs, self.outputs, strict=True))).visit(body)
        self.axis = [IterVar(Range.from_min_extent(loop.min, loop.extent), loop.loop_var,
                             IterVar.DataPar) for loop in loops_in_order(self.body)]

    @property
    def input_tensors(self) -> list[Tensor]:
        return list(self.inputs)

    def root_iter_vars(self) -> list[IterVar]:
        return list(self.axis)

    def check_primitive(self, primitive: str) -> None:
        if primitive == "compute_inline":
            raise ScheduleError(
                f"compute_inline: stage '{self.name}' is a hybrid operation; only te.compute "
                f"stages can be inlined")

    def build_provide(self, stage, ranges: dict) -> Stmt:
        body = inline_stages(stage.schedule, self.body)
        return apply_loop_schedule(stage, ranges, body)

    def replace_inputs(self, vmap: dict[Tensor, Tensor]) -> HybridOp:
        """This operation reading through ``vmap`` (after ``cache_read`` of an input), with
        the same axes, which its stage's splits and annotations name; itself when it reads
        none of the replaced tensors."""
        if not any(t in vmap for t in self.inputs):
            return self
        body = _ReplaceTensors(vmap).visit(self.body)
        op = HybridOp(self.name, self.tag, self.attrs, [vmap.get(t, t) for t in self.inputs],
                      self.outputs, body)
        op.axis = self.axis
        return op


class _ReplaceTensors(Mutator):
    """Reads and writes of some tensors redirected to others."""

    def __init__(self, rmap: dict[Tensor, Tensor]):
        super().__init__()
        self.rmap = rmap

    def visit_ProducerStore(self, node: ProducerStore):
        node = self.generic_visit(node)
        target = self.rmap.get(node.producer)
        return node if target is None else ProducerStore(target, node.value, node.indices)

    def visit_ProducerLoad(self, node: ProducerLoad):
        node = self.generic_visit(node)
        target = self.rmap.get(node.producer)
        return node if target is None else ProducerLoad(target, node.indices)


__all__ = ["HybridOp"]
