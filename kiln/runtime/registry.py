"""The global function registry: TVM's ``tvm.register_func`` / ``tvm.get_global_func``.

Classic TVM code registers Python callables under a name (hooks such as
``tvm_callback_cuda_compile``, helpers shared between modules, RPC-side functions) and looks
them up by name. A registered function is called with the same arguments it was called with.
Compiled code calls a registered function with ``tvm.tir.call_packed`` (``packed_call``:
tensors arrive as NDArrays viewing the compiled code's memory).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.errors import TVMError

_GLOBAL_FUNCS: dict[str, Callable] = {}


def register_func(func_name, f: Callable | None = None, override: bool = False):
    """Register ``f`` as the global function ``func_name``; as a decorator, ``@register_func``
    (the function's own name) or ``@register_func("name", override=True)``."""
    if callable(func_name):  # @register_func without arguments
        f, func_name = func_name, func_name.__name__
    if not isinstance(func_name, str):
        raise TypeError(f"register_func expects a function name (str), got {func_name!r}")

    def register(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"register_func('{func_name}'): {fn!r} is not callable")
        if func_name in _GLOBAL_FUNCS and not override:
            raise TVMError(f"Global PackedFunc {func_name} is already registered; pass "
                           f"override=True to replace it")
        _GLOBAL_FUNCS[func_name] = fn
        return fn

    return register(f) if f is not None else register


def get_global_func(name: str, allow_missing: bool = False) -> Callable | None:
    """The function registered as ``name``; None when missing and ``allow_missing``."""
    fn = _GLOBAL_FUNCS.get(name)
    if fn is None and not allow_missing:
        raise ValueError(f"Cannot find global function {name}")
    return fn


def list_global_func_names() -> list[str]:
    """The names of every registered global function, sorted."""
    return sorted(_GLOBAL_FUNCS)


def remove_global_func(name: str) -> None:
    """Unregister ``name`` (a missing name is an error)."""
    if _GLOBAL_FUNCS.pop(name, None) is None:
        raise ValueError(f"Cannot find global function {name}")


__all__ = ["register_func", "get_global_func", "list_global_func_names", "remove_global_func"]
