"""Horizontal fusion of a graph's parallel branches (issue 18, "In graphs").

:func:`horizontal_fusion` takes the fused groups of :func:`.transform.fuse_ops` and puts
the *small* groups that lie at the same depth of the group graph (the branches of an
inception block, the inputs of a concat, parallel projections) into one
:class:`HorizontalGroup`: one kernel whose parallel loop runs the branches side by side
(``s.create_fused_loop``, docs/fused_loop.md; the op strategy schedules it,
:func:`.strategy.select_implementations`).

The cost rule is the x86 schedules' own rule for a parallel loop (``topi.x86``'s
``worth_parallel``: at least :data:`PARALLEL_WORK` inner-loop iterations), applied to the
branches together. A group is *small* when its work (multiply-adds, or output elements
for a group without reduction; :func:`group_work`) is below :data:`PARALLEL_WORK`: its hand
schedule runs it on one thread, leaving the other cores idle. The small groups of one depth
are fused when together they reach :data:`PARALLEL_WORK` (below that, the fork/join of
the fused loop costs more than running them one after another saves) and no branch holds
more than half of their work (else one thread runs nearly everything: the largest group
keeps its kernel and the rule is tried on the rest). Branches run most expensive first
(the parallel loop hands out the expensive ones first). Large groups keep their kernels:
their own parallel loops already use every core, and their hand schedules (register
tiles, vectorized channel blocks) beat the plain loops of a fused branch.

A group whose workload has a tuned record in the active ``autotvm.apply_history_best``
context (:func:`tuned_template`) keeps its kernel too, logged at debug level: its tuned
schedule tiles and parallelizes the group's whole output, rows included, while a branch of a
fused loop is a stage whose rows the fused loop hands out, unscheduled (``create_fused_loop``),
so the tuned config cannot live inside the fused kernel.

Guarantees: every group of the input is in exactly one kernel of the result; the groups of a
:class:`HorizontalGroup` are independent (same depth: no path of tensors joins them, so they
may run concurrently); the result is in a valid run order (each kernel after the kernels
producing its inputs), the original order where nothing is fused. Results are unchanged
(each branch computes exactly its group's operators).

``relay.build`` runs it on CPU targets at ``opt_level`` 3 unless switched off by
``PassContext(config={"relay.horizontal_fusion": False})`` or
``disabled_pass=["HorizontalFusion"]`` (:func:`is_enabled`).
"""

from __future__ import annotations

import heapq
import logging
import math
from dataclasses import dataclass

from kiln.autotvm.task.dispatcher import has_tuned_config
from kiln.autotvm.task.relay_integration import TUNABLE_OPS, workload_of
from kiln.ir.transform import PassContext
from kiln.target import Target
from kiln.te.tensor import ComputeOp, PlaceholderOp
from kiln.topi.x86._common import PARALLEL_MIN_ELEMS

from .graph import Node
from .strategy import group_compute
from .transform import Group

logger = logging.getLogger(__name__)

#: the work (multiply-adds, or output elements) from which a kernel takes a parallel loop
#: (``topi.x86``'s ``worth_parallel``): below it a group is small, and small groups are
#: fused when together they reach it
PARALLEL_WORK = 4 * PARALLEL_MIN_ELEMS

#: the ``PassContext.config`` key that switches the pass off (``False``)
CONFIG_KEY = "relay.horizontal_fusion"

#: the pass's name in ``PassContext(disabled_pass=[...])``
PASS_NAME = "HorizontalFusion"


@dataclass(eq=False)
class HorizontalGroup:
    """Independent fused groups computed by one kernel, each a branch of its parallel loop;
    ``nodes`` are the groups' nodes, ``outputs`` their outputs, in branch order."""

    groups: list[Group]

    @property
    def nodes(self) -> list[Node]:
        return [n for g in self.groups for n in g.nodes]

    @property
    def outputs(self) -> list[Node]:
        return [g.output for g in self.groups]

    def describe(self) -> str:
        return "horizontal: " + " | ".join(g.describe() for g in self.groups)


#: what ``relay.build`` compiles into one kernel
Kernel = Group | HorizontalGroup


def is_enabled(ctx: PassContext, target: Target) -> bool:
    """Does ``relay.build`` run the pass: a CPU target at ``opt_level`` 3, not switched off
    by the config key or ``disabled_pass``, nor by ``relay.backend.use_auto_scheduler``
    (auto_scheduler tunes and schedules each fused group as its own kernel)."""
    return (target.is_cpu and ctx.opt_level >= 3 and PASS_NAME not in ctx.disabled_pass
            and ctx.config.get(CONFIG_KEY, True) is not False
            and not ctx.config.get("relay.backend.use_auto_scheduler"))


