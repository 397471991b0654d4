"""Hybrid script run as plain Python: the language's names bound to numpy.

Calling a ``@te.hybrid.script`` function with numpy arrays runs its Python body unchanged,
with the names below put into the function's globals for the duration of the call (and the
previous values put back afterwards): every loop kind is ``range``, ``output_tensor`` and
``allocate`` give zero-filled numpy arrays, the math intrinsics and dtype casts are numpy's.
This is how a hybrid function is tested against its compiled form.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

#: the loop constructors of the language; ``bind(thread_tag, extent)`` binds a GPU thread
LOOP_KINDS = ("range", "const_range", "parallel", "vectorize", "unroll", "bind")

#: dtype names usable as casts, e.g. ``float32(x)``
CAST_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "float16", "float32", "float64")


def allocate(shape, dtype: str = "float32", scope: str = "global") -> np.ndarray:
    """``allocate`` / ``output_tensor``: a zero-filled array (``scope`` is for the compiled
    form only)."""
    return np.zeros(shape, dtype=dtype)


def _bind(thread_tag: str, extent: int) -> range:
    return range(extent)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


_NUMPY_GLOBALS: dict[str, Any] = {
    "range": range, "const_range": range, "parallel": range, "vectorize": range,
    "unroll": range, "bind": _bind,
    "output_tensor": allocate, "allocate": allocate,
    "sqrt": np.sqrt, "rsqrt": _rsqrt, "exp": np.exp, "log": np.log, "tanh": np.tanh,
    "sigmoid": _sigmoid, "power": np.power, "floor": np.floor, "ceil": np.ceil,
    "abs": abs, "max": max, "min": min, "round": round, "trunc": math.trunc,
    "likely": lambda cond: cond, "ceil_div": _ceil_div,
    **{name: getattr(np, "bool_" if name == "bool" else name) for name in CAST_DTYPES},
}


def run_in_python(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Call ``func`` with the language's names bound to their numpy meanings."""
    namespace = func.__globals__
    missing = object()
    saved = {name: namespace.get(name, missing) for name in _NUMPY_GLOBALS}
    namespace.update(_NUMPY_GLOBALS)
    try:
        return func(*args, **kwargs)
    finally:
        for name, value in saved.items():
            if value is missing:
                del namespace[name]
            else:
                namespace[name] = value
