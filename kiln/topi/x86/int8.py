"""int8 convolution and dense for x86, requantization fused into the kernel.

Both computes take 8-bit operands (``uint8`` or ``int8`` data, ``int8`` weights), accumulate
``int32(data) * int32(weight)`` products in ``int32``, add an ``int32`` bias, and requantize
in the same kernel (:func:`requantize`): ``acc * multiplier[o]`` in float32, rounded half to
even (the bits of C's ``nearbyintf``, as onnxruntime's QLinearConv, in arithmetic that
vectorizes: :func:`saturating_round`), plus the output zero point, then a saturating cast
to the output type (``relu=True`` also clamps below at the zero point).

Convolution (:func:`conv2d_NCHWc_int8`; NCHW or blocked ``NCHW{b}c`` in and out, the
blocked layout being the one int8 activations keep between layers): the weight is packed
at compile time (:func:`pack_conv2d_weight`, ``[O/16, I/4, KH, KW, 16, 4]``); the input is
read as blocks of channels side by side per pixel (``[N, C/cb, H', W', cb]`` uint8, padded
with the input zero point, the quantized 0.0): blocked uint8 data without padding in place,
else through a first stage copying it padded (NCHW data into blocks of ``cb`` 4, or 64 for
AMX: :func:`.int8_intrin.channel_block`; int8 data shifted to uint8,
:func:`unsigned_zero_point`); the main stage computes, per output row and block of 16
channels, the int32 accumulators with the micro-kernel of :mod:`.int8_intrin` (AMX-INT8
tiles, ``vpdpbusd`` on AVX-512 VNNI / AVX-VNNI, ``vpmaddwd`` on AVX2) and requantizes them
in its epilogue. Dense: ``[M, K] x [N, K]^T``, the reduction innermost, which GCC
vectorizes with the target's widening multiply-adds. docs/precision.md.
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.topi.utils import all_ops, as_list, get_const_tuple

from .int8_intrin import (
    IC_BLOCK,
    OC_BLOCK,
    channel_block,
    conv_int8_intrin,
    conv_int8_source,
    kernel_for,
    row_block,
    weight_at,
)

#: the 8-bit types, with their saturation bounds
INT8_RANGE: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}


def _check_8bit(what: str, dtype: str, allowed=("int8", "uint8")) -> None:
    if dtype not in allowed:
        raise NotImplementedError(f"int8 kernels: {what} must be {' or '.join(allowed)}, "
                                  f"got {dtype}")


#: 1.5 * 2**23: a float32 of magnitude under 2**22 plus this lies in [2**23, 2**24), where
#: float32 holds integers only, so the addition rounds it half to even
_ROUNDING_MAGIC = 12582912.0
#: the magnitude :func:`saturating_round` clamps to first: the magic addition rounds
#: exactly below it, and any value beyond saturates the 8-bit output anyway
_ROUNDING_GUARD = 2.0 ** 22


def saturating_round(y: tir.PrimExpr, zero_point: int, lo: int, hi: int) -> tir.PrimExpr:
    """``min(max(nearbyint(y) + zero_point, lo), hi)`` in int32 for a float32 ``y``, bit for
    bit, in arithmetic the vectorizer turns into vector lanes (a ``nearbyintf`` call keeps
    the loop scalar): ``y`` clamped to +-2**22, then ``(y + 1.5 * 2**23) - 1.5 * 2**23``
    rounds it half to even (the clamp also keeps the C compiler from contracting the
    product that made ``y`` and the addition into one fused multiply-add, which would round
    once instead of twice). The integer clamp bounds the result, so the simplifier drops
    an 8-bit consumer's ``int32(uint8(...))`` round trip of it."""
    guard = tir.const(_ROUNDING_GUARD, "float32")
    magic = tir.const(_ROUNDING_MAGIC, "float32")
    r = (tir.min(tir.max(y, -guard), guard) + magic) - magic
    return tir.min(tir.max(r.astype("int32") + zero_point, lo), hi)


