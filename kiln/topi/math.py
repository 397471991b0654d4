"""Elementwise math on tensors: every output element is a function of the same element of
the input (tag ``"elemwise"``)."""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import dtype as dt
from kiln.ir.expr import PrimExpr, Select
from kiln.ir.op import cast as _cast
from kiln.ir.op import convert, make_const
from kiln.te.tensor import Tensor

from . import tag
from .fast_math import fast_erf, fast_exp, fast_tanh


def _check(x, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"topi.{name} expects a te.Tensor, got {type(x).__name__}")
    return x


def _unary(name: str, fexpr, doc: str):
    def op(x):
        x = _check(x, name)
        return te.compute(x.shape, lambda *i: fexpr(x(*i)), name=f"T_{name}", tag=tag.ELEMWISE)

    op.__name__ = name
    op.__qualname__ = name
    op.__doc__ = doc
    return op


def _float_only(name: str, f):
    def g(v):
        if not dt.is_float(v.dtype):
            raise TypeError(f"topi.{name} needs a float tensor, got {v.dtype}")
        return f(v)

    return g


identity = _unary("identity", lambda v: v, "``y = x`` (a copy).")
negative = _unary("negative", lambda v: -v, "``y = -x``.")
exp = _unary("exp", _float_only("exp", tir.exp), "``y = exp(x)``.")
exp2 = _unary("exp2", _float_only("exp2", tir.exp2), "``y = 2 ** x``.")
erf = _unary("erf", _float_only("erf", tir.erf), "``y = erf(x)``.")
tanh = _unary("tanh", _float_only("tanh", tir.tanh), "``y = tanh(x)``.")
sigmoid = _unary("sigmoid", _float_only("sigmoid", tir.sigmoid), "``y = 1 / (1 + exp(-x))``.")
log = _unary("log", _float_only("log", tir.log), "natural logarithm.")
log2 = _unary("log2", _float_only("log2", tir.log2), "base-2 logarithm.")
log10 = _unary("log10", _float_only("log10", tir.log10), "base-10 logarithm.")
sqrt = _unary("sqrt", _float_only("sqrt", tir.sqrt), "square root.")
rsqrt = _unary("rsqrt", _float_only("rsqrt", tir.rsqrt), "``1 / sqrt(x)``.")
sin = _unary("sin", _float_only("sin", tir.sin), "sine.")
cos = _unary("cos", _float_only("cos", tir.cos), "cosine.")
floor = _unary("floor", lambda v: tir.floor(v) if dt.is_float(v.dtype) else v, "floor.")
ceil = _unary("ceil", lambda v: tir.ceil(v) if dt.is_float(v.dtype) else v, "ceil.")
round = _unary("round", lambda v: tir.round(v) if dt.is_float(v.dtype) else v,  # noqa: A001
               "round half away from zero (C's ``round``).")
trunc = _unary("trunc", lambda v: tir.trunc(v) if dt.is_float(v.dtype) else v, "trunc.")
abs = _unary("abs", tir.abs, "absolute value.")  # noqa: A001
isnan = _unary("isnan", tir.isnan, "``x != x`` as bool.")


def _sign(v: PrimExpr) -> PrimExpr:
    zero, one = make_const(0, v.dtype), make_const(1, v.dtype)
    if dt.is_uint(v.dtype) or dt.is_bool(v.dtype):
        return Select(v > zero, one, zero)
    return Select(v > zero, one, Select(v < zero, make_const(-1, v.dtype), zero))


sign = _unary("sign", _sign, "-1, 0 or 1 by the sign of x.")


def clip(x, a_min, a_max):
    """``y = min(max(x, a_min), a_max)`` elementwise, as ``numpy.clip`` and ONNX's Clip: a
    NaN stays NaN, a NaN bound is no bound, and ``a_max`` wins where ``a_min > a_max``.

    Computed as ``min(a_max, max(a_min, x))``: ``tir.max(a, b)`` is ``a > b ? a : b`` and
    ``tir.min(a, b)`` is ``a < b ? a : b``, each returning its second operand on a NaN, so
    with ``x`` second a NaN input is kept (``min(max(x, a_min), a_max)`` would drop it). One
    use of ``x``: a fused producer is not duplicated, and the loop vectorizes without lane
    masks (with bound checks on too)."""
    x = _check(x, "clip")

    def f(*i):
        v = x(*i)
        lo = make_const(a_min, v.dtype) if not isinstance(a_min, PrimExpr) else a_min
        hi = make_const(a_max, v.dtype) if not isinstance(a_max, PrimExpr) else a_max
        return tir.min(hi, tir.max(lo, v))

    return te.compute(x.shape, f, name="T_clip", tag=tag.ELEMWISE)


def cast(x, dtype: str):
    """``x`` converted to ``dtype`` (a tensor, or a scalar expression)."""
    dtype = dt.normalize(dtype)
    if isinstance(x, Tensor):
        return te.compute(x.shape, lambda *i: _cast(x(*i), dtype), name="T_cast",
                          tag=tag.ELEMWISE)
    return _cast(convert(x), dtype)


def elemwise_sum(xs):
    """The elementwise sum of a list of tensors of the same shape."""
    xs = list(xs)
    if not xs:
        raise ValueError("elemwise_sum needs at least one tensor")

    def f(*i):
        out = xs[0](*i)
        for t in xs[1:]:
            out = out + t(*i)
        return out

    return te.compute(xs[0].shape, f, name="T_elemwise_sum", tag=tag.ELEMWISE)


def full(shape, dtype: str, fill_value):
    """A tensor of ``shape`` filled with ``fill_value``."""
    value = make_const(fill_value, dt.normalize(dtype))
    return te.compute(shape, lambda *i: value, name="T_full", tag=tag.ELEMWISE)


def full_like(x, fill_value):
    """A tensor shaped like ``x`` filled with ``fill_value``."""
    value = make_const(fill_value, x.dtype)
    return te.compute(x.shape, lambda *i: value, name="T_full_like", tag=tag.ELEMWISE)


__all__ = [
    "identity", "negative", "exp", "fast_exp", "exp2", "erf", "fast_erf", "tanh", "fast_tanh",
    "sigmoid", "log", "log2", "log10", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "round",
    "trunc", "abs", "isnan", "sign", "clip", "cast", "elemwise_sum", "full", "full_like",
]
