"""Op strategy (TVM's ``relay.op.strategy``): the one place that chooses the compute and the
schedule of a fused group's kernel.

:func:`select_implementation` builds the group's compute — the topi compute of each of its
operators (``op.OPS``, or the target's own compute of the anchor where a rung names one) on
placeholders of the group's external inputs — and schedules it with the first rung of the
target's ladder that applies.

On a CPU target (``llvm``, ``c``):

0. **auto_scheduler record**: under ``PassContext(config={"relay.backend.use_auto_scheduler":
   True})`` and inside ``auto_scheduler.ApplyHistoryBest(log)`` that holds a state for the
   group's computation (its DAG's workload key, as ``auto_scheduler.extract_tasks`` made
   it): that state replayed (:func:`kiln.auto_scheduler.schedule_from_history`), its
   constant weights re-laid out now for its tiling (new constants the kernel takes);
1. **tuned record**: inside an autotvm dispatch context (``autotvm.apply_history_best(log)``,
   ``autotvm.ApplyConfig(cfg)``) that holds a config for the workload of the group's
   tunable anchor (``conv2d_NCHWc``, ``depthwise_conv2d_NCHWc``, ``dense``): the template's
   schedule with that config (:func:`kiln.autotvm.task.relay_integration.schedule_group`);
2. **the hand schedule** ``topi.x86.schedule_auto``;
3. **the generic schedule** ``topi.generic.schedule_auto``: every stage at the root,
   injective stages inlined; it applies to every group.

On a GPU target (``cuda``, ``nvptx``; layouts stay NCHW):

0. **auto_scheduler record**: as on a CPU, a GPU state of the group's computation (topi.nn's
   computes, as ``auto_scheduler.extract_tasks(..., target="cuda")`` made it) replayed;
1. **topi.cuda**: the anchor's compute and schedule looked up by TVM's names in
   ``kiln.topi.cuda`` when the group is scheduled (:data:`CUDA_SCHEDULES`,
   :data:`CUDA_COMPUTES`: ``conv2d_nchw_implicit_gemm`` (``conv2d_nchw``, the direct
   template, where tuning records hold a config for it, :func:`cuda_conv2d_nchw`) +
   ``schedule_conv2d_nchw``, ``dense`` +
   ``schedule_dense``, ``schedule_depthwise_conv2d_nchw``, ``schedule_pool``, ...;
   ``schedule_injective`` for a group of injective operators). A name topi.cuda does not
   define is replaced by topi.nn's compute and ``schedule_per_thread``. These schedules
   compute the anchor and inline its elementwise epilogue (bias, residual add, relu), so the
   group stays one kernel; autotvm templates among them read the dispatch context
   themselves (tuned record, else their fallback config);
2. **one thread per output** ``topi.cuda.schedule_per_thread`` of topi.nn's computes; it
   applies to every group.

A horizontal group (:mod:`.horizontal_fusion`: independent groups of one depth) is one
kernel, :func:`schedule_branches` (``create_fused_loop`` over the groups' outputs);
:func:`select_implementations` falls back to one kernel per group, logged, where it does not
apply.

A schedule *applies* when it schedules the group and the schedule lowers to a PrimFunc. A
schedule that does not apply raises one of :data:`NOT_APPLICABLE` (an illegal primitive or
a bound it cannot infer: ``ScheduleError``/``TVMError``; a case it does not implement:
``NotImplementedError``); the strategy then logs a warning on the ``kiln.relay.strategy``
logger naming the group, the schedule and the reason, and tries the next one. Any other
exception is a bug in a schedule and propagates out of ``relay.build``.

Guarantee: the returned implementation's PrimFunc computes exactly the group's operators
(a schedule never changes results; a target's compute computes what topi.nn's does); its
arguments are the placeholders of the group's external inputs, in first-use order, then the
group's output.
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kiln import autotvm, te, topi
from kiln.auto_scheduler import schedule_from_history
from kiln.autotvm.task.dispatcher import has_tuned_config
from kiln.autotvm.task.relay_integration import schedule_group
from kiln.driver.lower import schedule_to_primfunc
from kiln.errors import TVMError
from kiln.ir.expr import IntImm
from kiln.ir.stmt import PrimFunc
from kiln.ir.transform import PassContext
from kiln.target import Target
from kiln.topi.cuda import conv2d_gemm

from .graph import Node
from .op import INJECTIVE, OPS, pattern
from .transform import Group, op_label

if TYPE_CHECKING:  # the pass imports this module
    from .horizontal_fusion import HorizontalGroup, Kernel

logger = logging.getLogger(__name__)

#: the errors by which a schedule says it does not apply to a group (ScheduleError is a
#: TVMError); anything else is a bug and is not caught
NOT_APPLICABLE: tuple[type[Exception], ...] = (TVMError, NotImplementedError)

#: a schedule of the ladder: output tensors -> ``(schedule, autotvm label or None)``, or None
#: when it has nothing for the group (no tuned record); an auto_scheduler state that
#: re-lays out weights adds the arguments it replaces (:func:`_replace_arguments`)
ScheduleRule = Callable[[list[te.Tensor]], tuple | None]

#: an operator's compute: input tensors, attributes -> output tensor (as in ``op.OPS``)
ComputeRule = Callable[[list[te.Tensor], dict], te.Tensor]

#: the anchor of a GPU group (its operator, ``transform.op_label``) -> the name of its
#: schedule in ``kiln.topi.cuda``; a group of injective operators uses ``schedule_injective``
CUDA_SCHEDULES: dict[str, str] = {
    "conv2d": "schedule_conv2d_nchw",
    "depthwise_conv2d": "schedule_depthwise_conv2d_nchw",
    "group_conv2d": "schedule_group_conv2d_nchw",
    "dense": "schedule_dense",
    "matmul": "schedule_matmul",
    "max_pool2d": "schedule_pool",
    "avg_pool2d": "schedule_pool",
    "global_avg_pool2d": "schedule_adaptive_pool",
    "softmax": "schedule_softmax",
}

def cuda_conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype="float32"):
    """The compute of a plain CUDA convolution in a relay graph: the template tuning records
    hold a config for (``topi.cuda.conv2d_nchw``, the direct one, first; then
    ``topi.cuda.conv2d_nchw_implicit_gemm``), else the one whose fallback config is faster
    at its shape (:func:`kiln.topi.cuda.conv2d_gemm.prefers_implicit_gemm`)."""
    args = (data, kernel, strides, padding, dilation, out_dtype)
    workload = autotvm.task.args_to_workload(args)
    target = Target.current()
    if has_tuned_config(target, (topi.cuda.conv2d.CONV2D_NCHW, *workload)):
        return topi.cuda.conv2d_nchw(*args)
    if has_tuned_config(target, (conv2d_gemm.CONV2D_GEMM, *workload)) or \
            conv2d_gemm.prefers_implicit_gemm(data, kernel, strides, padding, dilation):
        return topi.cuda.conv2d_nchw_implicit_gemm(*args)
    return topi.cuda.conv2d_nchw(*args)


#: relay operator -> ``{keyword of its op.py compute: the kiln.topi.cuda compute}`` (its name
#: in kiln.topi.cuda, or a function choosing among them): the GPU computes that replace
#: topi.nn's (an autotvm template's compute goes with its schedule)
CUDA_COMPUTES: dict[str, dict[str, str | ComputeRule]] = {
    "conv2d": {"conv2d_nchw": cuda_conv2d_nchw,
               "depthwise_conv2d_nchw": "depthwise_conv2d_nchw"},
    "dense": {"dense_compute": "dense"},
}


@dataclass(frozen=True)
class Rung:
    """One rung of a target's ladder: its name (in logs and ``Implementation.schedule_name``),
    its schedule, and the computes it needs instead of ``op.OPS``'s, by relay operator."""

    name: str
    schedule: ScheduleRule
    computes: Mapping[str, ComputeRule] = field(default_factory=dict)


