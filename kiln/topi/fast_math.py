"""Vectorizable exp, erf and tanh (TVM's ``topi.fast_exp``, ``fast_erf``, ``fast_tanh``): each
a polynomial or rational approximation written in plain TE arithmetic (multiplies, adds, one
divide, min/max clamps, a float->int conversion and :func:`kiln.tir.reinterpret`),
so the C compiler vectorizes a loop of them with AVX2/AVX-512, where the libm calls
(``expf``, ``erff``, ``tanhf``) stay one scalar call per element.

Guarantees, for float32 (a float64 or float16 input gets the exact libm function):

* :func:`fast_exp_expr`: Cephes' ``expf`` polynomial after the reduction
  ``x = k ln2 + r``, ``|r| <= ln2 / 2``; relative error below 2e-7 where ``exp(x)`` is a
  normal number (``x`` in ``[-87.3, 88]``). Below about ``-87.68`` (``-inf`` included) it
  is ``0`` (exp is subnormal there: an absolute error below 1.2e-38); above ``88``
  (``+inf`` included) it saturates at ``exp(88)`` (about ``1.65e38``); NaN stays NaN.
* :func:`fast_erf_expr`: Eigen's rational approximation (odd degree-13 numerator,
  even degree-8 denominator) on ``x`` clamped to ``[-4, 4]``; absolute error below
  ``1e-6`` on the whole real line (``erf(±inf) = ±1``); NaN stays NaN.
* :func:`fast_tanh_expr`: Eigen's rational approximation on ``x`` clamped to ``[-9, 9]``;
  absolute error below ``1e-6`` (``tanh(±inf) = ±1``); NaN stays NaN.

The clamps are ``min(hi, max(lo, x))``: ``tir.max``/``tir.min`` return their second operand
on a NaN, so a NaN input passes through (as in :func:`kiln.topi.clip`).
"""

from __future__ import annotations

import math

from kiln import te, tir
from kiln.ir.expr import PrimExpr
from kiln.ir.op import cast, make_const
from kiln.te.tensor import Tensor

from . import tag

#: Cephes expf: the polynomial of ``(exp(r) - 1 - r) / r**2`` on ``|r| <= ln2 / 2``,
#: highest degree first
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
#: ``ln 2`` split in a part exact in float32 and the rest (Cody-Waite reduction)
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
#: exp's input clamp: at its low end ``k + 127`` is 0, so ``2 ** k`` (the bits
#: ``(k + 127) << 23``) is 0; at its high end ``k = 127`` (``2 ** 128`` is no float32)
_EXP_LO, _EXP_HI = -88.0, 88.0
#: Eigen's erf: numerator (odd powers 13, 11, ..., 1) and denominator (even powers 8..0)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)
#: Eigen's tanh: numerator (odd powers 13..1) and denominator (even powers 6..0)
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)


def _horner(x: PrimExpr, coeffs: tuple[float, ...]) -> PrimExpr:
    """``c0 x^n + c1 x^(n-1) + ... + cn`` by Horner's rule (coefficients highest first)."""
    acc = make_const(coeffs[0], x.dtype)
    for c in coeffs[1:]:
        acc = acc * x + make_const(c, x.dtype)
    return acc


def _clamp(x: PrimExpr, lo: float, hi: float) -> PrimExpr:
    """``x`` clamped to ``[lo, hi]``, NaN kept."""
    return tir.min(make_const(hi, x.dtype), tir.max(make_const(lo, x.dtype), x))


def fast_exp_expr(x: PrimExpr) -> PrimExpr:
    """``exp(x)`` for a float32 expression, vectorizable (module docstring: accuracy and
    the values at the ends of the range)."""
    if x.dtype != "float32":
        return tir.exp(x)
    c = _clamp(x, _EXP_LO, _EXP_HI)
    # k = round(c / ln2): c / ln2 + 127.5 > 0 on the clamped range, so truncation rounds
    biased = cast(c * make_const(1 / math.log(2), "float32") + make_const(127.5, "float32"),
                  "int32")
    k = cast(biased - 127, "float32")
    r = c - k * make_const(_LN2_HI, "float32") - k * make_const(_LN2_LO, "float32")
    er = _horner(r, _EXP_POLY) * r * r + r + make_const(1.0, "float32")
    # the bits of 2 ** k: the biased exponent k + 127 in the exponent field (0 when c is
    # below about -87.68: the result is then 0, where exp is subnormal)
    return er * tir.reinterpret("float32", biased * (1 << 23))


def _odd_rational(x: PrimExpr, bound: float, p, q) -> PrimExpr:
    """``c * P(c^2) / Q(c^2)`` with ``c`` = ``x`` clamped to ``[-bound, bound]``: an odd
    function that saturates beyond ``bound`` (erf and tanh)."""
    c = _clamp(x, -bound, bound)
    c2 = c * c
    return c * _horner(c2, p) / _horner(c2, q)


def fast_erf_expr(x: PrimExpr) -> PrimExpr:
    """``erf(x)`` for a float32 expression, vectorizable (absolute error < 1e-6)."""
    if x.dtype != "float32":
        return tir.erf(x)
    return _odd_rational(x, 4.0, _ERF_P, _ERF_Q)


def fast_tanh_expr(x: PrimExpr) -> PrimExpr:
    """``tanh(x)`` for a float32 expression, vectorizable (absolute error < 1e-6)."""
    if x.dtype != "float32":
        return tir.tanh(x)
    return _odd_rational(x, 9.0, _TANH_P, _TANH_Q)


def _elementwise(x: Tensor, f, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"topi.{name} expects a te.Tensor, got {type(x).__name__}")
    return te.compute(x.shape, lambda *i: f(x(*i)), name=f"T_{name}", tag=tag.ELEMWISE)


def fast_exp(x: Tensor) -> Tensor:
    """``exp(x)`` elementwise, vectorizable (:func:`fast_exp_expr`)."""
    return _elementwise(x, fast_exp_expr, "fast_exp")


def fast_erf(x: Tensor) -> Tensor:
    """``erf(x)`` elementwise, vectorizable (:func:`fast_erf_expr`)."""
    return _elementwise(x, fast_erf_expr, "fast_erf")


def fast_tanh(x: Tensor) -> Tensor:
    """``tanh(x)`` elementwise, vectorizable (:func:`fast_tanh_expr`)."""
    return _elementwise(x, fast_tanh_expr, "fast_tanh")


__all__ = ["fast_exp", "fast_erf", "fast_tanh", "fast_exp_expr", "fast_erf_expr",
           "fast_tanh_expr"]
