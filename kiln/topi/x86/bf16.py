"""bf16 convolution for x86: bfloat16 operands, float32 accumulation and output (dense
layers: :mod:`.dense_bf16`, which shares the rounding helpers here).

The compute takes float32 data (or bf16 bits, ``uint16``, taken as they are) and a weight
packed once, at compile time, into bf16 bits (``uint16``; :func:`pack_conv2d_weight`).
Inside the kernel packing stages
round the data to bf16 (to nearest even) into the layout the bf16 dot-product
instructions read; products of bf16 values are exact in float32 and summed in float32; the
output (plus the float32 bias) is float32, so the graph's elementwise tails stay float32.

Convolution (NCHW or blocked ``NCHW{b}c`` in, NCHW out, or ``NCHW{b}c`` for a direct one;
any stride, padding and dilation, ``groups == 1``), in one of two forms:

* **direct** (:func:`is_direct`: input channels a multiple of 32, output channels of 16,
  any kernel and stride): a padded copy of the input in the blocked bf16 layout ``[N,
  C/32, phases, H', W', 32]`` (each pixel's 32 channels side by side: one AMX tile row; a
  strided input split into the planes of its strides, so that each tap reads one plane at
  stride 1), read as it is by the micro-kernel over (tap, channel block): no im2col matrix
  (a 1x1 layer: one tap, its input copied as it is, subsampled where strided). The
  weight is ``[O/ob, KH, KW, C/32, 16, ob, 2]`` (``ob`` = :func:`output_block`); the
  accumulator ``[N, O/ob, ob, OH, OW]`` (``[N, O/ob, OH, OW, ob]``, the micro-kernel's
  ``pixels x channels`` as they are, for a blocked output, whose tail is then vectorized
  over its 16 channels, a rounding to bf16 included: :func:`.bf16_intrin.round_to_bf16`
  is lane-wise), one call of the micro-kernel per tile of output rows and ``ob`` channels
  (:class:`.bf16_intrin.ConvBlock`);
* **im2col** (the others): the weight ``[O, K']``, one row per output channel, the
  reduction padded with zeros to ``K'``, a multiple of 32 (:func:`aligned_reduction`); a
  padded bf16 copy of the input with each row's channel pairs interleaved (``[N, H',
  C_even/2, W', 2]``, channels padded to an even ``C_even``), the im2col matrix ``cols[b,
  k/2, y*OW + x, k%2]`` (``k`` over ``KH x KW x C_even``), and the accumulator ``acc[b, f,
  y*OW + x] = W @ cols`` computed in ``mr x nr`` blocks by the GEMM micro-kernel of
  :mod:`.bf16_intrin` (AMX tiles or AVX-512 vectors). A 1x1 stride-1 convolution without
  padding is that GEMM on the input's channel pairs as they are (no padded copy).

Either way the output rows are contiguous in the accumulator, and the convolution's
schedule runs all of it in one parallel loop over tiles of output rows
(:func:`conv_tiling`), each task packing the input rows its tile reads into buffers of its
own.

The schedule (:func:`schedule_conv2d_bf16`) needs AVX-512 BF16
(:func:`.bf16_intrin.check_bf16_cpu` raises otherwise).
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.target import current_cpu
from kiln.topi.utils import all_ops, as_list, get_const_tuple

from ._common import num_threads
from .bf16_intrin import (
    CHANNEL_BLOCK,
    K_ALIGN,
    LANES,
    MAX_ACCUMULATORS,
    ConvBlock,
    bf16_conv_intrin,
    bf16_conv_source,
    bf16_gemm_intrin,
    bf16_gemm_source,
    check_bf16_cpu,
    direct_sum,
    round_to_bf16,
    to_float32,
    uses_amx,
)

#: pixels of one AMX block at most (4 chunks of 32 columns)
AMX_MAX_COLUMNS = 128
#: the fewest pixels of a convolution's tile split for parallelism (one AMX chunk)
MIN_TILE_PIXELS = 32


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


def pack_conv2d_weight(w_oihw: np.ndarray, strides=(1, 1)) -> np.ndarray:
    """An ``OIHW`` float weight as the packed bf16 operand of the convolution of these
    ``strides``: for a direct one (:func:`is_direct`) ``[O/ob, KH, KW, C/32, 16, ob, 2]``
    (``ob`` :func:`output_block` channels; per tap and block of 32 input channels, the
    panel of ``ob`` channels of each input channel pair, the micro-kernel's ``b``), else
    ``[O, K']`` with reduction index ``k = (ry * KW + rx) * C_even + c``, input channels
    padded to ``C_even``."""
    o, c, kh, kw = w_oihw.shape
    if is_direct(w_oihw.shape, strides):
        w = np.asarray(w_oihw, np.float32)
        if folds_columns(w.shape):  # [O, 32, KH, 1]: channel rx * C + c of column rx
            w, c, kw = np.zeros((o, CHANNEL_BLOCK, kh, 1), np.float32), CHANNEL_BLOCK, 1
            w[:, :_row_values(w_oihw.shape), :, 0] = np.asarray(w_oihw, np.float32).transpose(
                0, 3, 1, 2).reshape(o, -1, kh)
        ob = output_block(o)
        w = w.reshape(o // ob, ob, c // CHANNEL_BLOCK, CHANNEL_BLOCK // 2, 2, kh, kw)
        return np_to_bf16_bits(np.ascontiguousarray(w.transpose(0, 5, 6, 2, 3, 1, 4)))
    w = np.zeros((o, c + c % 2, kh, kw), np.float32)
    w[:, :c] = w_oihw
    return _pack_rows(w.transpose(0, 2, 3, 1).reshape(o, -1))


def is_direct(weight_shape, strides) -> bool:
    """Whether a convolution of an ``OIHW`` weight of ``weight_shape`` reads its input
    directly, in the blocked layout (``[C/32, phases, H', W', 32]``: a strided input split
    into planes, :class:`.bf16_intrin.ConvBlock`), without an im2col matrix: input channels
    a multiple of :data:`.bf16_intrin.CHANNEL_BLOCK` and output channels of 16, any kernel
    (1x1 too) and stride."""
    o, c, _, _ = weight_shape
    del strides  # every stride: a strided input is split into planes
    return o % 16 == 0 and (c % CHANNEL_BLOCK == 0 or folds_columns(weight_shape))


def folds_columns(weight_shape) -> bool:
    """Whether a direct convolution of an ``OIHW`` weight of ``weight_shape`` folds its
    kernel's columns into the channel block (a stem's 3 channels): input channels not a
    multiple of :data:`.bf16_intrin.CHANNEL_BLOCK` whose ``KW x C`` values fit one block.
    Its packing copy puts the ``KW`` columns a pixel reads side by side (channel ``rx * C
    + c``, the rest of the block zeros): a convolution of a ``KH x 1`` kernel over 32
    channels, the tile rows 21 of 32 values full for a 7x7 kernel of 3 channels where
    zero-padded channels would fill 3."""
    _, c, _, kw = weight_shape
    return c % CHANNEL_BLOCK != 0 and _row_values(weight_shape) <= CHANNEL_BLOCK


def _row_values(weight_shape) -> int:
    """``C x KW`` of an ``OIHW`` weight shape: the values of one output pixel's kernel row."""
    return weight_shape[1] * weight_shape[3]


def output_block(channels: int) -> int:
    """The output channels of a direct convolution's micro-kernel call: 32 (two AMX tiles,
    two zmm vectors) where they divide ``channels``, else 16."""
    return 32 if channels % 32 == 0 else 16


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


def _nchw_reader(data: te.Tensor):
    """``(n, c, h, w, read)``: the NCHW shape of ``data``, NCHW or blocked ``NCHW{b}c``
    (``[N, C/b, H, W, b]``, its rank says which), and ``read(b, c, y, x)`` its element."""
    if len(data.shape) == 4:
        return (*get_const_tuple(data.shape), lambda b, ci, y, x: data[b, ci, y, x])
    n, chunks, h, w, cb = get_const_tuple(data.shape)
    return n, chunks * cb, h, w, lambda b, ci, y, x: data[b, ci // cb, y, x, ci % cb]


def conv2d_bf16_nchw(data: te.Tensor, packed: te.Tensor, bias: te.Tensor | None,
                     kernel_size, channels: int, strides, padding, dilation,
                     out_block: int = 0) -> te.Tensor:
    """2-D convolution of ``data`` (float32, or bf16 bits: ``uint16``; NCHW or blocked
    ``NCHW{b}c``) with a weight from :func:`pack_conv2d_weight` (``kernel_size`` ``(KH,
    KW)``, ``channels`` outputs), plus ``bias[O]``, in bf16 with float32 accumulation;
    ``padding`` is (top, left, bottom, right). Float32 out, NCHW, or ``NCHW{out_block}c``
    for a direct convolution (``out_block`` dividing its :func:`output_block`). Three forms
    of the accumulator: a 1x1 stride-1 unpadded convolution is a GEMM of the data's channel
    pairs; a direct one (:func:`is_direct`) reads the padded input in the blocked layout
    (:func:`_direct`); the others read its im2col matrix."""
    n, c, h, w, read = _nchw_reader(data)
    kh, kw = kernel_size
    ce = c + c % 2
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    shape = (n, channels, oh, ow)
    if is_direct((channels, c, kh, kw), strides):
        ob = output_block(channels)
        in_block = get_const_tuple(data.shape)[4] if len(data.shape) == 5 else 0
        source = (n, c, h, w, read)
        if folds_columns((channels, c, kh, kw)):  # a convolution of KH x 1 over 32 channels
            if data.dtype != "uint16":  # rounded once, not once per tap reading it
                rounded = te.compute(data.shape, lambda *i: round_to_bf16(data(*i)),
                                     name="T_bf16_rounded", tag="injective")
                n, c, h, w, read = _nchw_reader(rounded)
            source = (n, CHANNEL_BLOCK, h, ow,
                      _folded_columns(read, c, kw, w, (sw, dw, left), "uint16"))
            kw, in_block, padding = 1, 0, (top, 0, bottom, 0)
            strides, dilation = (sh, 1), (dh, 1)
        want = (channels // ob, kh, kw, source[1] // CHANNEL_BLOCK, CHANNEL_BLOCK // 2, ob, 2)
        if tuple(get_const_tuple(packed.shape)) != want:
            raise ValueError(f"conv2d_bf16: the packed weight {get_const_tuple(packed.shape)} "
                             f"is not the direct layout {want} of {c} -> {channels} channels "
                             f"(pack_conv2d_weight with the convolution's strides)")
        if out_block:
            if ob % out_block:
                raise NotImplementedError(f"conv2d_bf16: an NCHW{out_block}c output of a "
                                          f"direct convolution computing {ob} channels at a "
                                          f"time (only blocks dividing {ob})")
            acc = _direct(source, in_block, packed, padding, (oh, ow), strides, dilation,
                          channels_last=True)
            return _blocked_output(lambda b, f, y, x: acc[b, f // ob, y, x, f % ob], bias,
                                   shape, out_block)
        acc = _direct(source, in_block, packed, padding, (oh, ow), strides, dilation)
        return _conv_output(lambda b, f, y, x: acc[b, f // ob, f % ob, y, x], bias, shape)
    if out_block:
        raise NotImplementedError("conv2d_bf16: a blocked NCHW{b}c output of an im2col "
                                  "convolution (only direct ones: is_direct)")
    _check_packed(packed, kh * kw * ce, channels, "conv2d_bf16")
    zero = tir.const(0, "uint16")
    if (kh, kw, sh, sw, top, left, bottom, right) == (1, 1, 1, 1, 0, 0, 0, 0):
        cols = _rows_of_pairs(n, c, h * w, lambda b, ci, m: read(b, ci, m // w, m % w),
                              "T_bf16_cols", {"halo": 0, "stride": 1})
        acc = _gemm(packed, cols, "T_conv2d_bf16_acc", "conv2d_bf16")
        return _conv_output(lambda b, f, y, x: acc[b, f, y * ow + x], bias, shape)
    # [N, H', C_even/2, W', 2]: each row's channel pairs interleaved, padding zeros
    padded = te.compute(
        (n, h + top + bottom, ce // 2, w + left + right, 2),
        lambda b, y, cp, x, p: tir.if_then_else(
            tir.all(2 * cp + p < c, y >= top, y < top + h, x >= left, x < left + w),
            _as_bf16(read(b, tir.min(2 * cp + p, c - 1), y - top, x - left)), zero),
        name="T_bf16_padded", tag="injective")
    pairs = kh * kw * ce // 2

    def im2col(b, k2, m, p):
        ry = tir.min(k2 // (kw * ce // 2), kh - 1)
        rx, cp = k2 // (ce // 2) % kw, k2 % (ce // 2)
        value = padded[b, m // ow * sh + ry * dh, cp, m % ow * sw + rx * dw, p]
        return value if 2 * pairs % K_ALIGN == 0 else \
            tir.if_then_else(k2 < pairs, value, zero)

    cols = te.compute((n, aligned_reduction(2 * pairs) // 2, oh * ow, 2), im2col,
                      name="T_bf16_cols", tag="injective",
                      attrs={"halo": (kh - 1) * dh + 1 - sh, "stride": sh})
    acc = _gemm(packed, cols, "T_conv2d_bf16_acc", "conv2d_bf16")
    return _conv_output(lambda b, f, y, x: acc[b, f, y * ow + x], bias, shape)


def _folded_columns(read, c: int, kw: int, w: int, columns: tuple[int, int, int], dtype):
    """``read(b, i, y, x)`` of a convolution whose kernel columns are folded into the
    channels (:func:`folds_columns`): input channel ``i % c`` at the column that tap ``rx =
    i // c`` of output column ``x`` reads (``columns``: the stride, dilation and left
    padding of the columns), zero past the ``KW x C`` values and in the padding."""
    stride, dilation, left = columns

    def at(b, i, y, x):
        col = x * stride + i // c * dilation - left
        inside = tir.all(i < c * kw, col >= 0, col < w)
        return tir.if_then_else(inside, read(b, i % c, y, tir.min(tir.max(col, 0), w - 1)),
                                tir.const(0, dtype))

    return at


def _direct(source, in_block: int, packed: te.Tensor, padding, out_hw: tuple[int, int],
            strides, dilation, channels_last: bool = False) -> te.Tensor:
    """The accumulator of a direct convolution (:func:`is_direct`), ``[N, O/ob, ob, OH,
    OW]`` float32 (``[N, O/ob, OH, OW, ob]`` where ``channels_last``): ``acc[b, o, j, y, x]
    = direct_sum(blocked[b], W[o], j, y, x)`` (:func:`.bf16_intrin.direct_sum`), read from
    the input (NCHW or ``NCHW{b}c``) padded with zeros and split into the planes of its
    strides (:class:`.bf16_intrin.ConvBlock`) in the blocked bf16 layout ``[N, C/32,
    phases, H', W', 32]`` (``T_bf16_blocked``: each pixel's 32 channels side by side, an
    AMX tile row; from a blocked input, ``in_block`` channels side by side, a copy of runs
    of channels). ``source`` is ``(n, c, h, w, read)`` (:func:`_nchw_reader`)."""
    n, c, h, w, read = source
    ob_count, kh, kw, cblocks, _, ob, _ = get_const_tuple(packed.shape)
    top, left, _, _ = padding
    sh, sw = strides
    # the geometry of a block of all rows: its planes' shape
    whole = ConvBlock(ob, out_hw[0], out_hw[1], (kh, kw), tuple(dilation), cblocks,
                      channels_last, (sh, sw))
    ph, pw = whole.phases

    def plane(b, q, phase, y, x, i):
        py = 0 if ph == 1 else phase // pw if pw > 1 else phase
        px = 0 if pw == 1 else phase % pw
        row, col = y * sh + py - top, x * sw + px - left
        return tir.if_then_else(tir.all(row >= 0, row < h, col >= 0, col < w),
                                _as_bf16(read(b, q * CHANNEL_BLOCK + i, row, col)),
                                tir.const(0, "uint16"))

    blocked = te.compute((n, cblocks, ph * pw, whole.in_rows, whole.width, CHANNEL_BLOCK),
                         plane, name="T_bf16_blocked", tag="injective",
                         attrs={"in_block": in_block})
    attrs = {"kernel": (kh, kw), "dilation": tuple(dilation), "strides": (sh, sw),
             "channels_last": channels_last}
    if channels_last:
        return te.compute((n, ob_count, *out_hw, ob), lambda b, o, y, x, j: direct_sum(
            blocked, packed, j, y, x, whole, (b,), (o,)),
            name="T_conv2d_bf16_acc", tag="conv2d_bf16", attrs=attrs)
    return te.compute((n, ob_count, ob, *out_hw), lambda b, o, j, y, x: direct_sum(
        blocked, packed, j, y, x, whole, (b,), (o,)),
        name="T_conv2d_bf16_acc", tag="conv2d_bf16", attrs=attrs)


def _conv_output(value, bias: te.Tensor | None, shape: tuple) -> te.Tensor:
    """The NCHW output ``value(b, f, y, x)`` (read from the accumulator), plus the bias."""
    if bias is None:
        return te.compute(shape, value, name="T_conv2d_bf16", tag="injective")
    return te.compute(shape, lambda b, f, y, x: value(b, f, y, x) + bias[f],
                      name="T_conv2d_bf16", tag="broadcast")


def _blocked_output(value, bias: te.Tensor | None, shape: tuple, block: int) -> te.Tensor:
    """The output ``value(b, f, y, x)`` plus the bias in the blocked layout
    ``NCHW{block}c``, ``[N, O/block, OH, OW, block]``."""
    n, o, oh, ow = shape

    def at(b, q, y, x, i):
        f = q * block + i
        return value(b, f, y, x) if bias is None else value(b, f, y, x) + bias[f]

    return te.compute((n, o // block, oh, ow, block), at, name="T_conv2d_bf16",
                      tag="injective" if bias is None else "broadcast")


def _as_bf16(value) -> tir.PrimExpr:
    """``value`` as bf16 bits: rounded (to nearest even) from float32, kept if already bf16
    (``uint16``)."""
    return value if value.dtype == "uint16" else round_to_bf16(value)


def _rows_of_pairs(batch: int, k: int, m: int, read, name: str, attrs: dict) -> te.Tensor:
    """``[batch, K'/2, m, 2]`` bf16 bits: ``read(b, i, j)`` (reduction index ``i`` below
    ``k``, column ``j``) rounded, in pairs of reduction steps per column, zeros past ``k``;
    the stage's ``attrs`` as given."""
    zero = tir.const(0, "uint16")
    return te.compute(
        (batch, aligned_reduction(k) // 2, m, 2),
        lambda b, k2, j, p: tir.if_then_else(
            2 * k2 + p < k, _as_bf16(read(b, tir.min(2 * k2 + p, k - 1), j)), zero),
        name=name, tag="injective", attrs=attrs)


def block_shape(rows: int, cols: int, amx: bool) -> tuple[int, int]:
    """The micro-kernel's ``(mr, nr)`` for an accumulator of ``rows`` output channels by
    ``cols`` pixels: divisors of both; ``mr`` up to 32 and ``nr`` up to
    :data:`AMX_MAX_COLUMNS` with ``amx`` (the micro-kernel takes the columns in chunks of
    32, each streaming the ``mr`` weight rows once: the fewest chunks per pixel, then the
    widest); else ``nr`` up to 32 (two vectors) and ``mr`` as many as keep ``mr`` times
    ``nr``'s vectors within :data:`MAX_ACCUMULATORS`."""
    widths = [d for d in range(1, (AMX_MAX_COLUMNS if amx else 2 * LANES) + 1) if cols % d == 0]
    nr = min(widths, key=lambda d: (-(-d // (2 * LANES)) / d, -d))
    budget = 32 if amx else MAX_ACCUMULATORS // -(-nr // LANES)
    return max(d for d in range(1, budget + 1) if rows % d == 0), nr


def conv_tiling(channels: int, oh: int, ow: int, threads: int, amx: bool, halo: int = 0,
                stride: int = 1, block: int | None = None) -> tuple[int, int, int, int]:
    """``(rows, groups, mr, nr)``: the convolution's parallel tasks are tiles of ``rows``
    output rows times ``groups`` groups of output channels, of whole blocks of the
    micro-kernel's ``mr x nr`` (:func:`block_shape` of the tile's pixels). A tile has at
    least as many pixels as channels (each task reads the weight once and packs its own
    tile: the two operands of its GEMM of similar size), and packs at most half again the
    ``rows * stride`` input rows it advances over (``halo``: the input rows it reads beyond
    them, ``(KH - 1) * dilation + 1 - stride``, packed again by the next tile); fewer rows
    where that makes ``2 * threads`` tiles of at least :data:`MIN_TILE_PIXELS`; channel
    groups only where the rows cannot make ``threads`` tasks (late layers: each group packs
    the whole image again). A direct convolution's micro-kernel takes the tile's pixels
    whole, ``block`` channels at a time: ``(mr, nr)`` is then ``(block, tile pixels)``."""
    divisors = [d for d in range(1, oh + 1) if oh % d == 0]
    rows = next((d for d in divisors if d * ow >= channels and 2 * halo <= d * stride), oh)
    while oh // rows < 2 * threads:
        fewer = [d for d in divisors if d < rows and d * ow >= MIN_TILE_PIXELS]
        if not fewer:
            break
        rows = fewer[-1]
    if block:
        mr, nr = block, rows * ow
    else:
        mr, nr = block_shape(channels, rows * ow, amx)
    blocks = channels // mr
    groups = next((g for g in range(1, blocks + 1) if blocks % g == 0
                   and g * (oh // rows) >= threads), blocks)
    return rows, groups, mr, nr


#: the packing stages the schedules place themselves (the others are inlined)
_PACKING = ("T_bf16_padded", "T_bf16_cols", "T_bf16_blocked", "T_bf16_rounded")


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


def _tensorize(s: te.Schedule, acc, mr: int, nr: int) -> None:
    """Tensorize the ``[batch, channels, pixels]`` accumulator ``acc`` in ``mr x nr``
    blocks (:func:`block_shape`): loops over the batch, the channel blocks and the pixel
    blocks, then the micro-kernel over the block and the whole reduction."""
    kp = get_const_tuple(acc.input_tensors[0].shape)[1]
    b, f, m = s[acc].op.axis
    fo, fi = s[acc].split(f, factor=mr)
    mo, mi = s[acc].split(m, factor=nr)
    s[acc].reorder(b, fo, mo, fi, mi, *s[acc].op.reduce_axis)
    s[acc].tensorize(fi, bf16_gemm_intrin(mr, nr, kp // 2))
    s[acc].pragma(fo, "import_c", bf16_gemm_source(mr, nr))


def _conv_tasks(s: te.Schedule, out: te.Tensor, channels: int, rows: int, groups: int,
                mr: int):
    """Split ``out`` (NCHW, or ``NCHW{b}c`` with ``b`` dividing ``mr``) into the
    convolution's parallel tasks (:func:`conv_tiling`): tiles of ``rows`` output rows times
    ``groups`` channel groups, fused and parallel, each over blocks of ``mr`` channels;
    returns the (task, channel block) loops."""
    b, f, y, x, *lanes = s[out].op.axis
    block = get_const_tuple(out.shape)[4] if lanes else 1
    g, fi = s[out].split(f, factor=channels // block // groups)
    fm, fr = s[out].split(fi, factor=mr // block)
    yo, yi = s[out].split(y, factor=rows)
    s[out].reorder(b, yo, g, fm, fr, yi, x, *lanes)
    task = s[out].fuse(b, yo, g)
    s[out].parallel(task)
    if lanes:
        s[out].vectorize(lanes[0])
    return task, fm


def _schedule_direct(s: te.Schedule, out: te.Tensor, acc: te.ComputeOp,
                     blocked: te.ComputeOp, amx: bool) -> None:
    """The direct convolution's part of :func:`schedule_conv2d_bf16`: each task copies its
    tile's input rows into the blocked layout, then per block of :func:`output_block`
    channels one micro-kernel call computes the tile (:class:`.bf16_intrin.ConvBlock`)."""
    channels_last = acc.attrs["channels_last"]
    shape = get_const_tuple(acc.output(0).shape)
    _, ob_count, oh, ow, ob = shape if channels_last else (*shape[:2], *shape[3:], shape[2])
    cblocks = get_const_tuple(blocked.output(0).shape)[1]
    kernel, dilation, strides = (acc.attrs[k] for k in ("kernel", "dilation", "strides"))
    whole = ConvBlock(ob, oh, ow, kernel, dilation, cblocks, channels_last, strides)
    rows, groups, _, _ = conv_tiling(ob_count * ob, oh, ow, num_threads(), amx,
                                     whole.in_rows - oh, block=ob)
    task, fm = _conv_tasks(s, out, ob_count * ob, rows, groups, ob)
    s[blocked].compute_at(s[out], task)
    in_block = blocked.attrs["in_block"]
    if in_block and CHANNEL_BLOCK % in_block == 0:  # runs of the input's channel blocks
        s[blocked].vectorize(s[blocked].split(s[blocked].op.axis[5], factor=in_block)[1])
    elif not in_block:  # an NCHW input: along its rows, a transpose of each row
        s[blocked].reorder(*s[blocked].op.axis[:4], s[blocked].op.axis[5],
                           s[blocked].op.axis[4])
    s[acc].compute_at(s[out], fm)
    block = ConvBlock(ob, rows, ow, kernel, dilation, cblocks, channels_last, strides)
    if channels_last:
        _, _, y, _, _ = s[acc].op.axis
        s[acc].storage_align(y, block.width * ob, 0)
        s[acc].tensorize(y, bf16_conv_intrin(block))
    else:
        _, _, j, y, _ = s[acc].op.axis
        s[acc].storage_align(y, block.width, 0)
        s[acc].tensorize(j, bf16_conv_intrin(block))
    s[out].pragma(task, "import_c", bf16_conv_source(block))


def schedule_conv2d_bf16(outs) -> te.Schedule:
    """Schedule of :func:`conv2d_bf16_nchw` and its elementwise tail, one parallel loop:
    over tiles of output rows times groups of output channels (:func:`conv_tiling`), each
    task packing the input rows its tile reads into a buffer of its own (rounding the input
    to bf16 as it reads it: the padded copy, blocked for a direct convolution, then for an
    im2col one its im2col block), then per block of ``mr`` channels the accumulator,
    tensorized, and the output with its elementwise tail (bias, residual add, relu) read
    from it while it is in cache. A direct convolution (:func:`is_direct`) tensorizes the
    block's whole tile (:func:`.bf16_intrin.bf16_conv_intrin`), its accumulator's rows
    padded to the input's (``storage_align``); the others in ``mr x nr`` GEMM blocks
    (:func:`_tensorize`)."""
    check_bf16_cpu(what="schedule_conv2d_bf16")
    outs = as_list(outs)
    s, packing, acc = _stages(outs, "conv2d_bf16")
    out = outs[0]
    amx = uses_amx(current_cpu())
    if "T_bf16_rounded" in packing:  # a folded convolution's float32 input, rounded apart
        rounded = packing["T_bf16_rounded"]
        s[rounded].parallel(s[rounded].fuse(*s[rounded].op.axis[:-1]))
    if "T_bf16_blocked" in packing:
        _schedule_direct(s, out, acc, packing["T_bf16_blocked"], amx)
        return s
    channels = get_const_tuple(acc.input_tensors[0].shape)[0]
    oh, ow = get_const_tuple(out.shape)[2:4]
    cols = packing["T_bf16_cols"]
    rows, groups, mr, nr = conv_tiling(channels, oh, ow, num_threads(), amx,
                                       cols.attrs["halo"], cols.attrs["stride"])
    task, fm = _conv_tasks(s, out, channels, rows, groups, mr)
    for name in ("T_bf16_padded", "T_bf16_cols"):
        if name in packing:  # no padded copy for a pointwise convolution
            s[packing[name]].compute_at(s[out], task)
    cy, cx = s[cols].split(s[cols].op.axis[2], factor=ow)
    s[cols].reorder(s[cols].op.axis[0], cy, s[cols].op.axis[1], cx)
    s[acc].compute_at(s[out], fm)
    _tensorize(s, acc, mr, nr)
    return s


__all__ = ["np_to_bf16_bits", "np_from_bf16_bits", "aligned_reduction", "pack_conv2d_weight",
           "conv2d_bf16_nchw", "is_direct", "block_shape", "conv_tiling",
           "schedule_conv2d_bf16"]
