"""``relay.build``: graph passes (:func:`optimize_and_fuse`, the front half, which
``autotvm.task.extract_from_program`` shares), one kernel per fused group (its compute and
schedule chosen by the op strategy, :mod:`.strategy`), all kernels compiled into one
library, and a static execution plan for the graph executor.

Targets: a CPU (``llvm``, ``c``: one C library) or an NVIDIA GPU (``cuda``: the kernels'
CUDA C compiled by NVRTC in one device module, their host side run by kiln's CUDA runtime;
the graph's tensors then live on the GPU)."""

from __future__ import annotations

import re
import time

from kiln.driver.build import build as kiln_build
from kiln.ir.stmt import IRModule
from kiln.ir.transform import PassContext
from kiln.runtime.graph_executor import GraphExecutorFactoryModule
from kiln.runtime.module import Module as RuntimeModule
from kiln.target import Target

from . import transform as T
from .alter_layout import alter_op_layout
from .combine_layer_norm import combine_layer_norm
from .execution_plan import execution_plan
from .graph import Graph, Module
from .head_layout import fold_head_transpose
from .horizontal_fusion import Kernel, horizontal_fusion, is_enabled
from .kernel_cache import CompiledKernel, build_kernels, cached_group_work
from .mixed_precision import apply_configured, precision_context
from .quantize import fake_quantization_to_integer
from .row_blocks import RowBlocks, row_blocks
from .sink_reshape import sink_reshape
from .strategy import Implementation, select_implementations


def build_config(opt_level: int = 2, **kw) -> PassContext:
    return PassContext(opt_level=opt_level, **kw)


def optimize(mod, params=None, opt_level: int = 3) -> Graph:
    g = mod["main"] if isinstance(mod, Module) else mod
    g = T.bind_params(g, params)
    g = fake_quantization_to_integer(g)  # before folding turns int8 weights into float
    g = T.fold_constant(g)
    g = T.depthwise_layout(g)
    if opt_level >= 2:
        g = T.fold_batch_norm(g)
    g = T.fold_constant(g)
    if opt_level >= 1:
        g = sink_reshape(combine_layer_norm(g))
    return g


def optimize_and_fuse(mod, params, target: Target) -> tuple[Graph, list[T.Group]]:
    """The front half of ``relay.build``, under the current ``PassContext``: the graph passes
    (:func:`optimize`), the layout pass at ``opt_level`` 3 (unless ``AlterOpLayout`` is
    disabled; CPU targets only: GPU kernels keep the NCHW layout) and fusion (none at
    ``opt_level`` 0), the layout pass sizing its blocks by ``target``'s vectors. Returns the
    optimized graph and its fused groups in run order: one group per kernel ``relay.build``
    compiles. The precision pass (:mod:`.mixed_precision`) runs first under ``target``, when
    the context names a precision."""
    ctx = PassContext.current()
    g = optimize(mod, params, ctx.opt_level)
    with target:
        g = apply_configured(g, target)
        if (target.is_cpu and ctx.opt_level >= 3
                and "AlterOpLayout" not in ctx.disabled_pass):
            g = fold_head_transpose(alter_op_layout(g))
        return g, T.fuse_ops(g, 3 if ctx.opt_level >= 1 else 0)


def _kernel_name(k: int, group: Kernel) -> str:
    """``kiln_conv2d_NCHWc_add_relu_3``: the kernel's distinct operators and its index."""
    ops = "_".join(dict.fromkeys(T.op_label(n) for n in group.nodes))
    return "kiln_" + re.sub(r"[^A-Za-z0-9_]", "_", ops) + f"_{k}"


