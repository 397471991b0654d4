"""Constant folding with the IR's semantics (truncating Div/Mod, flooring FloorDiv/FloorMod,
float results rounded to their dtype's precision, integer casts wrapping around, and so
does arithmetic in unsigned and narrow signed types: ``bound.wrap_modulus``)."""

from __future__ import annotations

import math

import numpy as np

from ..ir import dtype as dt
from ..ir import expr as E
from .bound import wrap_int, wrap_modulus


def fold_float(value: float, dtype: str) -> E.FloatImm:
    """A float constant rounded to the precision of ``dtype``."""
    d = dt.parse(dtype)
    if d.bits in (16, 32) and math.isfinite(value):
        with np.errstate(over="ignore"):
            value = float(np.float16(value) if d.bits == 16 else np.float32(value))
    return E.FloatImm(dtype, value)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _trunc_mod(a: int, b: int) -> int:
    return a - b * _trunc_div(a, b)


_INT_FOLD = {
    E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
    E.Div: lambda a, b: _trunc_div(a, b) if b else None,
    E.Mod: lambda a, b: _trunc_mod(a, b) if b else None,
    E.FloorDiv: lambda a, b: a // b if b else None,
    E.FloorMod: lambda a, b: a % b if b else None,
    E.Min: min, E.Max: max,
}
_FLOAT_FOLD = {
    E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
    E.Div: lambda a, b: a / b if b else None,
    E.FloorDiv: lambda a, b: float(math.floor(a / b)) if b else None,
    E.Min: lambda a, b: None if math.isnan(a) or math.isnan(b) else min(a, b),
    E.Max: lambda a, b: None if math.isnan(a) or math.isnan(b) else max(a, b),
}
CMP_FOLD = {
    E.EQ: lambda a, b: a == b, E.NE: lambda a, b: a != b, E.LT: lambda a, b: a < b,
    E.LE: lambda a, b: a <= b, E.GT: lambda a, b: a > b, E.GE: lambda a, b: a >= b,
}


def fold_binary(e, a, b):
    """Fold ``type(e)(a, b)`` of two constants, or None."""
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm) and dt.is_integer(e.dtype):
        fn = _INT_FOLD.get(type(e))
        v = fn(a.value, b.value) if fn else None
        if v is None:
            return None
        return E.IntImm(e.dtype, wrap_int(v, e.dtype) if wrap_modulus(e.dtype) else v)
    if isinstance(a, E.FloatImm) and isinstance(b, E.FloatImm):
        fn = _FLOAT_FOLD.get(type(e))
        v = fn(a.value, b.value) if fn else None
        return None if v is None else fold_float(v, e.dtype)
    return None




def fold_cast(v, dtype: str):
    d = dt.parse(dtype)
    if d.code == "float":
        return fold_float(float(v.value), dtype)
    if d.code in ("int", "uint", "bool"):
        x = v.value
        if isinstance(v, E.FloatImm):
            if not math.isfinite(x):
                return None
            x = int(x)  # truncation toward zero, as in C
        return E.IntImm(dtype, wrap_int(x, dtype))
    return None
