"""Passes over IRModules and the context that configures them (TVM's ``tvm.transform``).

A *pass* maps an IRModule to an IRModule. ``PassContext`` carries the options a compilation
reads while it runs: the optimization level, the passes to skip, and a ``config`` dictionary.
``kiln.lower`` reads ``config["tir.add_lower_pass"]``: a list of ``(phase, pass)`` pairs whose
passes run after the built-in passes of that phase (0 to 3; see ``kiln.driver.pipeline``)::

    @tvm.tir.transform.prim_func_pass(opt_level=0)
    def my_pass(func, mod, ctx):
        return func.with_body(rewrite(func.body))

    with tvm.transform.PassContext(config={"tir.add_lower_pass": [(1, my_pass)]}):
        print(tvm.lower(s, [A, B, C]))

``relay.build`` reads ``opt_level`` and ``disabled_pass``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kiln.errors import TVMError

from .stmt import IRModule


class PassContext:
    """``with tvm.transform.PassContext(opt_level=3, config={...}):`` (``relay.build_config``)."""

    _local = threading.local()  # each thread enters its own contexts, as in TVM

    def __init__(self, opt_level: int = 2, required_pass=None, disabled_pass=None,
                 config=None, **_ignored) -> None:
        self.opt_level = int(opt_level)
        self.required_pass = set(required_pass or ())
        self.disabled_pass = set(disabled_pass or ())
        self.config = dict(config or {})

    @staticmethod
    def _stack() -> list[PassContext]:
        """This thread's entered contexts, innermost last."""
        if not hasattr(PassContext._local, "stack"):
            PassContext._local.stack = []
        return PassContext._local.stack

    def __enter__(self) -> PassContext:
        PassContext._stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        PassContext._stack().pop()

    @staticmethod
    def current() -> PassContext:
        """The innermost context of this thread's enclosing ``with`` blocks (``opt_level=3``
        if none)."""
        stack = PassContext._stack()
        return stack[-1] if stack else PassContext(opt_level=3)


@dataclass(frozen=True)
class PassInfo:
    """A pass's name and the lowest ``opt_level`` at which it runs."""

    opt_level: int
    name: str
    required: tuple[str, ...] = ()


class Pass:
    """An IRModule → IRModule transformation; ``pass_(mod)`` runs it under the current
    context, skipping it when the context's ``opt_level`` is too low or names it disabled."""

    info: PassInfo

    def __call__(self, mod: IRModule) -> IRModule:
        if not isinstance(mod, IRModule):
            raise TypeError(f"pass {self.info.name} expects an IRModule, got "
                            f"{type(mod).__name__}")
        ctx = PassContext.current()
        if self.info.name in ctx.disabled_pass or (
                self.info.opt_level > ctx.opt_level and self.info.name not in ctx.required_pass):
            return mod
        out = self.transform_module(mod, ctx)
        if not isinstance(out, IRModule):
            raise TVMError(f"pass {self.info.name} returned {type(out).__name__}, not an "
                           f"IRModule")
        return out

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.info.name} opt_level={self.info.opt_level}>"


class ModulePass(Pass):
    """A pass made of a function ``fn(mod, ctx) -> mod``."""

    def __init__(self, fn: Callable, info: PassInfo):
        self.fn, self.info = fn, info

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self.fn(mod, ctx)


class Sequential(Pass):
    """Runs ``passes`` one after the other: ``tvm.transform.Sequential([p1, p2])(mod)``."""

    def __init__(self, passes: Sequence[Pass] = (), opt_level: int = 0,
                 name: str = "sequential", required=()):
        for p in passes:
            if not isinstance(p, Pass):
                raise TypeError(f"Sequential takes passes, got {p!r}")
        self.passes = list(passes)
        self.info = PassInfo(opt_level, name, tuple(required))

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        for p in self.passes:
            mod = p(mod)
        return mod


def pass_decorator(make: Callable[[Callable, PassInfo], Pass], pass_func, opt_level: int,
                   name: str | None, required) -> Callable | Pass:
    """The body of TVM's pass decorators: ``@deco`` and ``@deco(opt_level=..)`` both give the
    pass ``make(fn, PassInfo(...))``."""

    def wrap(fn: Callable) -> Pass:
        return make(fn, PassInfo(opt_level, name or fn.__name__, tuple(required or ())))

    return wrap(pass_func) if pass_func is not None else wrap


def module_pass(pass_func=None, opt_level: int = 0, name: str | None = None, required=None):
    """Decorator: ``@tvm.transform.module_pass(opt_level=0)`` over ``fn(mod, ctx) -> mod``."""
    return pass_decorator(ModulePass, pass_func, opt_level, name, required)


__all__ = ["PassContext", "PassInfo", "Pass", "ModulePass", "Sequential", "module_pass",
           "pass_decorator"]
