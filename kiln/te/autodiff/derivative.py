"""Symbolic partial derivatives of scalar expressions, the local step of ``te.gradient``.

``derivative(expr, var)`` is ``d expr / d var`` where ``var`` is a float variable standing
for one tensor element (``loads_as_vars`` replaces each distinct load of the differentiated
tensor by such a variable first). Everything else - other variables, loads of other tensors,
integer sub-expressions (indices, conditions) - is a constant. The rules are the calculus ones, with
TVM's conventions where calculus leaves a choice:

* ``min(a, b)`` / ``max(a, b)`` take the derivative of the operand they select, ``a`` on ties
  (``select(a <= b, da, db)`` / ``select(a >= b, da, db)``), so a max reduction's gradient goes
  to the first maximum;
* ``select`` / ``if_then_else`` differentiate both branches under the same condition;
* ``floor``, ``ceil``, ``round``, ``trunc`` and integer-valued expressions have derivative 0.

Zeros and ones are folded as they are built (``0 * x`` is 0, ``1 * x`` is ``x``), so the
derivative of an expression that does not read ``var`` is the constant 0 and a linear
expression gives its coefficient, not a tree of ``0 * x + 1 * y``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, substitute
from kiln.ir.op import cast, make_const
from kiln.ir.structural import structural_equal
from kiln.tir.op import if_then_else

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = ["derivative", "is_zero", "loads_as_vars"]


class _LoadsToVars(Mutator):
    """Replaces each distinct load of ``tensor`` with a float variable of its own."""

    def __init__(self, tensor: Tensor):
        super().__init__()
        self.tensor = tensor
        self.loads: list[tuple[E.Var, tuple[E.PrimExpr, ...]]] = []

    def visit_ProducerLoad(self, node: E.ProducerLoad) -> E.PrimExpr:
        if node.producer != self.tensor:
            return self.generic_visit(node)
        for var, indices in self.loads:
            if structural_equal(indices, node.indices):
                return var
        var = E.Var(f"{self.tensor.name}_elem", node.dtype)
        self.loads.append((var, node.indices))
        return var


def loads_as_vars(expr: E.PrimExpr,
                  tensor: Tensor) -> tuple[E.PrimExpr, list[tuple[E.Var, tuple]]]:
    """``expr`` with each distinct load of ``tensor`` replaced by a variable (the element it
    reads, to differentiate against), and the ``(variable, indices)`` pairs."""
    mutator = _LoadsToVars(tensor)
    return mutator.visit(expr), mutator.loads


def is_zero(e: E.PrimExpr) -> bool:
    """True for the constant 0 (the derivative of an expression that does not read ``var``)."""
    return isinstance(e, E.IntImm | E.FloatImm) and e.value == 0


def _is_one(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm | E.FloatImm) and e.value == 1


def _add(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    if is_zero(a):
        return b
    return a if is_zero(b) else a + b


def _sub(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    if is_zero(b):
        return a
    return -b if is_zero(a) else a - b


def _mul(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    if is_zero(a) or is_zero(b):
        return make_const(0, a.dtype)
    if _is_one(a):
        return b
    return a if _is_one(b) else a * b


def _select(cond: E.PrimExpr, t: E.PrimExpr, f: E.PrimExpr) -> E.PrimExpr:
    if is_zero(t) and is_zero(f):
        return t
    return E.Select(cond, t, f)


def derivative(expr: E.PrimExpr, var: E.Var) -> E.PrimExpr:
    """``d expr / d var``, in ``expr``'s dtype (the constant 0 when ``expr`` is integer-valued
    or does not read ``var``). Raises NotImplementedError for a call it has no rule for."""
    if not dt.is_float(expr.dtype):
        return make_const(0, expr.dtype)
    if isinstance(expr, E.Var):
        return make_const(1 if expr is var else 0, expr.dtype)
    if isinstance(expr, E.FloatImm | E.ProducerLoad):  # loads of other tensors: constants
        return make_const(0, expr.dtype)
    rule = _RULES.get(type(expr))
    if rule is None:
        raise NotImplementedError(
            f"te.gradient: cannot differentiate a {type(expr).__name__} inside an expression "
            f"({expr})")
    return rule(expr, var)


def _d_add(e: E.Add, v: E.Var) -> E.PrimExpr:
    return _add(derivative(e.a, v), derivative(e.b, v))


def _d_sub(e: E.Sub, v: E.Var) -> E.PrimExpr:
    return _sub(derivative(e.a, v), derivative(e.b, v))


def _d_mul(e: E.Mul, v: E.Var) -> E.PrimExpr:
    return _add(_mul(derivative(e.a, v), e.b), _mul(e.a, derivative(e.b, v)))


def _d_div(e: E.Div, v: E.Var) -> E.PrimExpr:
    """``d(a/b) = da/b - a*db/b**2``."""
    da, db = derivative(e.a, v), derivative(e.b, v)
    by_numerator = da if is_zero(da) else da / e.b
    by_denominator = db if is_zero(db) else e.a * db / (e.b * e.b)
    return _sub(by_numerator, by_denominator)


def _d_min(e: E.Min, v: E.Var) -> E.PrimExpr:
    return _select(e.a <= e.b, derivative(e.a, v), derivative(e.b, v))


def _d_max(e: E.Max, v: E.Var) -> E.PrimExpr:
    return _select(e.a >= e.b, derivative(e.a, v), derivative(e.b, v))


def _d_select(e: E.Select, v: E.Var) -> E.PrimExpr:
    return _select(e.condition, derivative(e.true_value, v), derivative(e.false_value, v))


def _d_cast(e: E.Cast, v: E.Var) -> E.PrimExpr:
    if not dt.is_float(e.value.dtype):
        return make_const(0, e.dtype)
    inner = derivative(e.value, v)
    return make_const(0, e.dtype) if is_zero(inner) else cast(inner, e.dtype)


def _d_let(e: E.Let, v: E.Var) -> E.PrimExpr:
    return derivative(substitute(e.body, {e.var: e.value}), v)


def _d_call(e: E.Call, v: E.Var) -> E.PrimExpr:
    if e.op == "tvm_if_then_else":
        cond, t, f = e.args
        dt_, df = derivative(t, v), derivative(f, v)
        return dt_ if is_zero(dt_) and is_zero(df) else if_then_else(cond, dt_, df)
    if e.op == "pow":
        return _d_pow(e, v)
    outer = _CALL_RULES.get(e.op)
    if outer is None:
        raise NotImplementedError(
            f"te.gradient: no derivative rule for the intrinsic '{e.op}' (in {e})")
    (x,) = e.args
    dx = derivative(x, v)
    return dx if is_zero(dx) else _mul(outer(e, x), dx)


def _d_pow(e: E.Call, v: E.Var) -> E.PrimExpr:
    """``d(a**b) = b * a**(b-1) * da + a**b * log(a) * db``."""
    a, b = e.args
    da, db = derivative(a, v), derivative(b, v)
    by_base = _mul(_mul(b, E.Call(e.dtype, "pow", [a, b - make_const(1, b.dtype)])), da)
    by_exponent = _mul(_mul(e, E.Call(e.dtype, "log", [a])), db)
    return _add(by_base, by_exponent)


def _c(x: E.PrimExpr, value: float) -> E.PrimExpr:
    return make_const(value, x.dtype)


def _call(name: str, x: E.PrimExpr) -> E.PrimExpr:
    return E.Call(x.dtype, name, [x])


#: ``f'(x)`` of each unary intrinsic ``f``, given the call ``f(x)`` (reused where it appears)
_CALL_RULES: dict[str, Callable[[E.Call, E.PrimExpr], E.PrimExpr]] = {
    "exp": lambda f, x: f,
    "exp2": lambda f, x: f * _c(x, math.log(2.0)),
    "log": lambda f, x: _c(x, 1.0) / x,
    "log2": lambda f, x: _c(x, 1.0) / (x * _c(x, math.log(2.0))),
    "log10": lambda f, x: _c(x, 1.0) / (x * _c(x, math.log(10.0))),
    "sqrt": lambda f, x: _c(x, 0.5) / f,
    "rsqrt": lambda f, x: _c(x, -0.5) * f / x,
    "tanh": lambda f, x: _c(x, 1.0) - f * f,
    "sigmoid": lambda f, x: f * (_c(x, 1.0) - f),
    "sin": lambda f, x: _call("cos", x),
    "cos": lambda f, x: -_call("sin", x),
    "erf": lambda f, x: _c(x, 2.0 / math.sqrt(math.pi)) * _call("exp", -(x * x)),
    "fabs": lambda f, x: E.Select(x >= _c(x, 0.0), _c(x, 1.0), _c(x, -1.0)),
    "floor": lambda f, x: _c(x, 0.0),
    "ceil": lambda f, x: _c(x, 0.0),
    "round": lambda f, x: _c(x, 0.0),
    "trunc": lambda f, x: _c(x, 0.0),
}

_RULES: dict[type, Callable[[E.PrimExpr, E.Var], E.PrimExpr]] = {
    E.Add: _d_add,
    E.Sub: _d_sub,
    E.Mul: _d_mul,
    E.Div: _d_div,
    E.Min: _d_min,
    E.Max: _d_max,
    E.Select: _d_select,
    E.Cast: _d_cast,
    E.Let: _d_let,
    E.Call: _d_call,
}

