"""The ONNX importer's quantization operators: QuantizeLinear, DequantizeLinear (QDQ models:
per-tensor or per-axis scales and zero points, int8 / uint8), QLinearConv and QLinearMatMul.

QuantizeLinear / DequantizeLinear become ``qnn.quantize`` / ``qnn.dequantize`` (their scales
and zero points constants); QLinearConv and QLinearMatMul become the same
dequantize -> Conv / MatMul -> quantize pattern, so one graph rewrite
(:func:`kiln.relay.quantize.fake_quantization_to_integer`) turns all three forms into int8
kernels. Other forms (blocked quantization, 4- and 16-bit and float8 types, computed scales,
``saturate=0``) raise :class:`OpNotImplemented` naming what is missing.
"""

from __future__ import annotations

import numpy as np

from ..graph import Node, call, const
from .onnx_check import OnnxImportError, OpNotImplemented, axis

#: the quantized element types kiln compiles
QUANTIZED_DTYPES = ("int8", "uint8")


def _scale_zero_point(x: Node, scale: Node, zp: Node | None, at: dict, what: str,
                      zp_default: str) -> tuple[Node, Node, int]:
    """The constant scale and zero point of a Quantize/DequantizeLinear and its axis
    (normalized), checked: per tensor, or 1-D along ``axis``; float32 scales, 8-bit zero
    points (int32 for a dequantized bias with a zero point of 0)."""
    if at.get("block_size", 0):
        raise OpNotImplemented(f"{what} with block_size {at['block_size']} (blocked "
                               f"quantization)")
    if not scale.is_const or (zp is not None and not zp.is_const):
        raise OpNotImplemented(f"{what} with a computed scale or zero point (kiln needs "
                               f"constants)")
    s = scale.value
    if s.dtype != np.float32:
        raise OpNotImplemented(f"{what} with a {s.dtype} scale (only float32)")
    z = zp.value if zp is not None else np.zeros(s.shape, zp_default)
    if z.size != s.size:
        raise OnnxImportError(f"{what}: the zero point's shape {list(z.shape)} does not fit "
                              f"the scale's {list(s.shape)}")
    z = z.reshape(s.shape)
    rank = len(x.shape)
    if s.size == 1 and s.ndim <= 1:  # per tensor: the axis is not read
        s, z, ax = s.reshape(()), z.reshape(()), 0
    else:
        ax = axis(at.get("axis", 1), rank, f"{what} axis") if rank else 0
        if s.ndim != 1 or rank == 0 or s.shape[0] != x.shape[ax]:
            raise OnnxImportError(f"{what}: a scale of shape {list(s.shape)} is neither per "
                                  f"tensor nor per axis {ax} of the shape {list(x.shape)}")
    if not np.all(s > 0):
        raise OnnxImportError(f"{what}: scales must be positive")
    return const(s, scale.name), const(z, getattr(zp, "name", "") or f"{scale.name}_zp"), ax


class QuantizedConverters:
    """Converters of the quantization operators; the ONNX importer's converter class
    inherits them (each ``(inputs, attrs, name) -> Node``, as its other converters)."""

    def QuantizeLinear(self, xs, at, name):  # noqa: N802
        x, scale = xs[0], xs[1]
        zp = xs[2] if len(xs) > 2 else None
        out = at.get("output_dtype", 0)
        if not at.get("saturate", 1) or out:
            raise OpNotImplemented("QuantizeLinear with saturate=0 or output_dtype (float8 "
                                   "outputs)")
        s, z, ax = _scale_zero_point(x, scale, zp, at, "QuantizeLinear", "uint8")
        if z.dtype not in QUANTIZED_DTYPES:
            raise OpNotImplemented(f"QuantizeLinear to {z.dtype} (kiln quantizes to "
                                   f"{' or '.join(QUANTIZED_DTYPES)})")
        return call("qnn.quantize", [x, s, z], name=name, axis=ax)

    def DequantizeLinear(self, xs, at, name):  # noqa: N802
        x, scale = xs[0], xs[1]
        zp = xs[2] if len(xs) > 2 else None
        s, z, ax = _scale_zero_point(x, scale, zp, at, "DequantizeLinear", x.dtype)
        if x.dtype not in QUANTIZED_DTYPES and not (x.dtype == "int32" and not z.value.any()):
            raise OpNotImplemented(f"DequantizeLinear of {x.dtype} (kiln dequantizes "
                                   f"{', '.join(QUANTIZED_DTYPES)}, and int32 biases)")
        return call("qnn.dequantize", [x, s, z], name=name, axis=ax)

    def _dequantized(self, x, scale, zp, name, ax=1):
        return self.DequantizeLinear([x, scale, zp], {"axis": ax}, name)

    def QLinearConv(self, xs, at, name):  # noqa: N802
        """``quantize(Conv(dequantize(x), dequantize(w), dequantize(B)))``; the int32 bias
        has the scale ``x_scale * w_scale`` and no zero point."""
        x, xs_, xz, w, ws, wz, ys, yz = xs[:8]
        dx = self._dequantized(x, xs_, xz, f"{name}_x", 1)
        dw = self._dequantized(w, ws, wz, f"{name}_w", 0)
        ops = [dx, dw]
        if len(xs) > 8:
            b = xs[8]
            bs = const((xs_.value.astype(np.float32) * ws.value.astype(np.float32))
                       .astype(np.float32), f"{name}_bias_scale")
            ops.append(self._dequantized(b, bs, None, f"{name}_b", 0))
        y = self.Conv(ops, at, f"{name}_float")
        return self.QuantizeLinear([y, ys, yz], {"axis": 1}, name)

    def QLinearMatMul(self, xs, at, name):  # noqa: N802
        """``quantize(MatMul(dequantize(a), dequantize(b)))``; a per-column ``b`` scale is
        per axis 1 of a 2-D ``b``."""
        a, as_, az, b, bs, bz, ys, yz = xs
        da = self._dequantized(a, as_, az, f"{name}_a", 1)
        db = self._dequantized(b, bs, bz, f"{name}_b", len(b.shape) - 1)
        y = self.MatMul([da, db], at, f"{name}_float")
        return self.QuantizeLinear([y, ys, yz], {"axis": 1}, name)