def requantize(acc: te.Tensor, multiplier: te.Tensor, axis: int, output_zero_point: int,
               out_dtype: str, relu: bool = False, block: int = 0) -> te.Tensor:
    """``saturate(nearbyint(acc * multiplier[o]) + output_zero_point)`` as ``out_dtype``
    (int8/uint8, :func:`saturating_round`), ``o`` the channel ``i[axis]`` (of a blocked
    ``acc``, whose last axis holds ``block`` channels: ``i[axis] * block + i[-1]``);
    ``relu`` raises the lower bound to the zero point."""
    _check_8bit("the output type", out_dtype)
    lo, hi = INT8_RANGE[out_dtype]
    if relu:
        lo = max(lo, output_zero_point)

    def f(*i):
        o = i[axis] * block + i[-1] if block else i[axis]
        y = acc(*i).astype("float32") * multiplier[o]
        return saturating_round(y, output_zero_point, lo, hi).astype(out_dtype)

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


def unsigned_zero_point(dtype: str, zero_point: int) -> int:
    """The zero point of ``dtype`` data as the convolution computes it: uint8 data as it
    is; int8 data shifted by 128 to uint8 (``x + 128``: the instructions multiply unsigned
    by signed bytes, TVM's legalization of int8 data on x86)."""
    return zero_point + (128 if dtype == "int8" else 0)


def pack_conv2d_weight(w_oihw: np.ndarray) -> np.ndarray:
    """An ``OIHW`` int8 weight in the convolution's packed layout ``[O/16, I/4, KH, KW, 16,
    4]`` (:data:`.int8_intrin.OC_BLOCK` output channels by
    :data:`.int8_intrin.IC_BLOCK` input channels per tap: the 64 bytes one ``vpdpbusd``
    reads), both channel counts padded with zero weights."""
    o, c, kh, kw = w_oihw.shape
    ob, cb = -(-o // OC_BLOCK), -(-c // IC_BLOCK)
    w = np.zeros((ob * OC_BLOCK, cb * IC_BLOCK, kh, kw), np.int8)
    w[:o, :c] = w_oihw
    w = w.reshape(ob, OC_BLOCK, cb, IC_BLOCK, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 2, 4, 5, 1, 3))


