"""``tvm.runtime.convert``: Python values to kiln's IR values, Python functions to
PackedFuncs."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .module import PackedFunc

__all__ = ["convert", "PythonPackedFunc"]


class PythonPackedFunc(PackedFunc):
    """A Python function as a PackedFunc (what ``convert`` makes of a function): calling it
    calls the function with the same arguments."""

    __slots__ = ("_pyfunc",)

    def __init__(self, fn: Callable) -> None:
        super().__init__(getattr(fn, "__name__", "python_function"), 0, 0, None)
        self._pyfunc = fn

    def __call__(self, *args: Any) -> Any:
        return self._pyfunc(*args)

    def __repr__(self) -> str:
        return f"<PackedFunc {self.name} (Python)>"


def _is_function(value: Any) -> bool:
    return (inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value)
            or isinstance(value, functools.partial))


def convert(value: Any) -> Any:
    """An IR value for ``value``: ints, floats and bools become constants (``IntImm`` int32 /
    ``FloatImm`` float32 / ``bool``), lists and tuples are converted element-wise (a list),
    dicts value-wise; a Python function becomes a :class:`PythonPackedFunc`; IR nodes,
    tensors, strings and PackedFuncs are returned as they are."""
    from kiln.ir.op import const

    if isinstance(value, bool):
        return const(value, "bool")
    if isinstance(value, int):
        return const(value, "int32" if -(2**31) <= value < 2**31 else "int64")
    if isinstance(value, float):
        return const(value, "float32")
    if isinstance(value, (list, tuple)):
        return [convert(v) for v in value]
    if isinstance(value, dict):
        return {k: convert(v) for k, v in value.items()}
    if _is_function(value):
        return PythonPackedFunc(value)
    return value