def group_work(group: Group) -> int | None:
    """Multiply-adds of the group's compute (output elements of each stage times its
    reduction's extent); None when a stage is not a ``te.compute`` (it cannot be a branch)."""
    _, args = group_compute(group)
    work, todo, seen = 0, [args[-1].op], set()
    while todo:
        op = todo.pop()
        if op in seen or isinstance(op, PlaceholderOp):
            continue
        seen.add(op)
        if not isinstance(op, ComputeOp) or len(op.outputs) != 1:
            return None
        size = math.prod(int(e) for e in op.outputs[0].shape)
        work += size * math.prod(int(iv.dom.extent) for iv in op.reduce_axis)
        todo.extend(t.op for t in op.input_tensors)
    return work


def _producers(groups: list[Group], views: dict[int, int]) -> dict[int, Group]:
    """Node uid -> the group writing it: a group's output, or a view of it (``views``,
    :func:`.transform.view_groups`: a reshape that reads the viewed tensor's storage)."""
    producer = {g.output.uid: g for g in groups}
    producer.update((view, producer[src]) for view, src in views.items() if src in producer)
    return producer


def group_depths(groups: list[Group], views: dict[int, int] | None = None) -> dict[int, int]:
    """``id(group)`` -> the length of the longest chain of groups producing its inputs (0
    for a group that reads only graph inputs and constants); ``groups`` in a run order, a
    read of a view (``views``) a read of the tensor it views."""
    producer = _producers(groups, views or {})
    depth: dict[int, int] = {}
    for g in groups:
        feeds = [producer[i.uid] for n in g.nodes for i in n.inputs if i.uid in producer]
        depth[id(g)] = 1 + max((depth[id(p)] for p in feeds if p is not g), default=-1)
    return depth


def horizontal_fusion(groups: list[Group], views: dict[int, int] | None = None,
                      target: Target | None = None) -> list[Kernel]:
    """The kernels of ``groups`` (fused groups in a run order) on the CPU ``target``
    (``llvm`` when None): the small untuned groups of each depth fused into one
    :class:`HorizontalGroup` where there are two or more, in a run order. ``views``
    (:func:`.transform.view_groups`) are the reshapes the groups read that need no kernel: a
    read of one is a read of the tensor it views."""
    views = views or {}
    target = target or Target("llvm")
    depth = group_depths(groups, views)
    small: dict[int, list[tuple[int, Group]]] = {}
    for g in groups:
        work = group_work(g)
        if work is None or work >= PARALLEL_WORK:
            continue
        template = tuned_template(g, target)
        if template is not None:
            logger.debug("horizontal fusion: %s keeps its kernel: a tuning record holds a "
                         "%s config for it, whose schedule tiles and parallelizes its whole "
                         "output; a fused branch's rows are handed out by the fused loop",
                         g.describe(), template)
            continue
        small.setdefault(depth[id(g)], []).append((work, g))
    kernel_of: dict[int, Kernel] = {id(g): g for g in groups}
    for members in small.values():
        members.sort(key=lambda wg: -wg[0])  # stable: ties keep the run order
        branches = pays(members)
        if branches:
            fused = HorizontalGroup(branches)
            for g in fused.groups:
                kernel_of[id(g)] = fused
    return _run_order(groups, kernel_of, views)


def tuned_template(group: Group, target: Target) -> str | None:
    """The autotvm template of ``group``'s anchor when tuning records in a context on the
    stack (``autotvm.apply_history_best``) hold a config for its workload on ``target``;
    None otherwise."""
    for node in group.nodes:
        if node.op in TUNABLE_OPS and has_tuned_config(target, workload_of(node)):
            return TUNABLE_OPS[node.op]
    return None


def pays(members: list[tuple[int, Group]]) -> list[Group]:
    """The groups of ``members`` (``(work, group)``, most work first) worth fusing: all but
    the largest ones that hold more than half of the others' work together, when two or more
    remain whose work reaches :data:`PARALLEL_WORK`; else none."""
    total = sum(work for work, _ in members)
    k = 0
    while k < len(members) and 2 * members[k][0] > total:
        total -= members[k][0]
        k += 1
    rest = members[k:]
    return [g for _, g in rest] if len(rest) >= 2 and total >= PARALLEL_WORK else []


def _run_order(groups: list[Group], kernel_of: dict[int, Kernel],
               views: dict[int, int]) -> list[Kernel]:
    """The kernels in a run order: each after the kernels producing its inputs, otherwise in
    the order of their first group (a topological sort that keeps the original order)."""
    position: dict[int, int] = {}
    kernels: list[Kernel] = []
    for k, g in enumerate(groups):
        kernel = kernel_of[id(g)]
        if id(kernel) not in position:
            position[id(kernel)] = k
            kernels.append(kernel)
    producer = {uid: kernel_of[id(g)] for uid, g in _producers(groups, views).items()}
    needs = {id(kn): {id(producer[i.uid]) for n in kn.nodes for i in n.inputs
                      if i.uid in producer} - {id(kn)} for kn in kernels}
    by_id = {id(kn): kn for kn in kernels}
    ready = [(position[k], k) for k, deps in needs.items() if not deps]
    heapq.heapify(ready)
    order: list[Kernel] = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(by_id[k])
        for other, deps in needs.items():
            if k in deps:
                deps.discard(k)
                if not deps:
                    heapq.heappush(ready, (position[other], other))
    return order
