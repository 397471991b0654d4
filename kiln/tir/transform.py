"""Passes over the PrimFuncs of an IRModule (TVM's ``tvm.tir.transform``).

``prim_func_pass`` turns a function ``fn(func, mod, ctx) -> func`` into a pass that rewrites
every PrimFunc of a module; the constructors below wrap kiln's own loop-IR passes the same
way, under TVM's names, so that ``tvm.transform.Sequential([tvm.tir.transform.Simplify(),
my_pass])(mod)`` works on what ``kiln.lower`` returns.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.arith import simplify_stmt
from kiln.ir.stmt import IRModule, PrimFunc, Stmt
from kiln.ir.transform import Pass, PassContext, PassInfo, pass_decorator

from .inject_virtual_thread import inject_virtual_thread
from .loop_partition import loop_partition, partition_const_loop_option
from .remove_no_op import remove_no_op
from .unroll import auto_unroll
from .vectorize import vectorize


class PrimFuncPass(Pass):
    """A pass that applies ``fn(func, mod, ctx) -> func`` to each PrimFunc of a module."""

    def __init__(self, fn: Callable, info: PassInfo):
        self.fn, self.info = fn, info

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = {}
        for name, func in mod.functions.items():
            new = self.fn(func, mod, ctx)
            if not isinstance(new, PrimFunc):
                raise TypeError(f"prim_func_pass {self.info.name} returned "
                                f"{type(new).__name__} for {name}, not a PrimFunc")
            out[name] = new
        return IRModule(out)


def prim_func_pass(pass_func=None, opt_level: int = 0, name: str | None = None,
                   required=None):
    """Decorator: ``@tvm.tir.transform.prim_func_pass(opt_level=0)`` over
    ``fn(func, mod, ctx) -> func``."""
    return pass_decorator(PrimFuncPass, pass_func, opt_level, name, required)


def _body_pass(name: str, rewrite: Callable[[Stmt], Stmt]) -> Callable[[], PrimFuncPass]:
    def make() -> PrimFuncPass:
        return PrimFuncPass(lambda f, _mod, _ctx: f.with_body(rewrite(f.body)),
                            PassInfo(0, name))

    make.__name__ = name
    make.__doc__ = f"``tvm.tir.transform.{name}()``: {rewrite.__name__} on every PrimFunc."
    return make


def LoopPartition() -> PrimFuncPass:
    """``tvm.tir.transform.LoopPartition()``: loop_partition on every PrimFunc, with the
    ``tir.LoopPartition`` options of the PassContext it runs in."""
    return PrimFuncPass(lambda f, _mod, ctx: f.with_body(
        loop_partition(f.body, partition_const_loop_option(ctx))), PassInfo(0, "LoopPartition"))


Simplify = _body_pass("Simplify", simplify_stmt)
VectorizeLoop = _body_pass("VectorizeLoop", vectorize)
UnrollLoop = _body_pass("UnrollLoop", auto_unroll)
InjectVirtualThread = _body_pass("InjectVirtualThread", inject_virtual_thread)
RemoveNoOp = _body_pass("RemoveNoOp", remove_no_op)

__all__ = ["PrimFuncPass", "prim_func_pass", "Simplify", "LoopPartition", "VectorizeLoop",
           "UnrollLoop", "InjectVirtualThread", "RemoveNoOp"]
