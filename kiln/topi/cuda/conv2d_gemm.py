"""CUDA ``conv2d_nchw`` as an implicit GEMM: the AutoTVM template
``conv2d_nchw_implicit_gemm.cuda``.

The convolution of ``data [N, C, H, W]`` with ``kernel [F, C, KH, KW]`` is the matrix product
``G[f, p] = sum_k kernel2d[f, k] * im2col[k, p]`` over ``K = C*KH*KW`` taps and
``P = N*OH*OW`` output pixels (``p = (n*OH + y)*OW + x``, ``k = (c*KH + ry)*KW + rx``)::

    kernel2d[f, k] = kernel[f, k // (KH*KW), k // KW % KH, k % KW]
    im2col[k, p]   = pad(data)[p // (OH*OW), k // (KH*KW), p // OW % OH * sh + k // KW % KH * dh,
                                p % OW * sw + k % KW * dw]
    conv[n, f, y, x] = G[f, (n*OH + y)*OW + x]

Neither ``kernel2d`` nor ``im2col`` is materialized: both are inlined into the shared-memory
tiles of the tiled product (:func:`kiln.topi.cuda.dense.schedule_matmul_tiled`, the
SGEMM schedule that reaches 75% of cuBLAS), so each block gathers the input windows it needs
while fetching (implicit GEMM, as cuDNN's ``IMPLICIT_GEMM`` algorithm). ``G`` is written to
a device workspace by the first kernel; a second kernel reads it back in NCHW order with the
elementwise epilogue (bias, residual add, ReLU) fused. Compared with the direct schedule
(:mod:`.conv2d`), every tap of the reduction is one long ``k`` axis, so a thread's register
tile can be as large as the GEMM's (8 x 8) at every layer, and the pixel axis spans the
batch, which gives batched layers their parallelism.

Knobs: those of ``matmul.cuda`` (``tile_y`` over output channels, ``tile_x`` over pixels,
``tile_k``, ``auto_unroll_max_step``, ``vectorize_fetch``). The fallback config
(:func:`fallback_tiles`) takes the largest register tile that still gives the GPU
:data:`MIN_BLOCKS` blocks, with splits that divide the axes (no partial tiles).
"""

from __future__ import annotations

import math

from kiln import autotvm, te
from kiln.te.tensor import Operation

from .. import nn
from ..nn.utils import conv_window
from ..utils import all_ops, as_list, get_const_tuple, traverse_inline
from .dense import schedule_matmul_tiled
from .injective import schedule_injective_from_existing

CONV2D_GEMM = "conv2d_nchw_implicit_gemm.cuda"
GEMM_TAG = "conv2d_nchw_gemm"

#: the block count the fallback config aims at: a few blocks per multiprocessor of a large
#: GPU (132 SMs on an H100/H200), so that small layers trade register tile for parallelism
MIN_BLOCKS = 256

#: per-axis (vthread, threads, inner) of the fallback's tiles, largest first: 128, 64, 32,
#: 16 and 8 rows (or columns) a block
_TILE_STEPS = ((2, 16, 4), (1, 16, 4), (1, 16, 2), (1, 8, 2), (1, 8, 1))


def prefers_implicit_gemm(data, kernel, strides, padding, dilation) -> bool:
    """Whether the implicit GEMM's fallback beats the direct template's for the convolution
    of ``data`` (NCHW) by ``kernel`` (OIHW), by the per-layer measurements on an H200
    (docs/cuda.md, ``python -m benchmarks gpu_conv``): with at least 2^18 outputs (batched
    layers, the 7x7 stem) it wins at every ResNet-18 layer; 1x1 stride-1 layers reducing
    fewer than 256 channels stay direct (memory-bound: the workspace round trip costs more
    than the tiles save; MobileNetV2 took 1.27 / 2.26 ms at batch 1 / 16 with every
    convolution an implicit GEMM, 1.10 / 1.93 ms with this rule). With fewer outputs:
    strided layers of at most 576 taps (a 3x3 over 64 channels, the 1x1 shortcuts), where
    the direct template's strided windows are slow, and 1x1 stride-1 layers of under 2^15
    outputs reducing at least 512 channels (MobileNetV2's 576@14² -> 96: 19.5 against
    32.3 µs; 960@7² -> 160: 22.8 against 43.4 µs), which the direct fallback spreads over
    too few blocks."""
    batch, in_c, in_h, in_w = get_const_tuple(data.shape)
    out_c, _, kh, kw = get_const_tuple(kernel.shape)
    window = conv_window((in_h, in_w), (kh, kw), strides, padding, dilation)
    outputs = batch * out_c * window.out_hw[0] * window.out_hw[1]
    taps, strided = in_c * kh * kw, max(window.strides) > 1
    if outputs >= 1 << 18:
        return strided or (kh, kw) != (1, 1) or taps >= 256
    if (kh, kw) == (1, 1) and not strided:
        return outputs < 1 << 15 and taps >= 512
    return strided and taps <= 576