def _padded_input(data: te.Tensor, channels: int, padding, zero_point: int
                  ) -> tuple[te.Tensor, int]:
    """The convolution's input as the micro-kernel reads it, ``[N, C/cb, H', W', cb]``
    uint8 padded with the zero point, and ``cb``. NCHW data is copied into blocks of
    :func:`.int8_intrin.channel_block` channels; blocked ``NCHW{b}c`` data (``b`` a
    multiple of 4) keeps its blocks: copied only to pad it or to shift int8 to uint8,
    else read in place."""
    top, left, bottom, right = padding
    blocked = len(data.shape) == 5
    if blocked:
        n, cq, h, w, cb = get_const_tuple(data.shape)
        if cb % IC_BLOCK:
            raise NotImplementedError(f"conv2d_int8: input blocks of {cb} channels; the "
                                      f"kernels read blocks of a multiple of {IC_BLOCK}")
        if data.dtype == "uint8" and not any(padding):
            return data, cb
    else:
        n, c, h, w = get_const_tuple(data.shape)
        cb = channel_block(c)
        cq = -(-c // IC_BLOCK) * IC_BLOCK // cb
    zero = tir.const(unsigned_zero_point(data.dtype, zero_point), "uint8")

    def unsigned(v):
        return (v.astype("int32") + 128).astype("uint8") if data.dtype == "int8" else v

    def read(b, q, y, x, i):
        if blocked:
            return data[b, q, y, x, i]
        return data[b, tir.min(q * cb + i, channels - 1), y, x]

    def inside(q, y, x, i):
        return tir.all(y >= top, y < top + h, x >= left, x < left + w,
                       *(() if blocked else (q * cb + i < channels,)))

    padded = te.compute(
        (n, cq, h + top + bottom, w + left + right, cb),
        lambda b, q, y, x, i: tir.if_then_else(
            inside(q, y, x, i), unsigned(read(b, q, y - top, x - left, i)), zero),
        name="T_int8_padded", tag="injective")
    return padded, cb


def conv2d_NCHWc_int8(data: te.Tensor, packed: te.Tensor, bias: te.Tensor,
                      multiplier: te.Tensor, channels: int, strides, padding, dilation,
                      input_zero_point: int, output_zero_point: int, out_dtype: str,
                      relu: bool = False, out_block: int = 0) -> te.Tensor:
    """2-D convolution of 8-bit ``data`` (NCHW, or blocked ``NCHW{b}c`` with ``b`` a
    multiple of 4) with a weight from :func:`pack_conv2d_weight` (``channels`` outputs of
    ``C`` input channels), plus ``bias[O]`` in int32, requantized per output channel to
    ``out_dtype``: NCHW, or ``NCHW{out_block}c`` (``out_block`` a multiple of 16: each
    block of 16 accumulators is stored contiguous). ``padding`` is (top, left, bottom,
    right) and pads with ``input_zero_point``. int8 data is computed shifted to uint8
    (:func:`unsigned_zero_point`): the caller's bias holds ``-(zx + 128) * sum(w[o])``
    for it (``-zx * sum(w[o])`` for uint8 data)."""
    _check_8bit("the data", data.dtype)
    _check_8bit("the weight", packed.dtype, ("int8",))
    shape = get_const_tuple(data.shape)
    c = shape[1] * shape[4] if len(shape) == 5 else shape[1]
    h, w = shape[2], shape[3]
    ob, c4, kh, kw, _, _ = get_const_tuple(packed.shape)
    if c4 != -(-c // IC_BLOCK) or ob != -(-channels // OC_BLOCK):
        raise ValueError(f"conv2d_int8: the packed weight {get_const_tuple(packed.shape)} is "
                         f"not that of {channels} outputs of {c} input channels")
    if out_block % OC_BLOCK or channels % max(out_block, 1):
        raise NotImplementedError(f"conv2d_int8: output blocks of {out_block} channels for "
                                  f"{channels} outputs; blocks are multiples of {OC_BLOCK} "
                                  f"that divide the outputs")
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    padded, cb = _padded_input(data, c, padding, input_zero_point)
    rq = te.reduce_axis((0, c4 * IC_BLOCK // cb), name="rq")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    ri = te.reduce_axis((0, cb), name="ri")
    acc = te.compute(
        (shape[0], ob, oh, ow, OC_BLOCK),
        lambda b, g, y, x, j: te.sum(
            padded[b, rq, y * sh + ry * dh, x * sw + rx * dw, ri].astype("int32")
            * weight_at(packed, (g,), rq, ry, rx, j, ri, cb).astype("int32"),
            axis=[rq, ry, rx, ri]),
        name="T_conv2d_int8_acc", tag="conv2d_int8",
        attrs={"stride": sw, "kernel": (kh, kw), "dilation": (dh, dw), "channel_block": cb})
    if out_block:
        per = out_block // OC_BLOCK
        acc = te.compute((shape[0], channels // out_block, oh, ow, out_block),
                         lambda b, g, y, x, j: acc[b, g * per + j // OC_BLOCK, y, x,
                                                   j % OC_BLOCK] + bias[g * out_block + j],
                         name="T_bias", tag="broadcast")
    else:
        acc = te.compute((shape[0], channels, oh, ow), lambda b, f, y, x:
                         acc[b, f // OC_BLOCK, y, x, f % OC_BLOCK] + bias[f], name="T_bias",
                         tag="broadcast")
    return requantize(acc, multiplier, 1, output_zero_point, out_dtype, relu, out_block)


def conv2d_int8_nchw(data: te.Tensor, packed: te.Tensor, bias: te.Tensor,
                     multiplier: te.Tensor, channels: int, strides, padding, dilation,
                     input_zero_point: int, output_zero_point: int, out_dtype: str,
                     relu: bool = False) -> te.Tensor:
    """:func:`conv2d_NCHWc_int8` of NCHW data to an NCHW output."""
    return conv2d_NCHWc_int8(data, packed, bias, multiplier, channels, strides, padding,
                             dilation, input_zero_point, output_zero_point, out_dtype, relu)


#: output channels of a dense computed together: their dot products share each input load
OUTPUT_BLOCK = 4


def _inline_all_but(s: te.Schedule, outs: list[te.Tensor], keep: tuple[str, ...], tag: str):
    """Inline every stage of ``outs`` but the outputs and the stages named ``keep``; return
    the operation tagged ``tag``."""
    acc = None
    for op in all_ops(outs):
        if getattr(op, "tag", "") == tag:
            acc = op
        elif op not in [t.op for t in outs] and isinstance(op, te.ComputeOp) \
                and op.name not in keep:
            s[op].compute_inline()
    if acc is None:
        raise NotImplementedError(f"schedule_{tag}: no {tag} operation in the outputs")
    return acc


def schedule_conv2d_int8(outs) -> te.Schedule:
    """Schedule of :func:`conv2d_NCHWc_int8` and its elementwise tail, two parallel stages
    (one where blocked uint8 data needs no padding and is read in place):

    * the padded ``[N, C/cb, H', W', cb]`` copy of the input, parallel over its rows;
    * per (batch, block of 16 output channels, output row), in parallel: the row's int32
      accumulators ``[OW, 16]``, tensorized in runs of :func:`.int8_intrin.row_block`
      pixels by the micro-kernel of :mod:`.int8_intrin` (AMX, VNNI, AVX2 or C, by the
      target), then the row's bias, requantization and tail (the epilogue), pixel by pixel
      (each pixel's 16 accumulators are contiguous), into the output: 16 contiguous bytes
      per pixel in ``NCHW{ob}c``, computed as 16 vector lanes (:func:`saturating_round`;
      a tail the vectorizer cannot express stays a scalar loop), scattered over 16
      channel planes in NCHW. Where 16 does
      not divide the output channels (NCHW only), the accumulators are plain loops (GCC
      vectorizes them): the last block is partial."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    acc = _inline_all_but(s, outs, ("T_int8_padded",), "conv2d_int8")
    padded = next((op for op in all_ops(outs) if op.name == "T_int8_padded"), None)
    if padded is not None:  # blocked uint8 data without padding is read in place
        b, q, y, _, _ = s[padded].op.axis
        s[padded].parallel(s[padded].fuse(b, q, y))
    out = outs[0]
    if len(out.shape) == 5:  # NCHW{ob}c: each block of 16 channels of a pixel contiguous
        b, g, y, x, f = s[out].op.axis
        fo, fi = s[out].split(f, factor=OC_BLOCK)
        s[out].reorder(b, g, fo, y, x, fi)
        s[out].vectorize(fi)
        row = s[out].fuse(b, g, fo, y)
    else:
        b, f, y, x = s[out].op.axis
        fo, fi = s[out].split(f, factor=OC_BLOCK)
        s[out].reorder(b, fo, y, x, fi)
        row = s[out].fuse(b, fo, y)
    s[out].parallel(row)
    s[acc].compute_at(s[out], row)
    _, _, _, ax, aj = s[acc].op.axis
    if len(out.shape) == 4 and get_const_tuple(out.shape)[1] % OC_BLOCK:  # a partial block
        s[acc].reorder(ax, *s[acc].op.reduce_axis[:3], aj, s[acc].op.reduce_axis[3])
        return s
    ow = get_const_tuple(acc.output(0).shape)[3]
    c4 = get_const_tuple(acc.input_tensors[1].shape)[1]
    cb = acc.attrs["channel_block"]
    rows = row_block(ow, kernel_for(cb))
    xo, xi = s[acc].split(ax, factor=rows)
    s[acc].reorder(xo, xi, aj, *s[acc].op.reduce_axis)
    shape = (rows, c4, acc.attrs["kernel"], acc.attrs["stride"], acc.attrs["dilation"], cb)
    s[acc].tensorize(xi, conv_int8_intrin(*shape))
    s[out].pragma(row, "import_c", conv_int8_source(*shape))
    return s


def schedule_dense_int8(outs) -> te.Schedule:
    """Schedule of :func:`dense_int8` and its elementwise tail: the batch and blocks of
    :data:`OUTPUT_BLOCK` output columns (2 or 1 where 4 does not divide) fused and parallel;
    per row the block's accumulators computed together (the reduction outside, the block
    unrolled inside, so GCC vectorizes one loop of several dot products sharing each input
    load, with the target's widening multiply-adds); everything between inlined."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    acc = _inline_all_but(s, outs, (), "dense_int8")
    out = outs[0]
    i, j = s[out].op.axis
    block = next(b for b in (OUTPUT_BLOCK, 2, 1) if get_const_tuple(out.shape)[1] % b == 0)
    jo, ji = s[out].split(j, factor=block)
    s[out].reorder(i, jo, ji)
    fused = s[out].fuse(i, jo)
    s[out].parallel(fused)
    s[acc].compute_at(s[out], fused)
    f = s[acc].op.axis[1]
    s[acc].reorder(*s[acc].op.reduce_axis, f)
    s[acc].unroll(f)
    return s
