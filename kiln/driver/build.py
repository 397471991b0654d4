"""``kiln.build``: lower a schedule, generate code for the target, compile and load it."""

from __future__ import annotations

from kiln.codegen.source_c import generate_c
from kiln.ir.stmt import IRModule, PrimFunc
from kiln.runtime.module import Module
from kiln.target import Target
from kiln.te.schedule import Schedule

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
    entry = funcs[0].name
    source = generate_c(funcs, tgt.kind, entry)
    return Module.from_source(source, [f.name for f in funcs], entry, tgt.kind,
                              flags=tgt.c_flags())
