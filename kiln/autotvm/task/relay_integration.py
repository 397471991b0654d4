"""AutoTVM and the graph compiler: tasks from a ``kiln.relay`` model, tuned configs in
``relay.build``.

* :func:`extract_from_program` runs the front half of ``relay.build``
  (``relay.build_module.optimize_and_fuse``: the graph passes, the layout pass, fusion)
  and returns one tuning task per distinct workload of a tunable kernel (``conv2d_NCHWc``,
  ``depthwise_conv2d_NCHWc``, ``dense``, ``dense_pack``; the templates are in
  :mod:`kiln.topi.x86.tunable`). A task's workload is the kernel's anchor operator alone
  (shapes, strides, padding, dilation, dtype); ``task.num_uses`` counts the kernels of the
  graph that share it.
* :func:`schedule_group` is the first rung of the op strategy (``kiln.relay.strategy``):
  inside a dispatch context that has a config for the group's workload (``with
  autotvm.apply_history_best(log):``), the group (anchor + elementwise epilogue) is
  scheduled by the template's schedule with that config; otherwise it returns None and the
  strategy goes on to the hand schedule, as without autotvm.

kiln.relay is imported lazily: ``import kiln`` does not pay for the graph compiler.
"""

from __future__ import annotations

from .dispatcher import DispatchContext, FallbackContext
from .task import args_to_workload, create

__all__ = ["TUNABLE_OPS", "extract_from_program", "task_args", "workload_of",
           "schedule_group"]

#: relay operator -> autotvm template (see kiln/topi/x86/tunable.py)
TUNABLE_OPS = {"conv2d_NCHWc": "conv2d_NCHWc.x86",
               "depthwise_conv2d_NCHWc": "depthwise_conv2d_NCHWc.x86",
               "dense": "dense.x86", "dense_pack": "dense_pack.x86"}

#: names ``ops=`` accepts (TVM's op names too) -> the relay operators they select
_OP_ALIASES = {
    "conv2d": ("conv2d_NCHWc", "depthwise_conv2d_NCHWc"),
    "nn.conv2d": ("conv2d_NCHWc", "depthwise_conv2d_NCHWc"),
    "conv2d_NCHWc": ("conv2d_NCHWc",), "nn.contrib_conv2d_NCHWc": ("conv2d_NCHWc",),
    "depthwise_conv2d": ("depthwise_conv2d_NCHWc",),
    "depthwise_conv2d_NCHWc": ("depthwise_conv2d_NCHWc",),
    "dense": ("dense", "dense_pack"), "nn.dense": ("dense", "dense_pack"),
    "dense_pack": ("dense_pack",),
}


def _register_templates() -> None:
    from kiln.topi.x86 import tunable  # noqa: F401 - registers the templates


def _selected_ops(ops) -> set[str]:
    if ops is None:
        return set(TUNABLE_OPS)
    if isinstance(ops, str):
        ops = [ops]
    out: set[str] = set()
    for op in ops:
        name = getattr(op, "name", op)
        if name not in _OP_ALIASES:
            raise ValueError(f"extract_from_program: operator {name!r} has no tunable template "
                             f"(tunable: {', '.join(sorted(_OP_ALIASES))})")
        out.update(_OP_ALIASES[name])
    return out


def task_args(node) -> tuple[str, tuple]:
    """``(template name, template arguments)`` of a graph node of a tunable operator (the
    tensors as placeholders of the node's input shapes)."""
    from kiln import te

    if node.op not in TUNABLE_OPS:
        raise ValueError(f"operator {node.op!r} has no tunable template")
    data, weight = node.inputs[0], node.inputs[1]
    d = te.placeholder(data.shape, dtype=data.dtype, name="data")
    w = te.placeholder(weight.shape, dtype=weight.dtype, name="weight")
    if node.op == "dense":
        return TUNABLE_OPS[node.op], (d, w, node.dtype)
    if node.op == "dense_pack":
        a = node.attrs
        return TUNABLE_OPS[node.op], (d, w, a["units"], a.get("data_layout"),
                                      a.get("out_layout"), node.dtype)
    a = node.attrs
    return TUNABLE_OPS[node.op], (d, w, tuple(a["strides"]), tuple(a["padding"]),
                                  tuple(a["dilation"]), node.dtype)


def workload_of(node) -> tuple:
    """The workload (tuning-record key) of a tunable graph node."""
    name, args = task_args(node)
    return (name, *args_to_workload(args))


def _anchor(nodes):
    """The tunable operator of a fused group (None when it has none; an operator over
    symbolic shapes has no workload)."""
    return next((n for n in nodes if n.op in TUNABLE_OPS and n.is_static), None)


def schedule_group(group, outs, target):
    """The op strategy's tuned-record rung: ``(schedule, label)`` for fused ``group``
    (computing ``outs``) when the current dispatch context has a tuned config for its
    anchor's workload, else None (the strategy uses the hand schedule). ``label`` names the
    template and the config index, for the build summary."""
    ctx = DispatchContext.current()
    if isinstance(ctx, FallbackContext):  # no apply_history_best / ApplyConfig around
        return None
    node = _anchor(group.nodes)
    if node is None:
        return None
    _register_templates()
    from kiln.topi.x86.tunable import SCHEDULE_CFG

    name = TUNABLE_OPS[node.op]
    cfg = ctx.query(target, workload_of(node))
    if cfg is None or cfg.is_fallback:
        return None
    return SCHEDULE_CFG[name](cfg, outs), f"{name} config #{cfg.index}"


def _tunable_anchors(mod, params, target) -> list:
    """The tunable anchors of the kernels ``relay.build`` compiles ``mod`` into, one per
    kernel, in graph order."""
    from kiln.relay.build_module import optimize_and_fuse
    from kiln.relay.graph import Graph, Module
    from kiln.target import Target

    if not isinstance(mod, Module | Graph):
        raise TypeError(f"extract_from_program needs a kiln.relay module (from "
                        f"relay.frontend.from_onnx), got {type(mod).__name__}")
    tgt = Target(target or "llvm")
    if not tgt.is_cpu:
        raise NotImplementedError("extract_from_program: only CPU targets (llvm/c) have "
                                  "tunable templates yet")
    g, groups = optimize_and_fuse(mod, params, tgt)
    position = {n.uid: k for k, n in enumerate(g.nodes)}
    anchors = (_anchor(group.nodes) for group in groups)
    return sorted((a for a in anchors if a is not None), key=lambda a: position[a.uid])


def extract_from_program(mod, params, target="llvm", target_host=None, ops=None) -> list:
    """Tuning tasks of a kiln.relay model: one per distinct workload of its tunable
    kernels (``ops`` selects operators: ``"conv2d"``/``"nn.conv2d"``,
    ``"depthwise_conv2d"``, ``"dense"``/``"nn.dense"`` ...; None = all), in graph order.
    Each task has ``flop`` (one kernel call) and ``num_uses`` (kernels sharing it)."""
    del target_host
    _register_templates()
    wanted = _selected_ops(ops)
    tasks: dict[tuple, object] = {}
    for node in _tunable_anchors(mod, params, target):
        if node.op not in wanted:
            continue
        key = workload_of(node)
        if key in tasks:
            tasks[key].num_uses += 1
            continue
        name, args = task_args(node)
        task = create(name, args, target=target or "llvm")
        task.num_uses = 1
        tasks[key] = task
    return list(tasks.values())
