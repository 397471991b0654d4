"""The quantized operators of kiln's graph IR (TVM's ``qnn`` dialect): their computes and
numpy evaluations, the rows of the operator table ``op.OPS`` under the names below.

* ``qnn.quantize(x, scale, zero_point, axis=1)``: ``saturate(round_half_even(x / scale) +
  zero_point)`` as the zero point's type (int8/uint8), ONNX's QuantizeLinear; ``scale`` and
  ``zero_point`` are 0-d (per tensor) or 1-D along ``axis`` (per channel).
* ``qnn.dequantize(x, scale, zero_point, axis=1)``: ``(x - zero_point) * scale`` in float32.
* ``qnn.conv2d(x, weight_packed, bias_i32, multiplier, channels, strides, padding, dilation,
  input_zero_point, output_zero_point, out_dtype, relu[, out_layout])`` (NCHW or
  ``NCHW{b}c`` data, the output in ``out_layout``: NCHW or ``NCHW{b}c``; the weight packed by
  ``kiln.topi.x86.int8.pack_conv2d_weight``) and ``qnn.dense(x, weight, bias_i32,
  multiplier, output_zero_point, out_dtype, relu)``: int8 kernels with int32 accumulation and
  requantization fused (``kiln.topi.x86.int8``); made by the graph rewrite
  :func:`kiln.relay.quantize.fake_quantization_to_integer`.
* ``qnn.add(lhs, rhs, lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point, output_scale,
  output_zero_point, out_dtype, relu)``: two 8-bit tensors added as the QDQ pattern
  ``quantize([relu](dequantize(lhs) + dequantize(rhs)))`` computes it (float32 products,
  sum and division, round half to even, saturation), the scales and zero points per tensor;
  made by the same rewrite, so a residual add reads its 8-bit operands and fuses into the
  producing convolution's kernel.
"""

from __future__ import annotations

import re

import numpy as np

from kiln import te, tir
from kiln.topi.x86 import int8


def _per_axis(t: te.Tensor, i: tuple, axis: int):
    """``t``'s element for the output index ``i``: its only one (0-d) or ``t[i[axis]]``."""
    return t() if t.ndim == 0 else t[i[axis]]


def quantize(ts: list[te.Tensor], a: dict) -> te.Tensor:
    """The ``qnn.quantize`` compute."""
    x, scale, zp = ts
    lo, hi = int8.INT8_RANGE[zp.dtype]
    axis = a.get("axis", 1)

    def f(*i):
        y = tir.call_pure_extern("float32", "nearbyintf", x(*i) / _per_axis(scale, i, axis))
        q = y.astype("int32") + _per_axis(zp, i, axis).astype("int32")
        return tir.min(tir.max(q, lo), hi).astype(zp.dtype)

    return te.compute(x.shape, f, name="T_quantize", tag="elemwise")


def dequantize(ts: list[te.Tensor], a: dict) -> te.Tensor:
    """The ``qnn.dequantize`` compute."""
    x, scale, zp = ts
    axis = a.get("axis", 1)
    return te.compute(x.shape, lambda *i: (x(*i).astype("int32") - _per_axis(zp, i, axis)
                                           .astype("int32")).astype("float32")
                      * _per_axis(scale, i, axis), name="T_dequantize", tag="elemwise")


def _np_per_axis(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    return v if v.ndim == 0 else v.reshape([-1 if k == axis else 1 for k in range(ndim)])


def np_quantize(v: list[np.ndarray], a: dict) -> np.ndarray:
    """numpy ``qnn.quantize`` (float32 division, round half to even, saturation)."""
    x, scale, zp = v
    axis = a.get("axis", 1)
    lo, hi = int8.INT8_RANGE[zp.dtype.name]
    q = np.rint(x.astype(np.float32) / _np_per_axis(scale, x.ndim, axis).astype(np.float32))
    q = q.astype(np.int64) + _np_per_axis(zp, x.ndim, axis)
    return np.clip(q, lo, hi).astype(zp.dtype)


def np_dequantize(v: list[np.ndarray], a: dict) -> np.ndarray:
    """numpy ``qnn.dequantize``."""
    x, scale, zp = v
    axis = a.get("axis", 1)
    d = x.astype(np.int32) - _np_per_axis(zp, x.ndim, axis).astype(np.int32)
    return (d.astype(np.float32) * _np_per_axis(scale, x.ndim, axis)).astype(np.float32)


def _dequantized(x: te.Tensor, i: tuple, scale: float, zero_point: int) -> tir.PrimExpr:
    return (x(*i).astype("int32") - zero_point).astype("float32") * tir.const(scale, "float32")


def _quantized(y: tir.PrimExpr, scale: float, zero_point: int, dtype: str,
               relu: bool) -> tir.PrimExpr:
    lo, hi = int8.INT8_RANGE[dtype]
    if relu:
        y = tir.max(y, tir.const(0.0, "float32"))
    y = y / tir.const(scale, "float32")
    return int8.saturating_round(y, zero_point, lo, hi).astype(dtype)


def add(ts: list[te.Tensor], a: dict) -> te.Tensor:
    """The ``qnn.add`` compute (same-shaped operands)."""
    lhs, rhs = ts
    if tuple(lhs.shape) != tuple(rhs.shape):
        raise NotImplementedError(f"qnn.add: operands of shapes {list(lhs.shape)} and "
                                  f"{list(rhs.shape)}; only same-shaped operands")
    return te.compute(lhs.shape, lambda *i: _quantized(
        _dequantized(lhs, i, a["lhs_scale"], a["lhs_zero_point"])
        + _dequantized(rhs, i, a["rhs_scale"], a["rhs_zero_point"]),
        a["output_scale"], a["output_zero_point"], a["out_dtype"], a.get("relu", False)),
        name="T_qnn_add", tag="elemwise")


def np_add(v: list[np.ndarray], a: dict) -> np.ndarray:
    """numpy ``qnn.add``: the QDQ pattern it replaces, in float32."""
    lhs, rhs = (np_dequantize([x, np.float32(a[f"{k}_scale"]), np.int32(a[f"{k}_zero_point"])],
                              {}) for x, k in zip(v, ("lhs", "rhs"), strict=True))
    y = lhs + rhs
    if a.get("relu", False):
        y = np.maximum(y, np.float32(0))
    zp = np.array(a["output_zero_point"], a["out_dtype"])
    return np_quantize([y, np.float32(a["output_scale"]), zp], {})


def _block(layout: str) -> int:
    """The channel block of ``NCHW{b}c`` (0 for ``NCHW``)."""
    found = re.fullmatch(r"NCHW(?:(\d+)c)?", layout)
    if found is None:
        raise NotImplementedError(f"qnn.conv2d: out_layout {layout!r}; only NCHW or NCHW{{b}}c")
    return int(found.group(1) or 0)


def conv2d(ts: list[te.Tensor], a: dict) -> te.Tensor:
    """The ``qnn.conv2d`` compute: NCHW or blocked ``NCHW{b}c`` data (its rank says which),
    the output in ``out_layout`` (NCHW by default)."""
    return int8.conv2d_NCHWc_int8(*ts, a["channels"], a["strides"], tuple(a["padding"]),
                                  a["dilation"], a["input_zero_point"],
                                  a["output_zero_point"], a["out_dtype"], a.get("relu", False),
                                  _block(a.get("out_layout", "NCHW")))


def dense(ts: list[te.Tensor], a: dict) -> te.Tensor:
    """The ``qnn.dense`` compute."""
    return int8.dense_int8(*ts, a["output_zero_point"], a["out_dtype"], a.get("relu", False))

