"""Horizontal fusion of a graph's parallel branches (issue 18, "In graphs").

:func:`horizontal_fusion` takes the fused groups of :func:`.transform.fuse_ops` and puts
the *small* groups that lie at the same depth of the group graph (the branches of an
inception block, the inputs of a concat, parallel projections) into one
:class:`HorizontalGroup`: one kernel whose parallel loop runs the branches side by side
(``s.create_fused_loop``, docs/fused_loop.md; the op strategy schedules it,
:func:`.strategy.select_implementations`).

A group is *small* when its work (multiply-adds, or output elements for a group without
reduction; :func:`group_work`) is below :data:`PARALLEL_WORK`, the x86 schedules' own
threshold for a parallel loop (``topi.x86``'s ``worth_parallel``): its hand schedule runs it
on one thread, leaving the other cores idle. Large groups keep their kernels: their own
parallel loops already use every core.

The cost rule (:func:`pays`) compares, in units of work, the small groups of one depth run
one after another on one thread (the sum of their work) with the fused kernel: one
fork/join (:data:`FORK_JOIN_WORK`) plus the time of the busiest thread when the fused
loop's rows (each group's first dimension, :class:`Branch`) are handed out most expensive
first to :func:`~kiln.topi.x86._common.num_threads` threads (:func:`makespan`). A fused
branch runs plain loops (its channel block vectorized, no register tiles), so the work of a
group whose hand schedule is a register-blocked vectorized kernel (:data:`REGISTER_BLOCKED`)
counts :data:`LOST_VECTORIZATION` times in the fused kernel. The groups are fused when the
fused kernel costs less; else the largest keeps its kernel and the rule is tried on the rest.
Branches run most expensive first (the parallel loop hands out the expensive ones first).
On one thread nothing is fused (the fused loop would save nothing and pay the fork/join).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kiln.autotvm.task.dispatcher import has_tuned_config
from kiln.autotvm.task.relay_integration import TUNABLE_OPS, workload_of
from kiln.ir.transform import PassContext
from kiln.target import Target
from kiln.te.tensor import ComputeOp, PlaceholderOp
from kiln.topi.x86._common import PARALLEL_MIN_ELEMS, num_threads

from .graph import Node
from .strategy import group_compute
from .transform import Group

logger = logging.getLogger(__name__)

#: the work (multiply-adds, or output elements) from which a kernel takes a parallel loop
#: (``topi.x86``'s ``worth_parallel``): below it a group is small (one thread runs it) and
#: may become a branch of a fused kernel
PARALLEL_WORK = 4 * PARALLEL_MIN_ELEMS

#: the cost of the fused kernel's fork/join, in work units (multiply-adds of a hand schedule
#: on one core): the x86 rule's break-even (a parallel loop of :data:`PARALLEL_WORK` split
#: over two threads saves half of it), and measured: the inception block's fused kernel
#: (c=32, 8x8) on two threads minus its loops' time on one, 0.9 us, at the 37
#: multiply-adds/ns of its branches' hand schedules (docs/fused_loop.md, "When fusion pays")
FORK_JOIN_WORK = PARALLEL_WORK // 2

#: how many times slower a fused branch runs the work of a group whose hand schedule is a
#: register-blocked vectorized kernel (:data:`REGISTER_BLOCKED`): measured on the inception
#: block's three 1x1 convolutions and layout transform, one thread, 3.7 us fused against
#: 2.2 us in their own kernels, call overheads (0.2 us each) taken out
LOST_VECTORIZATION = 1.65

#: the anchors whose x86 hand schedule is a register-blocked vectorized kernel (the
#: ``topi.x86`` templates of :data:`~kiln.autotvm.task.relay_integration.TUNABLE_OPS`)
REGISTER_BLOCKED = frozenset(TUNABLE_OPS)

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


@dataclass(frozen=True)
class Branch:
    """What the cost rule knows of a small group: its ``work`` (:func:`group_work`), the
    ``rows`` the fused loop hands out (its output's first dimension) and whether its hand
    schedule is register-blocked (:data:`REGISTER_BLOCKED`)."""

    group: Group
    work: int
    rows: int = 1
    register_blocked: bool = False

    @property
    def fused_work(self) -> float:
        """Its work as a branch of the fused loop (plain loops)."""
        return self.work * (LOST_VECTORIZATION if self.register_blocked else 1)


def branch_of(group: Group, work: int) -> Branch:
    """The :class:`Branch` of a small group of ``work``."""
    rows = int(group.output.shape[0]) if group.output.shape else 1
    return Branch(group, work, rows, any(n.op in REGISTER_BLOCKED for n in group.nodes))


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


def _surely_large(group: Group) -> bool:
    """Whether the group's output alone has :data:`PARALLEL_WORK` elements or more: its
    work (at least one unit per output element, :func:`group_work`) is then not small,
    known without building its compute."""
    return math.prod(int(d) for d in group.output.shape) >= PARALLEL_WORK


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
                      target: Target | None = None,
                      work_of: Callable[[Group], int | None] = group_work) -> list[Kernel]:
    """The kernels of ``groups`` (fused groups in a run order) on the CPU ``target``
    (``llvm`` when None): the small untuned groups of each depth fused into one
    :class:`HorizontalGroup` where there are two or more, in a run order. ``views``
    (:func:`.transform.view_groups`) are the reshapes the groups read that need no kernel: a
    read of one is a read of the tensor it views. ``work_of`` is :func:`group_work` or a
    cache of it (``relay.build``'s: :func:`.kernel_cache.cached_group_work`)."""
    views = views or {}
    target = target or Target("llvm")
    depth = group_depths(groups, views)
    small: dict[int, list[Branch]] = {}
    for g in groups:
        if _surely_large(g):
            continue
        work = work_of(g)
        if work is None or work >= PARALLEL_WORK:
            continue
        template = tuned_template(g, target)
        if template is not None:
            logger.debug("horizontal fusion: %s keeps its kernel: a tuning record holds a "
                         "%s config for it, whose schedule tiles and parallelizes its whole "
                         "output; a fused branch's rows are handed out by the fused loop",
                         g.describe(), template)
            continue
        small.setdefault(depth[id(g)], []).append(branch_of(g, work))
    kernel_of: dict[int, Kernel] = {id(g): g for g in groups}
    threads = num_threads()
    for members in small.values():
        members.sort(key=lambda b: -b.work)  # stable: ties keep the run order
        branches = pays(members, threads)
        if branches:
            fused = HorizontalGroup([b.group for b in branches])
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


def pays(members: Sequence[Branch], threads: int) -> list[Branch]:
    """The branches of ``members`` (most work first) worth fusing on ``threads`` threads:
    the first suffix of two or more whose fused kernel (:func:`fused_cost`) costs less than
    running them one after another on one thread (the sum of their work); none if no
    suffix does. Dropping the largest branches first keeps a dominant one in its kernel."""
    for k in range(len(members) - 1):
        rest = members[k:]
        if fused_cost(rest, threads) < sum(b.work for b in rest):
            return list(rest)
    return []


def fused_cost(branches: Sequence[Branch], threads: int) -> float:
    """The fused kernel's cost in work units: its fork/join and its busiest thread."""
    rows = [b.fused_work / b.rows for b in branches for _ in range(b.rows)]
    return FORK_JOIN_WORK + makespan(rows, threads)


def makespan(costs: Sequence[float], threads: int) -> float:
    """The busiest thread's total when ``costs`` are handed out most expensive first, each
    to the least loaded of ``threads`` threads (a parallel loop's dynamic schedule)."""
    loads = [0.0] * max(1, threads)
    for c in sorted(costs, reverse=True):
        heapq.heapreplace(loads, loads[0] + c)
    return max(loads)


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
