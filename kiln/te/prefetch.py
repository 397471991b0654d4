"""Which tensor a ``Stage.prefetch`` fetches, and the ``prefetch_scope`` attributes of a loop.

``s[C].prefetch(T, k, offset)`` asks for the region of ``T`` that iteration ``k + offset`` of
loop ``k`` reads (``kiln/tir/inject_prefetch.py`` turns the attribute into the calls). The
loop's body reads the tensors that ``C`` and the stages computed inside ``k`` (``compute_at``
at ``k`` or a loop inside it, at any depth) read, through the stages computed inline; what
those stages write is not read from memory. Other primitives, before or after the call,
change that set, so the tensor is resolved when the loop is built, among ``T`` and its
copies (``cache_read``):

- ``s.cache_read(T, "global", [C])`` with the copy at the root: ``C`` reads ``T.global``,
  which is prefetched;
- the copy computed inside ``k`` (``s[TG].compute_at(s[C], k)``): it is written in the body,
  and ``T``, which it reads there, is prefetched (also when the copy was named);
- ``compute_inline`` of a stage that reads ``T``: ``T`` is read inside ``C``'s body.

A prefetch that resolves to no tensor the body reads raises ``ScheduleError``: at the call
when the stage reads no tensor of the family (``T`` and its copies) at any of its loops,
at lowering when the loop's body does not read it (an inlined tensor, which has no memory;
a tensor read only by a stage computed at a loop outside ``k``). Hybrid stages resolve their
prefetches the same way; a ``te.scan``, ``te.extern`` or fused-loop stage refuses the call
(``Operation.check_primitive``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kiln.errors import ScheduleError
from kiln.ir.expr import IterVar, ProducerLoad
from kiln.ir.stmt import AttrStmt, Stmt
from kiln.tir.inject_prefetch import PREFETCH_SCOPE

from .tensor import ComputeOp, Operation, Tensor

if TYPE_CHECKING:
    from .schedule import Stage


def check_prefetch(stage: Stage, tensor: Tensor) -> None:
    """Raise ScheduleError when ``tensor`` and its copies are read at no loop of ``stage``
    (``Stage.prefetch`` asks at the call, before the stage's other primitives are known)."""
    if not isinstance(tensor, Tensor) or _resolve(stage, None, tensor) is None:
        reads, _ = _body_reads(stage, None)
        names = ", ".join(dict.fromkeys(t.name for t in reads)) or "no tensor"
        raise ScheduleError(
            f"prefetch on stage '{stage.name}': '{getattr(tensor, 'name', tensor)}' is not "
            f"read by this stage or a stage computed at its loops (they read {names})")


def prefetch_scopes(stage: Stage, iv: IterVar, body: Stmt) -> Stmt:
    """``body``, the body of loop ``iv`` of ``stage``, under one ``prefetch_scope``
    attribute per ``Stage.prefetch`` on ``iv`` (the first outermost), each naming the tensor
    the body reads (module docstring)."""
    attr = stage.iter_var_attrs.get(iv)
    if attr is None:
        return body
    for tensor, offset in reversed(list(zip(attr.prefetch_data, attr.prefetch_offset,
                                            strict=True))):
        body = AttrStmt(_prefetch_target(stage, iv, tensor), PREFETCH_SCOPE, offset, body)
    return body


def _prefetch_target(stage: Stage, iv: IterVar, tensor: Tensor) -> Tensor:
    """The tensor of ``tensor``'s copy family that loop ``iv``'s body reads from memory;
    ScheduleError naming the case when there is none."""
    target = _resolve(stage, iv, tensor)
    if target is not None:
        return target
    reads, _ = _body_reads(stage, iv)
    names = ", ".join(dict.fromkeys(t.name for t in reads)) or "no tensor"
    where = f"prefetch of '{tensor.name}' on stage '{stage.name}', loop '{iv.var.name}'"
    producer = stage.schedule.stage_map.get(tensor.op)
    if producer is not None and producer.attach_type == "inline":
        raise ScheduleError(
            f"{where}: '{tensor.name}' is computed inline (compute_inline), so it is never "
            f"stored; prefetch a tensor it reads instead (the loop reads {names})")
    raise ScheduleError(
        f"{where}: the loop's body does not read '{tensor.name}' or a copy of it "
        f"(cache_read); it reads {names}. Prefetch one of those, or compute the stage that "
        f"reads '{tensor.name}' inside the loop (compute_at)")


def _resolve(stage: Stage, iv: IterVar | None, tensor: Tensor) -> Tensor | None:
    """The first of ``tensor``'s copy family that the body reads and does not write."""
    reads, written = _body_reads(stage, iv)
    for t in _copy_family(stage, tensor):
        if t in reads and t not in written:
            return t
    return None


def _copy_source(op: Operation) -> Tensor | None:
    """The tensor ``op`` copies element for element (a ``cache_read`` stage), else None."""
    if not isinstance(op, ComputeOp) or op.reduce_axis or len(op.body) != 1:
        return None
    load = op.body[0]
    if not isinstance(load, ProducerLoad) or len(load.indices) != len(op.axis):
        return None
    if all(i is iv.var for i, iv in zip(load.indices, op.axis, strict=True)):
        return load.producer
    return None


def _copy_family(stage: Stage, tensor: Tensor) -> list[Tensor]:
    """``tensor``, then its copies (and theirs), then the tensors it is a copy of."""
    ops = [st.op for st in stage.schedule.stages]
    family = [tensor]
    for t in family:  # grows while it is walked: copies of copies
        family += [op.output(0) for op in ops
                   if _copy_source(op) == t and op.output(0) not in family]
    source = _copy_source(tensor.op)
    while source is not None and source not in family:
        family.append(source)
        source = _copy_source(source.op)
    return family


def _body_reads(stage: Stage, iv: IterVar | None) -> tuple[list[Tensor], set[Tensor]]:
    """The tensors the body of loop ``iv`` of ``stage`` (every loop when None) reads, through
    inlined stages, and those the stages computed there write."""
    sch = stage.schedule
    inside = _stages_inside(stage, iv)
    written = {t for st in inside for t in _outputs(st.op)}
    reads: list[Tensor] = []
    pending = [t for st in inside for t in st.op.input_tensors]
    while pending:
        t = pending.pop(0)
        producer = sch.stage_map.get(t.op)
        if producer is not None and producer.attach_type == "inline":
            pending += producer.op.input_tensors
        elif t not in reads:
            reads.append(t)
    return reads, written


def _stages_inside(stage: Stage, iv: IterVar | None) -> list[Stage]:
    """``stage`` and the stages computed at its loop ``iv`` or a loop inside it (at any of
    its loops when ``iv`` is None), and those computed at theirs."""
    leaves = stage.leaf_iter_vars
    loops = set(leaves if iv is None else leaves[leaves.index(iv):])
    inside = [stage]
    changed = True
    while changed:
        changed = False
        for st in stage.schedule.stages:
            if st in inside or st.attach_type != "scope":
                continue
            if (st.attach_stage is stage and st.attach_ivar in loops) or \
                    (st.attach_stage is not stage and st.attach_stage in inside):
                inside.append(st)
                changed = True
    return inside


def _outputs(op: Operation) -> Iterable[Tensor]:
    return (op.output(i) for i in range(op.num_outputs))
