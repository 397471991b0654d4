"""Op strategy (TVM's ``relay.op.strategy``): the one place that chooses the compute and the
schedule of a fused group's kernel.

:func:`select_implementation` builds the group's compute — the topi compute of each of its
operators (``op.OPS``) on placeholders of the group's external inputs — and schedules it
with the first of these that applies, in this order:

1. **tuned record**: a CPU target, inside an autotvm dispatch context
   (``autotvm.apply_history_best(log)``, ``autotvm.ApplyConfig(cfg)``) that holds a config
   for the workload of the group's tunable anchor (``conv2d_NCHWc``,
   ``depthwise_conv2d_NCHWc``, ``dense``): the template's schedule with that config
   (:func:`kiln.autotvm.task.relay_integration.schedule_group`);
2. **the target's hand schedule**: ``topi.x86.schedule_auto`` on a CPU target,
   ``topi.generic.schedule_auto`` otherwise;
3. **the generic schedule** ``topi.generic.schedule_auto``: every stage at the root,
   injective stages inlined; it applies to every group.

A schedule *applies* when it schedules the group and the schedule lowers to a PrimFunc. A
schedule that does not apply raises one of :data:`NOT_APPLICABLE` (an illegal primitive or
a bound it cannot infer: ``ScheduleError``/``TVMError``; a case it does not implement:
``NotImplementedError``); the strategy then logs a warning on the ``kiln.relay.strategy``
logger naming the group, the schedule and the reason, and tries the next one. Any other
exception is a bug in a schedule and propagates out of ``relay.build``.

Guarantee: the returned implementation's PrimFunc computes exactly the group's topi
computes (a schedule never changes results); its arguments are the placeholders of the
group's external inputs, in first-use order, then the group's output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from kiln import te, topi
from kiln.autotvm.task.relay_integration import schedule_group
from kiln.driver.lower import schedule_to_primfunc
from kiln.errors import TVMError
from kiln.ir.stmt import PrimFunc
from kiln.target import Target

from .graph import Node
from .op import OPS
from .transform import Group

logger = logging.getLogger(__name__)

#: the errors by which a schedule says it does not apply to a group (ScheduleError is a
#: TVMError); anything else is a bug and is not caught
NOT_APPLICABLE: tuple[type[Exception], ...] = (TVMError, NotImplementedError)

#: a schedule of the ladder: output tensors -> ``(schedule, autotvm label or None)``, or None
#: when it has nothing for the group (no tuned record)
ScheduleRule = Callable[[list[te.Tensor]], tuple[te.Schedule, str | None] | None]


@dataclass(frozen=True)
class Implementation:
    """A fused group's kernel: its compute (``args``: placeholders of the group's external
    ``inputs``, then its output), the schedule chosen for it, that schedule lowered, and the
    name of the schedule (``tuned`` names the autotvm template and config when a tuned
    record chose it)."""

    group: Group
    inputs: list[Node]
    args: list[te.Tensor]
    schedule: te.Schedule
    func: PrimFunc
    schedule_name: str
    tuned: str | None = None


def group_compute(group: Group) -> tuple[list[Node], list[te.Tensor]]:
    """The group's external input nodes, and its compute's arguments: a placeholder per
    external input (``p0``, ``p1`` ... in first-use order), then the group's output tensor."""
    inside = {n.uid for n in group.nodes}
    inputs: list[Node] = []
    tensors: dict[int, te.Tensor] = {}
    for n in group.nodes:
        for i in n.inputs:
            if i.uid not in inside and i.uid not in tensors:
                tensors[i.uid] = te.placeholder(i.shape, dtype=i.dtype, name=f"p{len(inputs)}")
                inputs.append(i)
        tensors[n.uid] = OPS[n.op][0]([tensors[i.uid] for i in n.inputs], n.attrs)
    return inputs, [tensors[i.uid] for i in inputs] + [tensors[group.output.uid]]


def _schedule_rules(group: Group, target: Target) -> list[tuple[str, ScheduleRule]]:
    """The schedules to try for ``group`` on ``target``, in the documented order, the generic
    schedule last."""
    def tuned(outs):
        return schedule_group(group, outs, str(target))

    def hand(outs):
        return topi.x86.schedule_auto(outs), None

    def generic(outs):
        return topi.generic.schedule_auto(outs), None

    if target.is_cpu:
        return [("autotvm", tuned), ("x86", hand), ("generic", generic)]
    return [("generic", generic)]


def _lower(rule: ScheduleRule, args: list[te.Tensor],
           name: str) -> tuple[te.Schedule, PrimFunc, str | None] | None:
    """``(schedule, PrimFunc, autotvm label)`` of ``args``' compute under ``rule``, or None
    when the rule has no schedule for it."""
    chosen = rule(args[-1:])
    if chosen is None:
        return None
    s, tuned = chosen
    return s, schedule_to_primfunc(s, args, name), tuned


def select_implementation(group: Group, name: str, target: Target) -> Implementation:
    """The kernel of ``group`` on ``target`` as a PrimFunc named ``name``: its compute
    scheduled by the first schedule that applies (see the module doc for the order)."""
    inputs, args = group_compute(group)
    rules = _schedule_rules(group, target)
    for k, (schedule_name, rule) in enumerate(rules[:-1]):
        try:
            lowered = _lower(rule, args, name)
        except NOT_APPLICABLE as e:
            logger.warning("relay.build: %s schedule failed for %s (%s: %s); using the %s "
                           "schedule", schedule_name, group.describe(), type(e).__name__, e,
                           rules[k + 1][0])
            continue
        if lowered is not None:
            s, func, tuned = lowered
            return Implementation(group, inputs, args, s, func, schedule_name, tuned)
    generic_name, generic = rules[-1]  # applies to every group: its errors propagate
    s, func, _ = _lower(generic, args, name)
    return Implementation(group, inputs, args, s, func, generic_name)