def build(mod, target="llvm", target_host=None, params=None, mod_name: str = "default",
          verbose: bool = False, precision: str | None = None):
    """Compile ``mod`` (from a frontend) for ``target`` (``"llvm"``, ``"c"``, ``"cuda"``...)
    to a factory module: ``lib["default"](dev)`` gives a graph executor module on ``dev``
    (``kiln.cpu(0)``, or ``kiln.cuda(0)`` for a GPU target). ``precision="bf16"`` computes
    the convolutions and dense layers in bf16 on CPUs that have it (``"fp32"``: not; None:
    as the ``PassContext`` says; docs/precision.md)."""
    if precision is not None:
        with precision_context(precision):
            return build(mod, target, target_host, params, mod_name, verbose)
    t0 = time.perf_counter()
    tgt = Target(target if target is not None else "llvm")
    g, groups = optimize_and_fuse(mod, params, tgt)
    static = all(n.is_static for n in g.nodes)
    if not static and not tgt.is_cpu:
        raise NotImplementedError(f"relay.build: a graph with symbolic dimensions "
                                  f"({', '.join(g.symbolic_dims())}) compiles for CPU "
                                  f"targets only, not "
                                  f"{tgt.kind}; give them values with from_onnx(shape=...)")
    views = T.view_groups(groups, g) if static else {}  # reshapes that need no kernel
    groups = [grp for grp in groups if grp.output.uid not in views]
    if static and is_enabled(PassContext.current(), tgt):
        # fused and horizontal groups; the groups' work cached under their kernel keys
        groups = horizontal_fusion(groups, views, tgt, cached_group_work(tgt))
    names = [_kernel_name(k, grp) for k, grp in enumerate(groups)]
    rows: dict[str, RowBlocks] = {}  # a group over a symbolic leading dim: row kernels
    with tgt:  # the schedules size their blocks by the target's vectors or threads
        if static and tgt.is_cpu and groups:  # kernels compiled apart, cached by their key
            lib, compiled = build_kernels(groups, names, tgt)
        else:
            lib, compiled = _build_together(groups, names, tgt, static, rows)
    # a graph with symbolic dimensions is planned at run time, for each input shape
    assign, sizes, naive = T.plan_memory(groups, g, views) if static else ({}, None, None)
    kernels = [(c.name, c.inputs, c.group.outputs) for c in compiled]
    plan, consts = execution_plan(g, kernels, assign, sizes, mod_name,
                                  "cpu" if tgt.is_cpu else "cuda",
                                  None if static else T.lifetimes(groups, g),
                                  {name: b.step for name, b in rows.items()})
    factory = GraphExecutorFactoryModule(plan, lib, consts)
    factory.summary = _summary(compiled, sizes, naive, g, rows)
    factory.build_seconds = time.perf_counter() - t0
    if verbose:
        print(factory.summary)
    return factory


def _build_together(groups: list[Kernel], names: list[str], tgt: Target, static: bool,
                    rows: dict[str, RowBlocks]
                    ) -> tuple[RuntimeModule | None, list[CompiledKernel]]:
    """One library of the kernels of ``groups`` (GPU targets, symbolic shapes), lowered and
    compiled together, not cached before lowering; a group over a symbolic leading
    dimension gets row-blocked kernels, recorded in ``rows`` under its function's name."""
    impls: list[Implementation] = []
    for grp, name in zip(groups, names, strict=True):
        blocked = None if static else row_blocks(grp, name, tgt)
        if blocked is None:
            impls += select_implementations(grp, name, tgt)
        else:
            impls.append(blocked.implementation)
            rows[blocked.implementation.func.name] = blocked
    funcs = {impl.func.name: impl.func for impl in impls}
    funcs.update({i.func.name: i.func for b in rows.values() for _, i in b.blocks})
    lib = kiln_build(IRModule(funcs), target=tgt) if funcs else None
    return lib, [CompiledKernel.of(impl) for impl in impls]


def _summary(compiled: list[CompiledKernel], sizes, naive, g,
             rows: dict[str, RowBlocks]) -> str:
    groups = [c.group for c in compiled]
    lines = [f"{len(groups)} kernels from {sum(len(x.nodes) for x in groups)} operators:"]
    for k, impl in enumerate(compiled):
        outs = ", ".join(f"{list(o.shape)}{' ' + o.layout if o.layout else ''}"
                         for o in impl.group.outputs)
        tuned = f"  ({impl.schedule_name}: {impl.tuned})" if impl.tuned else ""
        if impl.name in rows:
            counts = "/".join(str(r) for r, _ in rows[impl.name].blocks)
            tuned += f"  (blocks of {counts} rows)"
        lines.append(f"  #{k:<3d} {impl.group.describe()}  -> {outs}{tuned}")
    if sizes is None:
        lines.append(f"memory plan: at run time, for each value of the symbolic dimensions "
                     f"{', '.join(g.symbolic_dims())}")
        return "\n".join(lines)
    outb = sum(o.nbytes for o in g.outputs)
    lines.append(f"memory plan: {len(sizes)} intermediate buffers, {sum(sizes)} bytes planned "
                 f"(peak), {naive} bytes without reuse; outputs {outb} bytes")
    return "\n".join(lines)
