"""Activation functions (relu, leaky_relu, prelu, gelu) and bias_add."""

from __future__ import annotations

import math

from kiln import te, tir
from kiln.ir.expr import Select
from kiln.ir.op import make_const

from .. import tag
from ..fast_math import fast_erf_expr, fast_tanh_expr


def relu(x):
    """``max(0, x)``, keeping a NaN input NaN as numpy, onnxruntime and PyTorch do.

    ``tir.max(a, b)`` is ``a > b ? a : b``, which returns its second operand on a NaN: with
    ``x`` second a NaN is kept (``max(x, 0)`` would map it to 0). One use of ``x``, so a
    fused producer is not duplicated, and one compare and one blend per vector."""
    return te.compute(x.shape, lambda *i: tir.max(make_const(0, x.dtype), x(*i)),
                      name="T_relu", tag=tag.ELEMWISE)


def leaky_relu(x, alpha):
    """``x`` where positive, ``alpha * x`` elsewhere."""

    def f(*i):
        v = x(*i)
        return Select(v > make_const(0, v.dtype), v, v * make_const(alpha, v.dtype))

    return te.compute(x.shape, f, name="T_leaky_relu", tag=tag.ELEMWISE)


def prelu(x, slope, axis=1):
    """``x`` where positive, ``slope[c] * x`` elsewhere (``c`` the index along ``axis``)."""
    if slope.ndim != 1:
        raise ValueError("prelu: slope must be 1-D")
    axis = axis % x.ndim

    def f(*i):
        v = x(*i)
        return Select(v > make_const(0, v.dtype), v, v * slope[i[axis]])

    return te.compute(x.shape, f, name="T_prelu", tag=tag.BROADCAST)


def bias_add(data, bias, axis=1):
    """``data + bias[c]`` with ``c`` the index along ``axis`` (TVM's ``topi.nn.bias_add``;
    a ``"broadcast"`` stage)."""
    if bias.ndim != 1:
        raise ValueError("bias_add: bias must be 1-D")
    axis = axis % data.ndim
    return te.compute(data.shape, lambda *i: data(*i) + bias[i[axis]], name="T_add",
                      tag=tag.BROADCAST)


def gelu(x, approximate="none"):
    """Gaussian error linear unit: ``0.5 x (1 + erf(x / sqrt 2))``; with
    ``approximate="tanh"``, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``. erf and
    tanh are the vectorizable approximations of :mod:`kiln.topi.fast_math` (absolute error
    below 1e-6 in float32)."""

    def f(*i):
        v = x(*i)
        half, one = make_const(0.5, v.dtype), make_const(1.0, v.dtype)
        if approximate == "tanh":
            c = make_const(math.sqrt(2.0 / math.pi), v.dtype)
            inner = c * (v + make_const(0.044715, v.dtype) * v * v * v)
            return half * v * (one + fast_tanh_expr(inner))
        if approximate != "none":
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return half * v * (one + fast_erf_expr(v * make_const(1.0 / math.sqrt(2.0), v.dtype)))

    return te.compute(x.shape, f, name="T_gelu", tag=tag.ELEMWISE)


__all__ = ["relu", "leaky_relu", "prelu", "gelu", "bias_add"]
