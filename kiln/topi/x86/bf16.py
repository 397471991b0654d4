"""bf16 convolution and dense for x86: bfloat16 operands, float32 accumulation and output.

Both computes take float32 data and a weight packed once, at compile time, into bf16 bits
(``uint16``; :func:`pack_conv2d_weight`, :func:`pack_dense_weight`): ``[N, K']``, one row
per output channel, the reduction padded with zeros to ``K'``, a multiple of 32
(:func:`aligned_reduction`). Inside the kernel packing stages round the data to bf16 (to
nearest even) into the pair-interleaved ("VNNI") layout the bf16 dot-product instructions
read; products of bf16 values are exact in float32 and summed in float32; the output (plus
the float32 bias) is float32, so the graph's elementwise tails stay float32.

Convolution (NCHW in, NCHW out, any stride, padding and dilation, ``groups == 1``): a padded
bf16 copy of the input with each row's channel pairs interleaved (``[N, H', C_even/2, W',
2]``, channels padded to an even ``C_even``), the im2col matrix ``cols[b, k/2, y*OW + x,
k%2]`` (``k`` over ``KH x KW x C_even``: per kernel tap and channel pair, a contiguous run
along the row for stride 1), and the accumulator ``acc[b, f, y*OW + x] = W @ cols``
computed in ``mr x nr`` blocks by the micro-kernel of :mod:`.bf16_intrin` (AMX tiles or
AVX-512 vectors); the output rows are contiguous in it. Dense: ``[M, K] x [N, K]^T`` the
same way (``acc[0, n, m]``), the data rounded in one stage.

The schedules (:func:`schedule_conv2d_bf16`, :func:`schedule_dense_bf16`) need AVX-512 BF16
(:func:`.bf16_intrin.check_bf16_cpu` raises otherwise).
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.target import current_cpu
from kiln.topi.utils import all_ops, as_list, get_const_tuple

from .bf16_intrin import (
    K_ALIGN,
    LANES,
    bf16_gemm_intrin,
    bf16_gemm_source,
    check_bf16_cpu,
    round_to_bf16,
    to_float32,
    uses_amx,
)

#: accumulators of one block at most (of AVX-512's 32 registers; the rest hold the panel)
MAX_ACCUMULATORS = 24


def np_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """The bits (``uint16``) of ``x`` rounded to bf16 to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def np_from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bf16 ``bits`` (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def aligned_reduction(k: int) -> int:
    """The reduction length ``k`` padded with zeros to a multiple of ``K_ALIGN`` (32)."""
    return -(-k // K_ALIGN) * K_ALIGN


def _pack_rows(w_nk: np.ndarray) -> np.ndarray:
    """``[N, K]`` float weights -> bf16 bits ``[N, K']`` (zeros pad ``K`` to ``K'``,
    :func:`aligned_reduction`)."""
    n, k = w_nk.shape
    padded = np.zeros((n, aligned_reduction(k)), np.float32)
    padded[:, :k] = w_nk
    return np_to_bf16_bits(padded)


def pack_conv2d_weight(w_oihw: np.ndarray) -> np.ndarray:
    """An ``OIHW`` float weight as the convolution's packed bf16 operand ``[O, K']``:
    reduction index ``k = (ry * KW + rx) * C_even + c``, input channels padded to
    ``C_even``."""
    o, c, kh, kw = w_oihw.shape
    w = np.zeros((o, c + c % 2, kh, kw), np.float32)
    w[:, :c] = w_oihw
    return _pack_rows(w.transpose(0, 2, 3, 1).reshape(o, -1))


def pack_dense_weight(w_nk: np.ndarray) -> np.ndarray:
    """A dense ``[N, K]`` float weight as the packed bf16 operand ``[N, K']``."""
    return _pack_rows(np.asarray(w_nk, np.float32))


def _check_packed(packed: te.Tensor, k: int, n: int, what: str) -> None:
    if tuple(get_const_tuple(packed.shape)) != (n, aligned_reduction(k)):
        raise ValueError(f"{what}: the packed weight {get_const_tuple(packed.shape)} is not "
                         f"that of {n} outputs of {k} reduction steps")


def _gemm(packed: te.Tensor, cols: te.Tensor, name: str, tag: str) -> te.Tensor:
    """``acc[b, f, m] = sum_k f32(W[f, k]) * f32(cols[b, k/2, m, k%2])``: the packed weight
    times each batch's bf16 matrix (``[K'/2, M, 2]``: pairs of reduction steps per column),
    in float32."""
    n = get_const_tuple(packed.shape)[0]
    batch, kc2, m, _ = get_const_tuple(cols.shape)
    k2 = te.reduce_axis((0, kc2), name="k2")
    p = te.reduce_axis((0, 2), name="p")
    return te.compute((batch, n, m), lambda b, f, j: te.sum(
        to_float32(packed[f, 2 * k2 + p]) * to_float32(cols[b, k2, j, p]), axis=[k2, p]),
        name=name, tag=tag)


def conv2d_bf16_nchw(data: te.Tensor, packed: te.Tensor, bias: te.Tensor | None,
                     kernel_size, channels: int, strides, padding, dilation) -> te.Tensor:
    """2-D convolution of float32 NCHW ``data`` with a weight from :func:`pack_conv2d_weight`
    (``kernel_size`` ``(KH, KW)``, ``channels`` outputs), plus ``bias[O]``, in bf16 with
    float32 accumulation; ``padding`` is (top, left, bottom, right). Float32 NCHW out."""
    n, c, h, w = get_const_tuple(data.shape)
    kh, kw = kernel_size
    ce = c + c % 2
    _check_packed(packed, kh * kw * ce, channels, "conv2d_bf16")
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    zero = tir.const(0, "uint16")
    if (kh, kw, sh, sw, top, left, bottom, right) == (1, 1, 1, 1, 0, 0, 0, 0):
        cols = _rows_of_pairs(data, n, c, h * w, lambda b, ci, m: data[b, ci, m // w, m % w],
                              "T_bf16_cols", ow)
        return _conv_output(_gemm(packed, cols, "T_conv2d_bf16_acc", "conv2d_bf16"), bias,
                            (n, channels, oh, ow))
    # [N, H', C_even/2, W', 2]: each row's channel pairs interleaved, padding zeros
    padded = te.compute(
        (n, h + top + bottom, ce // 2, w + left + right, 2),
        lambda b, y, cp, x, p: tir.if_then_else(
            tir.all(2 * cp + p < c, y >= top, y < top + h, x >= left, x < left + w),
            round_to_bf16(data[b, tir.min(2 * cp + p, c - 1), y - top, x - left]), zero),
        name="T_bf16_padded", tag="injective")
    pairs = kh * kw * ce // 2

    def im2col(b, k2, m, p):
        ry = tir.min(k2 // (kw * ce // 2), kh - 1)
        rx, cp = k2 // (ce // 2) % kw, k2 % (ce // 2)
        value = padded[b, m // ow * sh + ry * dh, cp, m % ow * sw + rx * dw, p]
        return value if 2 * pairs % K_ALIGN == 0 else \
            tir.if_then_else(k2 < pairs, value, zero)

    cols = te.compute((n, aligned_reduction(2 * pairs) // 2, oh * ow, 2), im2col,
                      name="T_bf16_cols", tag="injective", attrs={"row": ow})
    return _conv_output(_gemm(packed, cols, "T_conv2d_bf16_acc", "conv2d_bf16"), bias,
                        (n, channels, oh, ow))


def _rows_of_pairs(data: te.Tensor, batch: int, k: int, m: int, read, name: str,
                   row: int) -> te.Tensor:
    """``[batch, K'/2, m, 2]`` bf16 bits: ``read(b, i, j)`` (reduction index ``i`` below
    ``k``, column ``j``) rounded, in pairs of reduction steps per column, zeros past ``k``."""
    zero = tir.const(0, "uint16")
    return te.compute(
        (batch, aligned_reduction(k) // 2, m, 2),
        lambda b, k2, j, p: tir.if_then_else(
            2 * k2 + p < k, round_to_bf16(read(b, tir.min(2 * k2 + p, k - 1), j)), zero),
        name=name, tag="injective", attrs={"row": row})


def _conv_output(acc: te.Tensor, bias: te.Tensor | None, shape: tuple) -> te.Tensor:
    """The NCHW output read from the ``[N, O, OH*OW]`` accumulator, plus the bias."""
    ow = shape[3]
    if bias is None:
        return te.compute(shape, lambda b, f, y, x: acc[b, f, y * ow + x],
                          name="T_conv2d_bf16", tag="injective")
    return te.compute(shape, lambda b, f, y, x: acc[b, f, y * ow + x] + bias[f],
                      name="T_conv2d_bf16", tag="broadcast")


def dense_bf16(data: te.Tensor, packed: te.Tensor, bias: te.Tensor | None,
               units: int) -> te.Tensor:
    """``[M, K] x [N, K]^T + bias[N]`` (``N = units``) in bf16 with float32 accumulation, the
    weight from :func:`pack_dense_weight`. Float32 ``[M, N]`` out."""
    m, k = get_const_tuple(data.shape)
    _check_packed(packed, k, units, "dense_bf16")
    rows = _rows_of_pairs(data, 1, k, m, lambda _, i, j: data[j, i], "T_bf16_rows", m)
    acc = _gemm(packed, rows, "T_dense_bf16_acc", "dense_bf16")
    if bias is None:
        return te.compute((m, units), lambda i, j: acc[0, j, i], name="T_dense_bf16",
                          tag="injective")
    return te.compute((m, units), lambda i, j: acc[0, j, i] + bias[j], name="T_dense_bf16",
                      tag="broadcast")


def block_shape(rows: int, cols: int, amx: bool) -> tuple[int, int]:
    """The micro-kernel's ``(mr, nr)`` for an accumulator of ``rows`` output channels by
    ``cols`` pixels: divisors of both, ``nr`` up to 32 (two AMX tiles, or two vectors);
    ``mr`` up to 32 with ``amx``, else as many as keep ``mr`` times ``nr``'s vectors within
    :data:`MAX_ACCUMULATORS`."""
    nr = max(d for d in range(1, 2 * LANES + 1) if cols % d == 0)
    budget = 32 if amx else MAX_ACCUMULATORS // -(-nr // LANES)
    return max(d for d in range(1, budget + 1) if rows % d == 0), nr


#: the packing stages the schedules place themselves (the others are inlined)
_PACKING = ("T_bf16_padded", "T_bf16_cols", "T_bf16_rows")


def _stages(outs: list[te.Tensor], tag: str):
    """The schedule with every stage inlined but the packing stages, the accumulator
    (tagged ``tag``) and the outputs; returns ``(s, packing stages by name, acc)``."""
    s = te.create_schedule([t.op for t in outs])
    packing, acc = {}, None
    for op in all_ops(outs):
        if getattr(op, "tag", "") == tag:
            acc = op
        elif op.name in _PACKING:
            packing[op.name] = op
        elif op not in [t.op for t in outs] and isinstance(op, te.ComputeOp):
            s[op].compute_inline()
    if acc is None or not packing:
        raise NotImplementedError(f"schedule_{tag}: no {tag} operation in the outputs")
    return s, packing, acc


def _tensorize(s: te.Schedule, acc, cols: int, parallel: bool) -> None:
    """Tensorize the ``[batch, channels, pixels]`` accumulator ``acc`` (``cols`` of its
    pixels where it is computed) in ``mr x nr`` blocks (:func:`block_shape`): loops over the
    batch, the channel blocks and the pixel blocks (fused and parallel if ``parallel``: a
    thread's consecutive blocks share the weight rows), then the micro-kernel over the block
    and the whole reduction."""
    channels, kp = get_const_tuple(acc.input_tensors[0].shape)
    mr, nr = block_shape(channels, cols, uses_amx(current_cpu()))
    b, f, m = s[acc].op.axis
    fo, fi = s[acc].split(f, factor=mr)
    mo, mi = s[acc].split(m, factor=nr)
    s[acc].reorder(b, fo, mo, fi, mi, *s[acc].op.reduce_axis)
    outer = fo
    if parallel:
        outer = s[acc].fuse(b, fo, mo)
        s[acc].parallel(outer)
    s[acc].tensorize(fi, bf16_gemm_intrin(mr, nr, kp // 2))
    s[acc].pragma(outer, "import_c", bf16_gemm_source(mr, nr))


def schedule_conv2d_bf16(outs) -> te.Schedule:
    """Schedule of :func:`conv2d_bf16_nchw` and its elementwise tail. The padded bf16 copy
    of the input first (parallel rows); then, where the output has more pixels than
    channels (the weight is the smaller operand: early layers), per output row (parallel)
    its im2col block, accumulator and output row, the weight read from cache for each row;
    otherwise (late layers) each stage over the whole image, the accumulator's blocks in
    parallel, so that the weight is read once. The im2col copies each kernel tap's run of
    channel pairs along the row; the accumulator is tensorized (:func:`_tensorize`); the
    output rows are contiguous in it."""
    check_bf16_cpu(what="schedule_conv2d_bf16")
    outs = as_list(outs)
    s, packing, acc = _stages(outs, "conv2d_bf16")
    cols = packing["T_bf16_cols"]
    if "T_bf16_padded" in packing:  # not for a pointwise convolution
        pb, py = s[packing["T_bf16_padded"]].op.axis[:2]
        s[packing["T_bf16_padded"]].parallel(s[packing["T_bf16_padded"]].fuse(pb, py))
    _, channels, pixels = get_const_tuple(acc.output(0).shape)
    out = outs[0]
    b, f, y, _ = s[out].op.axis
    cb, ck, cm, _ = s[cols].op.axis
    if channels < pixels:
        s[out].reorder(b, y, f)
        row = s[out].fuse(b, y)
        s[out].parallel(row)
        s[cols].compute_at(s[out], row)
        s[acc].compute_at(s[out], row)
        _tensorize(s, acc, cols.attrs["row"], parallel=False)
    else:
        cy, cx = s[cols].split(cm, factor=cols.attrs["row"])
        s[cols].reorder(cb, cy, ck, cx)
        s[cols].parallel(s[cols].fuse(cb, cy))
        _tensorize(s, acc, pixels, parallel=True)
        s[out].parallel(s[out].fuse(b, f))
    return s


def schedule_dense_bf16(outs) -> te.Schedule:
    """Schedule of :func:`dense_bf16` and its elementwise tail: the rounded rows, then the
    accumulator tensorized (:func:`_tensorize`), then the output rows, each parallel."""
    check_bf16_cpu(what="schedule_dense_bf16")
    outs = as_list(outs)
    s, packing, acc = _stages(outs, "dense_bf16")
    rows = packing["T_bf16_rows"]
    s[rows].parallel(s[rows].op.axis[1])
    _tensorize(s, acc, get_const_tuple(acc.output(0).shape)[2], parallel=True)
    s[outs[0]].parallel(s[outs[0]].op.axis[0])
    return s


__all__ = ["np_to_bf16_bits", "np_from_bf16_bits", "aligned_reduction", "pack_conv2d_weight",
           "pack_dense_weight", "conv2d_bf16_nchw", "dense_bf16", "block_shape",
           "schedule_conv2d_bf16", "schedule_dense_bf16"]
