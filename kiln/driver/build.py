"""``kiln.build``: lower a schedule, run the target's phases, generate code, compile, load.

The steps are the same for every target: ``lower`` (``pipeline.LOWER_PHASES``), the target
phases (``pipeline.TARGET_PHASES[backend.name]``), then the backend of the target's kind
(``kiln.codegen.backend``) writes the source and compiles it into a runtime module.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.codegen.backend import Backend, backend_for
from kiln.ir.stmt import IRModule, PrimFunc
from kiln.ir.transform import PassContext
from kiln.runtime.sanitize import SANITIZE_CONFIG, parse_sanitizers
from kiln.target import Target
from kiln.te.schedule import Schedule

from . import pipeline
from .lower import lower


def build(inputs, args=None, target="llvm", target_host=None, name: str = "default_function",
          binds=None, debug: bool | None = None, sanitize: str | Sequence[str] | None = None):
    """Compile a schedule (or a lowered IRModule/PrimFunc) to a runtime Module.

    ``mod = kiln.build(s, [A, B, C])`` then ``mod(a, b, c)`` with NDArrays. ``debug=True``
    (or ``KILN_DEBUG=1``) prints the IR after every pass, target passes included.
    ``sanitize="address,undefined"`` (or ``KILN_SANITIZE``) builds a CPU kernel with those
    sanitizers and kiln's bound checks (docs/reliability.md).
    """
    if sanitize is not None:
        with _sanitizing(sanitize):
            return build(inputs, args, target, target_host, name, binds, debug)
    tgt = as_target(target)
    if isinstance(inputs, Schedule):
        mod = lower(inputs, args, name=name, binds=binds, debug=debug)
    elif isinstance(inputs, PrimFunc):
        mod = IRModule({inputs.name: inputs})
    elif isinstance(inputs, IRModule):
        mod = inputs
    else:
        raise TypeError(f"build expects a te.Schedule or an IRModule, got {type(inputs).__name__}")
    return build_module(mod, tgt, debug=debug)


def _sanitizing(sanitize: str | Sequence[str]) -> PassContext:
    """The current PassContext with its config's sanitizers set to ``sanitize``."""
    ctx = PassContext.current()
    config = {**ctx.config, SANITIZE_CONFIG: ",".join(parse_sanitizers(sanitize))}
    return PassContext(ctx.opt_level, ctx.required_pass, ctx.disabled_pass, config)


def as_target(target) -> Target:
    """``target`` as a Target object, parsed once (a Target is used as it is; ``None`` means
    the enclosing ``with target:`` or ``llvm``)."""
    if isinstance(target, Target):
        return target
    return Target(target if target is not None else (Target.current() or "llvm"))


def build_module(mod: IRModule, target: Target, backend: Backend | None = None,
                 debug: bool | None = None):
    """The target phases and the backend of ``target`` on every function of ``mod``."""
    backend = backend or backend_for(target)
    funcs = target_phases(list(mod.functions.values()), backend, debug)
    source = backend.source(funcs, target)
    return backend.compile(funcs, source, target)


def target_phases(funcs: list[PrimFunc], backend: Backend, debug: bool | None = None
                  ) -> list[PrimFunc]:
    """``funcs`` after the target phases of ``backend`` (``pipeline.TARGET_PHASES``)."""
    show = pipeline.debug_enabled(debug)
    return [pipeline.run_phases(pipeline.TARGET_PHASES[backend.name], f, debug=show)
            for f in funcs]