@dataclass(frozen=True)
class Implementation:
    """A fused group's kernel: its compute (``args``: placeholders of the group's external
    ``inputs``, then its output), the schedule chosen for it, that schedule lowered, and the
    name of the schedule (``tuned`` names the autotvm template and config, or the
    auto_scheduler state, when a tuning record chose it)."""

    group: Group | HorizontalGroup
    inputs: list[Node]
    args: list[te.Tensor]
    schedule: te.Schedule
    func: PrimFunc
    schedule_name: str
    tuned: str | None = None


def group_compute(group: Group | HorizontalGroup,
                  computes: Mapping[str, ComputeRule] | None = None
                  ) -> tuple[list[Node], list[te.Tensor]]:
    """The group's external input nodes, and its compute's arguments: a placeholder per
    external input (``p0``, ``p1`` ... in first-use order), then the group's output tensor.
    ``computes`` replaces the compute of the relay operators it names."""
    computes = computes or {}
    inputs = external_inputs(group)
    tensors: dict[int, te.Tensor] = {
        i.uid: te.placeholder(i.shape, dtype=i.dtype, name=f"p{k}") for k, i in enumerate(inputs)}
    for n in group.nodes:
        compute = computes.get(n.op, OPS[n.op][0])
        tensors[n.uid] = compute([tensors[i.uid] for i in n.inputs], n.attrs)
    return inputs, [tensors[i.uid] for i in inputs] + [tensors[o.uid] for o in group.outputs]


