"""``relay.build``: graph passes, one kernel per fused group (topi compute + x86 schedule),
all kernels compiled into one library, and a static execution plan for the graph executor."""

from __future__ import annotations

import re
import time
import warnings

from kiln import te, topi
from kiln.driver.build import build as kiln_build
from kiln.driver.lower import schedule_to_primfunc
from kiln.ir.stmt import IRModule
from kiln.target import Target

from . import transform as T
from .alter_layout import alter_op_layout
from .executor import GraphExecutorFactoryModule
from .graph import Graph, Module
from .op import OPS


class PassContext:
    """``with relay.build_config(opt_level=3):`` / ``with tvm.transform.PassContext(...)``."""

    _stack: list[PassContext] = []

    def __init__(self, opt_level: int = 2, required_pass=None, disabled_pass=None,
                 config=None, **_ignored) -> None:
        self.opt_level = int(opt_level)
        self.disabled_pass = set(disabled_pass or ())
        self.config = dict(config or {})

    def __enter__(self) -> PassContext:
        PassContext._stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        PassContext._stack.pop()

    @staticmethod
    def current() -> PassContext:
        return PassContext._stack[-1] if PassContext._stack else PassContext(opt_level=3)


def build_config(opt_level: int = 2, **kw) -> PassContext:
    return PassContext(opt_level=opt_level, **kw)


def optimize(mod, params=None, opt_level: int = 3) -> Graph:
    g = mod["main"] if isinstance(mod, Module) else mod
    g = T.bind_params(g, params)
    g = T.fold_constant(g)
    g = T.depthwise_layout(g)
    if opt_level >= 2:
        g = T.fold_batch_norm(g)
    g = T.fold_constant(g)
    return g


def _kernel(group: T.Group, name: str, target: Target):
    """Lower one fused group: placeholders for its external inputs, the topi computes of its
    nodes, the x86 schedule of its anchor (elementwise tails computed inline)."""
    inside = {n.uid for n in group.nodes}
    ext, tens = [], {}
    for n in group.nodes:
        for i in n.inputs:
            if i.uid not in inside and i.uid not in tens:
                tens[i.uid] = te.placeholder(i.shape, dtype=i.dtype, name=f"p{len(ext)}")
                ext.append(i)
        tens[n.uid] = OPS[n.op][0]([tens[i.uid] for i in n.inputs], n.attrs)
    out = tens[group.output.uid]
    args = [tens[i.uid] for i in ext] + [out]
    try:
        # autotvm hook: a tuned config of the group's anchor (apply_history_best), if any
        tuned = _autotvm_schedule(group, [out], target)
        if tuned is not None:
            s, group.tuned = tuned
        else:
            s = topi.x86.schedule_auto([out]) if target.is_cpu else \
                topi.generic.schedule_auto([out])
        func = schedule_to_primfunc(s, args, name)
    except Exception as e:  # a slower but correct default schedule
        warnings.warn(f"relay.build: x86 schedule failed for {group.describe()} ({e}); "
                      f"using the default schedule", stacklevel=2)
        s = topi.generic.schedule_auto([out])
        func = schedule_to_primfunc(s, args, name)
    return func, ext


def _autotvm_schedule(group, outs, target):
    """``(schedule, label)`` when autotvm has a tuned config for ``group`` under the current
    dispatch context (kiln/autotvm/task/relay_integration.py), else None."""
    if not target.is_cpu:
        return None
    from kiln.autotvm.task.relay_integration import schedule_group

    return schedule_group(group, outs, str(target))


def build(mod, target="llvm", target_host=None, params=None, mod_name: str = "default",
          verbose: bool = False):
    """Compile ``mod`` (from a frontend) to a factory module: ``lib["default"](dev)`` gives a
    graph executor module."""
    t0 = time.perf_counter()
    tgt = Target(target if target is not None else "llvm")
    if not tgt.is_cpu:
        raise NotImplementedError("relay.build: only CPU targets (llvm/c) are supported yet")
    ctx = PassContext.current()
    g = optimize(mod, params, ctx.opt_level)
    with tgt:  # the layout pass and the schedules size blocks by the target CPU's vectors
        if ctx.opt_level >= 3 and "AlterOpLayout" not in ctx.disabled_pass:
            g = alter_op_layout(g)
        groups = T.fuse_ops(g, 3 if ctx.opt_level >= 1 else 0)
        funcs, kernels = {}, []
        for k, grp in enumerate(groups):
            name = "kiln_" + re.sub(r"[^A-Za-z0-9_]", "_", "_".join(
                dict.fromkeys(T.op_label(n) for n in grp.nodes))) + f"_{k}"
            func, ext = _kernel(grp, name, tgt)
            funcs[name] = func
            kernels.append((name, ext, grp.output))
    assign, sizes, naive = T.plan_memory(groups, g)
    lib = kiln_build(IRModule(funcs), target=tgt) if funcs else None
    factory = GraphExecutorFactoryModule.from_plan(g, kernels, assign, sizes, lib, mod_name)
    factory.summary = _summary(groups, sizes, naive, g)
    factory.build_seconds = time.perf_counter() - t0
    if verbose:
        print(factory.summary)
    return factory


def _summary(groups, sizes, naive, g) -> str:
    lines = [f"{len(groups)} kernels from {sum(len(x.nodes) for x in groups)} operators:"]
    for k, grp in enumerate(groups):
        lay = f" {grp.output.layout}" if grp.output.layout else ""
        tuned = f"  (autotvm: {grp.tuned})" if getattr(grp, "tuned", None) else ""
        lines.append(f"  #{k:<3d} {grp.describe()}  -> {list(grp.output.shape)}{lay}{tuned}")
    outb = sum(o.nbytes for o in g.outputs)
    lines.append(f"memory plan: {len(sizes)} intermediate buffers, {sum(sizes)} bytes planned "
                 f"(peak), {naive} bytes without reuse; outputs {outb} bytes")
    return "\n".join(lines)
