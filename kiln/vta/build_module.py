"""``vta.lower``, ``vta.build`` and ``vta.build_config``: a schedule of VTA stages to a
runnable ``VTAModule``.

``vta.lower`` is kiln's lowering (``kiln.lower``: bound inference, tensorize, loop nests,
virtual threads, storage flattening) under :func:`build_config`, which adds VTA's lowering
pass (in-place ALU stages, ``passes.alu_inplace``); ``vta.build`` then
generates the instruction stream from the lowered function (``kiln.vta.codegen``). The
target is ``env.target`` (``"ext_dev"``); ``target_host`` is accepted for TVM's signature
(the host part is evaluated at build time, docs/vta.md).
"""

from __future__ import annotations

from typing import Any

from kiln.driver import lower as kiln_lower
from kiln.driver.pipeline import ADD_LOWER_PASS
from kiln.errors import TVMError
from kiln.ir.stmt import IRModule, PrimFunc, Stmt
from kiln.ir.transform import PassContext

from .codegen import generate
from .env import get_env
from .passes.alu_inplace import alu_inplace
from .runtime import VTAModule

__all__ = ["build_config", "lower", "build"]


def alu_inplace_pass(stmt: Stmt) -> Stmt:
    """Lowering pass: ALU stages in place (``kiln.vta.passes.alu_inplace``)."""
    env = get_env()
    return alu_inplace(stmt, env.acc_scope, f"pragma_{env.alu}")


def build_config(opt_level: int = 3, disabled_pass=None, config: dict | None = None,
                 debug_flag: int = 0, **kwargs: Any) -> PassContext:
    """The pass context VTA programs are lowered in (TVM's ``vta.build_config``): the
    user's configuration plus VTA's lowering passes (``tir.add_lower_pass``)."""
    config = dict(config or {})
    passes = list(config.get(ADD_LOWER_PASS, ()))
    config[ADD_LOWER_PASS] = passes + [(3, alu_inplace_pass)]
    return PassContext(opt_level=opt_level, disabled_pass=disabled_pass, config=config)


def lower(sch, args=None, name: str = "main", binds=None, simple_mode: bool = False):
    """Lower a schedule of VTA stages (``kiln.lower`` under :func:`build_config`)."""
    with build_config():
        return kiln_lower(sch, args, name=name, binds=binds, simple_mode=simple_mode)


def _is_vta_target(target: Any) -> bool:
    text = str(target if target is not None else "ext_dev")
    return text.split()[0] in ("ext_dev", "vta") if text else False


def build(inputs, args=None, target=None, target_host=None, name: str = "default_function",
          **kwargs: Any) -> VTAModule:
    """Compile a schedule (with its ``args``) or a lowered module for VTA."""
    if not _is_vta_target(target):
        raise TVMError(f"vta.build compiles for 'ext_dev' (env.target), got {target!r}")
    if isinstance(inputs, (IRModule, PrimFunc)):
        mod = inputs if isinstance(inputs, IRModule) else IRModule.from_expr(inputs)
    else:
        mod = lower(inputs, args, name=name)
    funcs = list(mod.functions.values())
    if len(funcs) != 1:
        raise NotImplementedError("vta.build compiles one function per module")
    env = get_env()
    return VTAModule(generate(funcs[0], env), env, funcs[0].name)
