"""``kiln.build``: lower a schedule, generate code for the target, compile and load it."""

from __future__ import annotations

from kiln.codegen.source_c import generate_c
from kiln.ir.stmt import IRModule, PrimFunc
from kiln.runtime.module import Module
from kiln.target import Target
from kiln.te.schedule import Schedule
from kiln.tir import passes

from .lower import lower


def build(inputs, args=None, target="llvm", target_host=None, name: str = "default_function",
          binds=None):
    """Compile a schedule (or a lowered IRModule/PrimFunc) to a runtime Module.

    ``mod = kiln.build(s, [A, B, C])`` then ``mod(a, b, c)`` with NDArrays.
    """
    tgt = Target(target if target is not None else (Target.current() or "llvm"))
    if isinstance(inputs, Schedule):
        mod = lower(inputs, args, name=name, binds=binds)
    elif isinstance(inputs, PrimFunc):
        mod = IRModule({inputs.name: inputs})
    elif isinstance(inputs, IRModule):
        mod = inputs
    else:
        raise TypeError(f"build expects a te.Schedule or an IRModule, got {type(inputs).__name__}")
    funcs = list(mod.functions.values())
    if not tgt.is_cpu:
        from kiln.codegen import cuda_build

        return cuda_build.build(funcs, tgt)
    funcs = [_prepare_for_c(f) for f in funcs]
    entry = funcs[0].name
    source = generate_c(funcs, tgt.kind, entry)
    return Module.from_source(source, [f.name for f in funcs], entry, tgt.kind,
                              flags=tgt.c_flags())


def _prepare_for_c(func: PrimFunc) -> PrimFunc:
    """Run the C backend's own passes (``kiln.tir.passes.C_PIPELINE``) on a lowered function."""
    body = func.body
    for _name, fn in passes.C_PIPELINE:
        body = fn(body)
    return func if body is func.body else func.with_body(body)