def external_inputs(group: Group | HorizontalGroup) -> list[Node]:
    """The values the group reads that it does not compute, in first-use order: its
    kernel's first arguments."""
    inside = {n.uid for n in group.nodes}
    found: dict[int, Node] = {}
    for n in group.nodes:
        for i in n.inputs:
            if i.uid not in inside:
                found.setdefault(i.uid, i)
    return list(found.values())


def _anchor_label(group: Group) -> str | None:
    """The operator of the group's anchor (its first operator of the group's pattern), or
    None for a group of injective operators."""
    if group.anchor_pattern <= INJECTIVE:
        return None
    return next(op_label(n) for n in group.nodes
                if pattern(n.op) == group.anchor_pattern)


def cuda_schedule(group: Group) -> Callable[[list[te.Tensor]], te.Schedule]:
    """The ``kiln.topi.cuda`` schedule of ``group``'s anchor, looked up by name now (so a
    schedule that lands later is used), ``schedule_per_thread`` when topi.cuda has none."""
    label = _anchor_label(group)
    name = "schedule_injective" if label is None else CUDA_SCHEDULES.get(label, "")
    return getattr(topi.cuda, name, None) or topi.cuda.schedule_per_thread


def cuda_computes() -> dict[str, ComputeRule]:
    """The relay operators' computes with ``kiln.topi.cuda``'s computes where it has them
    (looked up by name now), topi.nn's elsewhere."""
    out: dict[str, ComputeRule] = {}
    for op_name, names in CUDA_COMPUTES.items():
        found = {kw: getattr(topi.cuda, name, None) if isinstance(name, str) else name
                 for kw, name in names.items()}
        found = {kw: compute for kw, compute in found.items() if callable(compute)}
        if found:
            out[op_name] = functools.partial(OPS[op_name][0], **found)
    return out


def _static_shapes_only(schedule: Callable[[list[te.Tensor]], te.Schedule]
                        ) -> Callable[[list[te.Tensor]], te.Schedule]:
    """``schedule``, saying it does not apply (``NotImplementedError``) where it needs a
    constant that a symbolic dimension of the group's output leaves unknown (its tile sizes
    and register blocks are chosen from the shape)."""
    def apply(outs: list[te.Tensor]) -> te.Schedule:
        try:
            return schedule(outs)
        except (ValueError, TypeError) as e:
            dims = [d for d in outs[0].shape if not isinstance(d, IntImm)]
            if not dims:
                raise
            raise NotImplementedError(f"{schedule.__name__} needs a constant where the "
                                      f"symbolic dimension {dims[0]} is ({e})") from e

    return apply


def _ladder(group: Group, target: Target) -> list[Rung]:
    """The rungs to try for ``group`` on ``target``, in the documented order; the last one
    applies to every group."""
    def tuned(outs):
        return schedule_group(group, outs, str(target))

    def auto_scheduled(outs):
        if not PassContext.current().config.get("relay.backend.use_auto_scheduler"):
            return None
        constants = {f"p{k}": n.value for k, n in enumerate(external_inputs(group))
                     if n.is_const}  # placeholder names as group_compute gives them
        return schedule_from_history(outs, str(target), constants)

    def untuned(schedule):
        return lambda outs: (schedule(outs), None)

    if target.is_cpu:
        return [Rung("auto_scheduler", auto_scheduled), Rung("autotvm", tuned),
                Rung("x86", untuned(_static_shapes_only(topi.x86.schedule_auto))),
                Rung("generic", untuned(topi.generic.schedule_auto))]
    return [Rung("auto_scheduler", auto_scheduled),
            Rung("topi.cuda", untuned(cuda_schedule(group)), cuda_computes()),
            Rung("per_thread", untuned(topi.cuda.schedule_per_thread))]


def _lower(group: Group, rung: Rung, name: str,
           computed: dict | None = None) -> Implementation | None:
    """The implementation of ``group`` under ``rung`` (its PrimFunc named ``name``), or None
    when the rung has no schedule for it. ``computed`` keeps the group's compute for the
    next rung with the same computes (a schedule never changes the tensors it schedules)."""
    computed = {} if computed is None else computed
    key = frozenset(rung.computes.items())
    if key not in computed:
        computed[key] = group_compute(group, rung.computes)
    inputs, args = computed[key]
    chosen = rung.schedule(args[-1:])
    if chosen is None:
        return None
    s, tuned, *replaced = chosen
    if replaced:  # an auto_scheduler state took weights re-laid out now, at compile time
        inputs, args = _replace_arguments(inputs, args, replaced[0])
    return Implementation(group, inputs, args, s, schedule_to_primfunc(s, args, name),
                          rung.name, tuned)