def conv2d_nchw_implicit_gemm(data, kernel, strides, padding, dilation, out_dtype="float32"):
    """``topi.nn.conv2d_nchw``'s result computed as an implicit GEMM (see the module doc);
    the product carries its tuning workload (``attrs["workload"]``)."""
    out_dtype = out_dtype or data.dtype
    batch, in_c, in_h, in_w = get_const_tuple(data.shape)
    out_c, k_c, kh, kw = get_const_tuple(kernel.shape)
    if k_c != in_c:
        raise ValueError(f"conv2d_nchw_implicit_gemm: the kernel has {k_c} input channels, "
                         f"the data {in_c}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr), (out_h, out_w) = conv_window(
        (in_h, in_w), (kh, kw), strides, padding, dilation)
    padded = nn.pad(data, [0, 0, pt, pl], [0, 0, pb, pr], name="pad_temp") \
        if any((pt, pl, pb, pr)) else data
    taps, pixels = kh * kw, out_h * out_w

    kernel2d = te.compute((out_c, in_c * taps),
                          lambda f, k: kernel[f, k // taps, k // kw % kh, k % kw],
                          name="kernel2d", tag="injective")
    im2col = te.compute(
        (in_c * taps, batch * pixels),
        lambda k, p: padded[p // pixels, k // taps, p // out_w % out_h * sh + k // kw % kh * dh,
                            p % out_w * sw + k % kw * dw],
        name="im2col", tag="injective")
    rk = te.reduce_axis((0, in_c * taps), name="rk")
    workload = (CONV2D_GEMM, *autotvm.task.args_to_workload(
        (data, kernel, strides, padding, dilation, out_dtype)))
    gemm = te.compute(
        (out_c, batch * pixels),
        lambda f, p: te.sum(kernel2d[f, rk].astype(out_dtype) * im2col[rk, p].astype(out_dtype),
                            axis=rk),
        name="conv2d_gemm", tag=GEMM_TAG,
        attrs={"workload": workload, "strides": (sh, sw), "padding": (pt, pl, pb, pr),
               "dilation": (dh, dw)})
    return te.compute((batch, out_c, out_h, out_w),
                      lambda n, f, y, x: gemm[f, (n * out_h + y) * out_w + x],
                      name="conv2d_nchw", tag="injective")


def fallback_tiles(rows: int, cols: int) -> dict[str, list[int]]:
    """The fallback splits of a ``rows`` x ``cols`` product (output channels x pixels): of
    the per-axis steps :data:`_TILE_STEPS`, each factor shrunk to a divisor of what is left
    of its axis (as ``fallback_split`` does), the pair with the largest block tile that
    still gives :data:`MIN_BLOCKS` blocks (the squarest among equals), else the pair giving
    the most blocks; the reduction in slices of 16."""
    def fitted(step: tuple[int, ...], length: int) -> list[int]:
        sizes, rest = [], length
        for cap in reversed(step):
            f = max(d for d in range(1, min(cap, rest) + 1) if rest % d == 0)
            sizes.append(f)
            rest //= f
        return sizes[::-1]

    def score(pair) -> tuple:
        ty, tx = (math.prod(f) for f in pair)
        blocks = math.ceil(rows / ty) * math.ceil(cols / tx)
        enough = blocks >= MIN_BLOCKS
        return (enough, ty * tx if enough else blocks, -abs(math.log(ty / tx)))

    pairs = [(fitted(r, rows), fitted(c, cols)) for r in _TILE_STEPS for c in _TILE_STEPS]
    y, x = max(pairs, key=score)
    return {"tile_y": [-1, *y], "tile_x": [-1, *x], "tile_k": [-1, 16]}


def schedule_conv2d_implicit_gemm_cfg(cfg, outs):
    """``outs`` (a :func:`conv2d_nchw_implicit_gemm`, possibly followed by an elementwise
    epilogue) scheduled with ``cfg``: the product tiled, the NCHW output with its epilogue
    one thread per element."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    traverse_inline(s, outs[0].op, lambda op: None)
    (gemm,) = [op for op in all_ops(outs) if op.tag == GEMM_TAG]
    rows, cols = get_const_tuple(gemm.output(0).shape)
    schedule_matmul_tiled(cfg, s, gemm, materialize=True, fallback=fallback_tiles(rows, cols))
    for out in outs:
        schedule_injective_from_existing(s, out)
    return s


def is_implicit_gemm(outs) -> bool:
    """Whether ``outs`` hold a convolution made by :func:`conv2d_nchw_implicit_gemm`."""
    return any(op.tag == GEMM_TAG for op in all_ops(as_list(outs)))


def implicit_gemm_workload(outs) -> tuple:
    """The tuning workload of the implicit-GEMM convolution in ``outs``."""
    op: Operation = next(op for op in all_ops(as_list(outs)) if op.tag == GEMM_TAG)
    return op.attrs["workload"]


@autotvm.template(CONV2D_GEMM)
def conv2d_nchw_implicit_gemm_template(data, kernel, strides, padding, dilation, out_dtype):
    """The tuning template: :func:`conv2d_nchw_implicit_gemm` scheduled with the task's
    config."""
    out = conv2d_nchw_implicit_gemm(data, kernel, strides, padding, dilation, out_dtype)
    s = schedule_conv2d_implicit_gemm_cfg(autotvm.get_config(), [out])
    return s, [data, kernel, out]


__all__ = ["CONV2D_GEMM", "MIN_BLOCKS", "conv2d_nchw_implicit_gemm", "fallback_tiles",
           "prefers_implicit_gemm",
           "schedule_conv2d_implicit_gemm_cfg", "is_implicit_gemm", "implicit_gemm_workload",
           "conv2d_nchw_implicit_gemm_template"]
