"""A reference evaluator of scalar IR expressions over Python numbers (for tests and checks).

``evaluate(e, env)`` follows the IR's semantics: ``FloorDiv``/``FloorMod`` round toward
-inf, integer ``Div``/``Mod`` truncate toward zero (C), comparisons and logic give 0/1,
``Select`` evaluates both sides, casts to integer types wrap around. Arithmetic in unsigned
and narrow signed types wraps modulo ``2**bits`` (``bound.wrap_modulus``); int32/int64
arithmetic is unbounded (like the simplifier, it assumes no overflow). Loads read
``env[buffer_var]`` (any indexable).
"""

from __future__ import annotations

import math

from ..ir import dtype as dt
from ..ir import expr as E
from .bound import wrap_int, wrap_modulus


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


_BIN = {
    E.Add: lambda a, b, t: a + b,
    E.Sub: lambda a, b, t: a - b,
    E.Mul: lambda a, b, t: a * b,
    E.Div: lambda a, b, t: _tdiv(a, b) if dt.is_integer(t) else a / b,
    E.Mod: lambda a, b, t: a - b * _tdiv(a, b) if dt.is_integer(t) else math.fmod(a, b),
    E.FloorDiv: lambda a, b, t: a // b if dt.is_integer(t) else float(math.floor(a / b)),
    E.FloorMod: lambda a, b, t: a % b if dt.is_integer(t) else a - b * math.floor(a / b),
    E.Min: lambda a, b, t: min(a, b),
    E.Max: lambda a, b, t: max(a, b),
    E.EQ: lambda a, b, t: int(a == b),
    E.NE: lambda a, b, t: int(a != b),
    E.LT: lambda a, b, t: int(a < b),
    E.LE: lambda a, b, t: int(a <= b),
    E.GT: lambda a, b, t: int(a > b),
    E.GE: lambda a, b, t: int(a >= b),
}


def evaluate(e: E.PrimExpr, env: dict | None = None):
    """The value of scalar expression ``e`` with variables taken from ``env``."""
    env = env or {}
    return _Eval(env)(e)


class _Eval:
    def __init__(self, env: dict):
        self.env = env

    def __call__(self, e):  # noqa: C901 - flat type switch
        t = type(e)
        if t is E.IntImm or t is E.FloatImm or t is E.StringImm:
            return e.value
        if isinstance(e, E.Var):
            if e not in self.env:
                raise KeyError(f"no value for variable {e.name}")
            return self.env[e]
        fn = _BIN.get(t)
        if fn is not None:
            v = fn(self(e.a), self(e.b), e.a.dtype)
            return wrap_int(v, e.dtype) if wrap_modulus(e.dtype) is not None else v
        if t is E.And:
            return int(bool(self(e.a)) and bool(self(e.b)))
        if t is E.Or:
            return int(bool(self(e.a)) or bool(self(e.b)))
        if t is E.Not:
            return int(not self(e.a))
        if t is E.Select:
            c, a, b = self(e.condition), self(e.true_value), self(e.false_value)
            return a if c else b
        if t is E.Cast:
            v = self(e.value)
            if dt.is_float(e.dtype):
                return float(v)
            return wrap_int(int(v), e.dtype)
        if t is E.Let:
            saved = dict(self.env)
            self.env[e.var] = self(e.value)
            try:
                return self(e.body)
            finally:
                self.env.clear()
                self.env.update(saved)
        if t is E.Call:
            return self._call(e)
        if t is E.Load:
            return self.env[e.buffer_var][self(e.index)]
        raise NotImplementedError(f"cannot evaluate {t.__name__}")

    def _call(self, e: E.Call):
        if e.op == "likely":
            return self(e.args[0])
        if e.op in ("if_then_else", "tvm_if_then_else"):
            return self(e.args[1]) if self(e.args[0]) else self(e.args[2])
        fn = getattr(math, e.op, None)
        if fn is not None:
            return fn(*(self(a) for a in e.args))
        raise NotImplementedError(f"cannot evaluate call {e.op}")
