"""int8 convolution and dense for x86, requantization fused into the kernel.

Both computes take 8-bit operands (``uint8`` or ``int8`` data, ``int8`` weights), accumulate
``int32(data) * int32(weight)`` products in ``int32``, add an ``int32`` bias, and requantize
in the same kernel (:func:`requantize`): ``acc * multiplier[o]`` in float32, rounded half to
even (C's ``nearbyintf``, as onnxruntime's QLinearConv), plus the output zero point, then a
saturating cast to the output type (``relu=True`` also clamps below at the zero point).

Layout: the reduction runs over the innermost, contiguous axis of both operands: a dense
weight is ``[N, K]``; a convolution reads its input as padded ``NHWC`` (a stage of the
kernel, padding with the input zero point, the quantized 0.0) and its weight as ``OHWI``
(packed at compile time by the graph rewrite), so each output is one dot product of
``KH`` contiguous runs of ``KW*C`` bytes (``KH*KW`` runs of ``C`` with a width dilation).
The schedules keep that dot product innermost, several output channels' accumulators in
registers; with ``-O3 -march=native`` GCC vectorizes it with the
target's widening multiply-adds: ``vpdpbusd`` (``uint8 x int8``) on AVX-512 VNNI / AVX-VNNI,
``vpmaddwd`` chains on AVX2 (docs/precision.md). Output: ``NCHW`` / ``[M, N]``.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.topi.utils import all_ops, as_list, get_const_tuple

#: the 8-bit types, with their saturation bounds
INT8_RANGE: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}


def _check_8bit(what: str, dtype: str, allowed=("int8", "uint8")) -> None:
    if dtype not in allowed:
        raise NotImplementedError(f"int8 kernels: {what} must be {' or '.join(allowed)}, "
                                  f"got {dtype}")


def requantize(acc: te.Tensor, multiplier: te.Tensor, axis: int, output_zero_point: int,
               out_dtype: str, relu: bool = False) -> te.Tensor:
    """``saturate(nearbyint(acc * multiplier[i[axis]]) + output_zero_point)`` as
    ``out_dtype`` (int8/uint8); ``relu`` raises the lower bound to the zero point."""
    _check_8bit("the output type", out_dtype)
    lo, hi = INT8_RANGE[out_dtype]
    if relu:
        lo = max(lo, output_zero_point)

    def f(*i):
        y = tir.call_pure_extern("float32", "nearbyintf",
                                 acc(*i).astype("float32") * multiplier[i[axis]])
        q = y.astype("int32") + output_zero_point
        return tir.min(tir.max(q, lo), hi).astype(out_dtype)

    return te.compute(acc.shape, f, name="T_requantize", tag="elemwise")


def dense_int8(data: te.Tensor, weight: te.Tensor, bias: te.Tensor, multiplier: te.Tensor,
               output_zero_point: int, out_dtype: str, relu: bool = False) -> te.Tensor:
    """``[M, K] x [N, K]^T + bias[N]`` in int32, requantized per output column."""
    _check_8bit("the data", data.dtype)
    _check_8bit("the weight", weight.dtype, ("int8",))
    m, k = data.shape
    n, _ = weight.shape
    rk = te.reduce_axis((0, k), name="k")
    acc = te.compute(
        (m, n), lambda i, j: te.sum(data[i, rk].astype("int32") * weight[j, rk].astype("int32"),
                                    axis=rk), name="T_dense_int8_acc", tag="dense_int8")
    acc = te.compute((m, n), lambda i, j: acc[i, j] + bias[j], name="T_bias", tag="broadcast")
    return requantize(acc, multiplier, 1, output_zero_point, out_dtype, relu)


def conv2d_int8_nchw(data: te.Tensor, kernel_ohwi: te.Tensor, bias: te.Tensor,
                     multiplier: te.Tensor, strides, padding, dilation,
                     input_zero_point: int, output_zero_point: int, out_dtype: str,
                     relu: bool = False) -> te.Tensor:
    """2-D convolution of NCHW 8-bit ``data`` with an ``OHWI`` int8 kernel, plus ``bias[O]``
    in int32, requantized per output channel; ``padding`` is (top, left, bottom, right) and
    pads with ``input_zero_point``."""
    _check_8bit("the data", data.dtype)
    _check_8bit("the weight", kernel_ohwi.dtype, ("int8",))
    n, c, h, w = get_const_tuple(data.shape)
    o, kh, kw, ci = get_const_tuple(kernel_ohwi.shape)
    if ci != c:
        raise ValueError(f"conv2d_int8: the kernel has {ci} input channels, the data {c}")
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding
    hp, wp = h + top + bottom, w + left + right
    oh = (hp - (kh - 1) * dh - 1) // sh + 1
    ow = (wp - (kw - 1) * dw - 1) // sw + 1
    zero = tir.const(input_zero_point, data.dtype)
    # padded NHWC with W and C merged: a row's KW*C window is one contiguous run
    rows = te.compute(
        (n, hp, wp * c),
        lambda b, y, j: tir.if_then_else(
            tir.all(y >= top, y < top + h, j >= left * c, j < (left + w) * c),
            data[b, j % c, y - top, j // c - left], zero),
        name="T_padded_rows", tag="injective")
    ry = te.reduce_axis((0, kh), name="ry")
    if dw == 1:
        r = te.reduce_axis((0, kw * c), name="r")
        acc = te.compute(
            (n, o, oh, ow),
            lambda b, f, y, x: te.sum(
                rows[b, y * sh + ry * dh, x * sw * c + r].astype("int32")
                * kernel_ohwi[f, ry, r // c, r % c].astype("int32"), axis=[ry, r]),
            name="T_conv2d_int8_acc", tag="conv2d_int8")
    else:
        rx = te.reduce_axis((0, kw), name="rx")
        rc = te.reduce_axis((0, c), name="rc")
        acc = te.compute(
            (n, o, oh, ow),
            lambda b, f, y, x: te.sum(
                rows[b, y * sh + ry * dh, (x * sw + rx * dw) * c + rc].astype("int32")
                * kernel_ohwi[f, ry, rx, rc].astype("int32"), axis=[ry, rx, rc]),
            name="T_conv2d_int8_acc", tag="conv2d_int8")
    acc = te.compute(acc.shape, lambda b, f, y, x: acc[b, f, y, x] + bias[f], name="T_bias",
                     tag="broadcast")
    return requantize(acc, multiplier, 1, output_zero_point, out_dtype, relu)


#: output channels computed together: their dot products share each load of the input
OUTPUT_BLOCK = 4


def _schedule_int8(outs, tag: str) -> te.Schedule:
    """The int8 kernel ending in ``outs``: the batch and blocks of :data:`OUTPUT_BLOCK`
    output channels (2 or 1 where 4 does not divide) fused and parallel; per output pixel
    the block's accumulators computed together (the reduction outside, the block unrolled
    inside, so GCC vectorizes one loop of several dot products sharing each input load);
    everything between inlined; the convolution's padded-rows stage parallel on its own."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    out = outs[0]
    acc = None
    for op in all_ops(outs):
        if getattr(op, "tag", "") == tag:
            acc = op
        elif op not in [t.op for t in outs] and isinstance(op, te.ComputeOp) \
                and op.name != "T_padded_rows":
            s[op].compute_inline()
    if acc is None:
        raise NotImplementedError(f"schedule_{tag}: no {tag} operation in the outputs")
    axes = list(s[out].op.axis)
    channels = get_const_tuple(out.shape)[1]
    block = next(b for b in (OUTPUT_BLOCK, 2, 1) if channels % b == 0)
    co, ci = s[out].split(axes[1], factor=block)
    s[out].reorder(*axes[:1], co, *axes[2:], ci)
    fused = s[out].fuse(axes[0], co)
    s[out].parallel(fused)
    s[acc].compute_at(s[out], axes[-1] if len(axes) == 4 else fused)
    f = s[acc].op.axis[1]
    s[acc].reorder(*s[acc].op.reduce_axis, f)
    s[acc].unroll(f)
    for op in all_ops(outs):
        if op.name == "T_padded_rows":
            b, y, _ = s[op].op.axis
            s[op].parallel(s[op].fuse(b, y))
    return s


def schedule_conv2d_int8(outs) -> te.Schedule:
    """Schedule of :func:`conv2d_int8_nchw` and its elementwise tail."""
    return _schedule_int8(outs, "conv2d_int8")


def schedule_dense_int8(outs) -> te.Schedule:
    """Schedule of :func:`dense_int8` and its elementwise tail."""
    return _schedule_int8(outs, "dense_int8")