def _replace_arguments(inputs: list[Node], args: list[te.Tensor],
                       replaced: dict[te.Tensor, tuple[te.Tensor, object]]
                       ) -> tuple[list[Node], list[te.Tensor]]:
    """The kernel's input nodes and arguments where a schedule takes some arguments in
    another form (``replaced``: tensor -> its replacement and, for a weight transformed
    now, the new constant's value, which becomes a constant node of its own)."""
    nodes = []
    for n, t in zip(inputs, args, strict=False):
        new, value = replaced.get(t, (t, None))
        nodes.append(n if value is None else Node("const", shape=tuple(value.shape),
                                                  dtype=n.dtype, name=new.op.name, value=value))
    return nodes, [replaced.get(t, (t, None))[0] for t in args]


def select_implementation(group: Group, name: str, target: Target) -> Implementation:
    """The kernel of ``group`` on ``target`` as a PrimFunc named ``name``: its compute
    scheduled by the first rung that applies (see the module doc for the order)."""
    ladder = _ladder(group, target)
    computed: dict = {}
    for k, rung in enumerate(ladder[:-1]):
        try:
            impl = _lower(group, rung, name, computed)
        except NOT_APPLICABLE as e:
            logger.warning("relay.build: %s schedule failed for %s (%s: %s); using the %s "
                           "schedule", rung.name, group.describe(), type(e).__name__, e,
                           ladder[k + 1].name)
            continue
        if impl is not None:
            return impl
    return _lower(group, ladder[-1], name, computed)  # applies to every group: its errors propagate


def select_implementations(kernel: Kernel, name: str, target: Target) -> list[Implementation]:
    """The kernels that compute ``kernel`` (one of ``relay.build``'s run order): a fused
    group's (:func:`select_implementation`), or a horizontal group's one fused kernel
    (:func:`schedule_branches`; its arguments the placeholders of the groups' external
    inputs, then the fused outputs standing for the groups' outputs). Where that schedule
    does not apply (logged), each group of it gets its own kernel, ``<name>_<k>``."""
    if isinstance(kernel, Group):
        return [select_implementation(kernel, name, target)]
    inputs, args = group_compute(kernel)
    try:
        s, fused = schedule_branches(args[len(inputs):])
        func = schedule_to_primfunc(s, args[:len(inputs)] + fused, name)
    except NOT_APPLICABLE as e:
        logger.warning("relay.build: horizontal fusion failed for %s (%s: %s); one kernel "
                       "per group", kernel.describe(), type(e).__name__, e)
        return [select_implementation(g, f"{name}_{k}", target)
                for k, g in enumerate(kernel.groups)]
    return [Implementation(kernel, inputs, args[:len(inputs)] + fused, s, func, "horizontal")]


def schedule_branches(outs: list[te.Tensor]) -> tuple[te.Schedule, list[te.Tensor]]:
    """One kernel computing the independent ``outs`` side by side: a parallel loop over the
    rows (first dimensions) of all of them, end to end (``s.create_fused_loop``), each
    iteration computing one row of one output; in each branch the injective stages are
    inlined and the others (reductions: convolutions, pooling, dense) computed once per row.
    Returns the schedule and the fused outputs that stand for ``outs`` (the kernel's output
    arguments, stored without a copy).

    ``create_fused_loop`` fuses stages that a later stage reads: the schedule's root is a
    one-element local stage reading the first element of each output (``hfuse_sink``)."""
    def first(t: te.Tensor):
        return t[(0,) * len(t.shape)].astype("float32")

    sink = te.compute((1,), lambda _: functools.reduce(operator.add, map(first, outs)),
                      name="hfuse_sink")
    s = te.create_schedule(sink.op)
    branches = []
    for out in outs:
        stages = _compute_stages(out)
        for op in stages[:-1]:
            if not op.reduce_axis:
                s[op].compute_inline()
        branches.append([op.output(0) for op in stages if op.reduce_axis or op is out.op])
    fused = s.create_fused_loop(branches, outs, [t.shape[0] for t in outs], name="hfuse")
    s[fused[0]].parallel(fused[0].op.loop_axis)
    for tensors in branches:
        for t in tensors:
            _vectorize_last_axis(s[t])
    return s, fused


def _vectorize_last_axis(stage: te.Stage) -> None:
    """Vectorize the stage's last data axis (a channel block, a row) when its extent is a
    vector's (2 to 16 lanes), the reduction axes moved outside it."""
    axes = stage.op.axis
    extent = axes[-1].dom.extent
    if len(axes) < 2 or not isinstance(extent, IntImm) or not 2 <= extent.value <= 16:
        return
    stage.reorder(*axes[1:-1], *stage.op.reduce_axis, axes[-1])
    stage.vectorize(axes[-1])


def _compute_stages(out: te.Tensor) -> list[te.ComputeOp]:
    """The compute operations ``out`` is made of, producers first, ``out.op`` last."""
    order: list[te.ComputeOp] = []

    def visit(op) -> None:
        if isinstance(op, te.ComputeOp) and op not in order:
            for t in op.input_tensors:
                visit(t.op)
            order.append(op)

    visit(out.op)
    return order
