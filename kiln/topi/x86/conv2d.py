"""x86 schedules of convolutions (NCHW, grouped NCHW, NHWC, packed NCHW[x]c) and depthwise
convolutions.

The plan is the book's blocked convolution (§4.7-4.9): the output is cut into blocks that fit
in vector registers, each block is accumulated in a local cache whose channel loop is
unrolled and whose contiguous loop (width in NCHW, the channel block in NCHWc) is
vectorized, blocks run in parallel, and the padding stage is computed once, in parallel,
before the convolution. An elementwise epilogue (bias, relu, residual add) is applied when
the block is written out.
"""

from __future__ import annotations

from ..utils import get_const_tuple
from ._common import (
    anchor_and_pad,
    fuse_parallel,
    is_pow2,
    lanes,
    largest_divisor,
    num_threads,
    numel,
    row_block,
    vector_registers,
    worth_parallel,
)
from .injective import anchored_schedule


def _parallel_pair(st, a, ea, b, eb, parallel=True):
    """Order two outer axes (extents ea, eb) so the longer runs outermost, parallel (unless
    the operator is too small to gain from threads)."""
    first, second = (a, b) if (ea >= eb or ea >= 2 * num_threads()) else (b, a)
    if parallel:
        st.parallel(first)
    return [first, second]


def schedule_conv_nchw_block(s, outs, conv) -> None:
    """Block schedule of an NCHW convolution ``conv`` (plain or grouped) in ``s``."""
    out_st, inner = anchor_and_pad(s, outs, conv)
    _, f_out, oh, ow = get_const_tuple(conv.output(0).shape)
    groups = conv.attrs.get("groups", 1) if conv.attrs else 1
    width = lanes(conv.output(0).dtype)
    vc = largest_divisor(f_out // groups, 8)
    vw = row_block(ow, width)
    n, f, y, x = out_st.op.axis
    fo, fi = out_st.split(f, factor=vc)
    xo, xi = out_st.split(x, factor=vw)
    order = _parallel_pair(out_st, y, oh, fo, f_out // vc, worth_parallel(conv))
    out_st.reorder(n, *order, xo, fi, xi)
    if is_pow2(vw):
        out_st.vectorize(xi)
    cs = s[inner]
    cs.compute_at(out_st, xo)
    ni, fi2, yi, xi2 = cs.op.axis
    rc, ry, rx = cs.op.reduce_axis
    cs.reorder(ni, yi, rc, ry, rx, fi2, xi2)
    cs.unroll(fi2)
    if is_pow2(vw):
        cs.vectorize(xi2)


def schedule_conv2d_nchw(outs):
    """conv2d_nchw and group_conv2d_nchw (with an optional elementwise epilogue)."""
    s, outs, conv = anchored_schedule(outs, ("conv2d_nchw", "group_conv2d_nchw"))
    if conv is not None:
        schedule_conv_nchw_block(s, outs, conv)
    return s


schedule_group_conv2d_nchw = schedule_conv2d_nchw


def schedule_conv2d_nhwc(outs):
    """conv2d_nhwc: output channels (innermost) vectorized in blocks of a few pixels."""
    s, outs, conv = anchored_schedule(outs, ("conv2d_nhwc",))
    if conv is None:
        return s
    out_st, inner = anchor_and_pad(s, outs, conv, channel_axis=1)
    _, oh, ow, f_out = get_const_tuple(conv.output(0).shape)
    width = lanes(conv.output(0).dtype)
    vf = row_block(f_out, width)
    rw = largest_divisor(ow, 8)
    n, y, x, f = out_st.op.axis
    xo, xi = out_st.split(x, factor=rw)
    fo, fi = out_st.split(f, factor=vf)
    out_st.reorder(n, y, xo, fo, xi, fi)
    if worth_parallel(conv):
        out_st.parallel(y)
    if is_pow2(vf):
        out_st.vectorize(fi)
    cs = s[inner]
    cs.compute_at(out_st, fo)
    ni, yi, xi2, fi2 = cs.op.axis
    ry, rx, rc = cs.op.reduce_axis
    cs.reorder(ni, yi, ry, rx, rc, xi2, fi2)
    cs.unroll(xi2)
    if is_pow2(vf):
        cs.vectorize(fi2)
    return s


def _reg_block(ow: int, limit: int = 14) -> int:
    """Output pixels per register block of the packed layouts."""
    rw = largest_divisor(ow, limit)
    if rw >= 4 or rw == ow:
        return rw
    return row_block(ow, 8)


def _batch(t) -> int | None:
    """The batch (outermost) dimension of ``t``; None where it is symbolic."""
    n = get_const_tuple(t.shape)[0]
    return n if isinstance(n, int) else None


#: L2 bytes of weights above which the output-channel blocks go outermost (parallel), so
#: that each thread streams only its own blocks' weights, reused across all rows
WEIGHTS_L2 = 256 * 1024


def nchwc_plan(conv) -> dict:
    """Tile sizes of a packed convolution: ``rw`` output pixels x ``vo`` output-channel
    blocks accumulated in vector registers, the input-channel unrolling ``ku``, the loop
    order inside the tile (``pixels_outer``), the outer axis (``"oc"`` or ``"y"``) that
    runs in parallel, and whether the input channels run outside the rows
    (``icc_outer``).

    With 32 vector registers (AVX-512): up to 8 pixels x 2 channel blocks (14-16
    independent FMA chains; per input channel 2 weight vectors and ``rw`` broadcasts feed
    ``2 rw`` FMAs, measured ~20 % faster than 14 pixels x 1 block at 7x7 to 56x56), the
    input-channel loop unrolled by ``ku = 2`` (GCC then keeps each accumulator in one
    register: 28 FMAs in 51 instructions instead of 14 in 34 with 7 register copies).

    With 16 (AVX2, 8 fp32 lanes): 7 (or 5, 6) pixels x 2 channel blocks, pixels outermost
    in the tile and the input channels not unrolled, when the row width and the channel
    blocks allow it. Each input value is broadcast once for its two FMAs; 14 accumulators,
    the broadcast and one weight vector fill the 16 registers, and GCC takes the second
    weight vector as the FMA's memory operand (MLAS's scheme). On a Zen 3 core, inside the
    whole model, this measured 0.85-0.94x the time of 7-8 pixels x 1 block with ``ku = 8``
    on ResNet-18's direct 3x3 layers (28x28 to 7x7, stride 1 and 2) and the same time on
    MobileNetV2's 1x1 layers; with channel blocks outermost in the tile GCC keeps the 7
    broadcasts live and spills accumulators (1.45x the time), and unrolling the input
    channels by 2 spills too (1.17x). Otherwise (odd channel blocks, or a 3-channel input
    block such as the stem's, where the new tile took 1.5x the time) up to 8 pixels x 1
    block with the whole input-channel block unrolled (``ku = 8``: 0.85-0.95x the time of
    ``ku = 4``, once GCC's predictive commoning, which tripled its time, was turned off:
    ``kiln.runtime.compiler``).

    Channel blocks run outermost (in parallel) when their weights are big (beyond L2, and
    bigger than one image's input) and they share out evenly between the threads, else rows
    (ResNet-18's 64@56² -> 128 stride-2 layer, 295 KB of weights and 861 KB of input: rows
    measured 0.91x the time).

    ``icc_outer`` (AVX-512, batch 1, channel blocks in parallel): a block of ``vo`` channel
    blocks is accumulated over the whole image in a local buffer (``vo x OH x OW`` vectors,
    6-25 KB at 7² and 14²), one input-channel block at a time, and the epilogue runs after
    it: each input-channel block's weights (18 KB for a 3x3 at ``vo = 2``) are read from
    memory once and serve every row from L1, instead of the whole ``vo`` blocks' weights
    (up to 590 KB) being read again for each row of register tiles. These layers' weights
    come from memory once per inference (ResNet-50's 7² and 14² stages); the register tile
    and the reduction inside it are unchanged (whole models, 2 threads, medians: ResNet-18
    ~0.975x, ResNet-50 1.00x; docs/performance.md). Windows larger than 1x1 only: a 1x1
    convolution's input-channel block is only 16 x ``vo`` x ``rw`` FMAs between the loads and
    stores of the accumulators (alone, 1 thread, weights not in cache: 0.75-1.05x the time;
    on ResNet-50 0.93-1.08x in two runs).

    Depthwise: up to 14 pixels x 1 block (on AVX2 8 on rows wider than 14: 0.7x the time
    of 14 on MobileNetV2's 28x28 to 112x112 layers), rows outermost, and the (branch-free,
    masked) padding computed inline (``inline_pad``): a depthwise convolution reads each
    input element only ~9 times, so a separate padding pass over memory cost more
    (measured 2-4x the whole kernel) than the clamped, masked reads; a dense convolution
    keeps its padding stage (vectorized), which is cheaper than masking every broadcast."""
    _, occ, oh, ow, _ = get_const_tuple(conv.output(0).shape)
    nt = num_threads()
    wide = vector_registers() >= 32  # AVX-512, else 16 (AVX2)
    if conv.tag.startswith("depthwise"):
        rw = _reg_block(ow, 14 if wide or ow <= 14 else 8)
        par = "y" if oh >= occ or oh >= 2 * nt else "oc"
        return {"rw": rw, "vo": 1, "par": par, "inline_pad": True}
    data, kernel = conv.input_tensors[:2]
    icb = get_const_tuple(kernel.shape)[4]
    pixels_outer = False
    if wide:
        rw = _reg_block(ow, 8)
        vo = 2 if occ % 2 == 0 and rw <= 8 else 1
        ku = 2
    elif occ % 2 == 0 and icb % 8 == 0 and (rw7 := largest_divisor(ow, 7)) >= 5:
        rw, vo, ku, pixels_outer = rw7, 2, 1, True
    else:
        rw, vo, ku = _reg_block(ow, 8), 1, min(icb, 8)
    while icb % ku:
        ku //= 2
    n_oc = occ // vo
    w_bytes = 4 * numel(kernel.op)
    big_weights = w_bytes > WEIGHTS_L2 and w_bytes >= 4 * numel(data.op) // _batch(data)
    if n_oc >= nt and n_oc % nt == 0 and (big_weights or oh < 2 * nt):
        par = "oc"
    else:
        par = "y" if (oh >= n_oc or oh >= 2 * nt) else "oc"
    window = get_const_tuple(kernel.shape)[2] * get_const_tuple(kernel.shape)[3]
    return {"rw": rw, "vo": vo, "par": par, "ku": ku, "pixels_outer": pixels_outer,
            "icc_outer": wide and par == "oc" and _batch(data) == 1 and window > 1}


def batch_outer_axes(n, oco, y, par: str, n_batch: int | None) -> tuple[list, list]:
    """``(outer loops outermost first, the loops fused into the parallel one)`` of a packed
    convolution. Batch 1: ``oco, y`` or ``y, oco`` by ``par``, the first in parallel
    (``n``, of extent 1, stays outermost). Batch > 1: the batch joins the parallel loop,
    inside the channel blocks when they are outermost (``oco, n, y``: a block's weights,
    streamed once per thread, serve every image instead of being streamed again per
    image), else outside the rows (``n, y, oco``)."""
    if n_batch == 1:  # a symbolic batch counts as > 1
        return ([n, oco, y], [oco]) if par == "oc" else ([n, y, oco], [y])
    return ([oco, n, y], [oco, n]) if par == "oc" else ([n, y, oco], [n, y])


def schedule_conv_nchwc_block(s, outs, conv, plan=None) -> None:
    """Block schedule of a packed convolution (conv2d_NCHWc or depthwise_conv2d_NCHWc)."""
    plan = plan or nchwc_plan(conv)
    out_st, inner = anchor_and_pad(s, outs, conv, inline_pad=plan.get("inline_pad", False))
    rw, vo = plan["rw"], plan["vo"]
    _, ocb = get_const_tuple(conv.output(0).shape)[1], get_const_tuple(conv.output(0).shape)[4]
    n, oc, y, x, ob = out_st.op.axis
    xo, xi = out_st.split(x, factor=rw)
    oco, oci = out_st.split(oc, factor=vo)
    outer, par = batch_outer_axes(n, oco, y, plan["par"], _batch(conv.output(0)))
    out_st.reorder(*outer, xo, oci, xi, ob)
    if worth_parallel(conv):
        fuse_parallel(out_st, par, [None] * len(par))
    vec = is_pow2(ocb)
    if vec:
        out_st.vectorize(ob)
    cs = s[inner]
    ni, oci2, yi, xi2, obi = cs.op.axis
    reds = list(cs.op.reduce_axis)
    ku = plan.get("ku", 1)
    if ku > 1:
        ro, ri = cs.split(reds[-1], factor=ku)
        reds = reds[:-1] + [ro, ri]
    if plan.get("icc_outer") and par[0] is oco and len(par) == 1:  # icc outermost
        cs.compute_at(out_st, oco)
        xo2, xi2 = cs.split(xi2, factor=rw)
        loops = [ni, reds[0], yi, xo2, *reds[1:]]
    else:  # one register tile of pixels
        cs.compute_at(out_st, xo)
        loops = [ni, yi, *reds]
    tile = [xi2, oci2] if plan.get("pixels_outer") else [oci2, xi2]
    cs.reorder(*loops, *tile, obi)
    if ku > 1:
        cs.unroll(reds[-1])
    cs.unroll(oci2)
    cs.unroll(xi2)
    if vec:
        cs.vectorize(obi)


def schedule_conv2d_NCHWc(outs):  # noqa: N802
    """conv2d_NCHWc: blocks of output pixels x one output-channel block, the channel block
    vectorized, pixels unrolled, input channel block innermost of the reduction."""
    s, outs, conv = anchored_schedule(outs, ("conv2d_NCHWc",))
    if conv is not None:
        schedule_conv_nchwc_block(s, outs, conv)
    return s


def schedule_depthwise_conv2d_NCHWc(outs):  # noqa: N802
    """depthwise_conv2d_NCHWc: like conv2d_NCHWc with the kernel window as reduction."""
    s, outs, conv = anchored_schedule(outs, ("depthwise_conv2d_NCHWc",))
    if conv is not None:
        schedule_conv_nchwc_block(s, outs, conv)
    return s


def schedule_depthwise_conv2d_nchw(outs):
    """depthwise_conv2d_nchw: per channel (in parallel), blocks of rows x a vector of
    columns accumulated in a local cache."""
    s, outs, conv = anchored_schedule(outs, ("depthwise_conv2d_nchw",))
    if conv is None:
        return s
    out_st, inner = anchor_and_pad(s, outs, conv)
    _, c_out, oh, ow = get_const_tuple(conv.output(0).shape)
    width = lanes(conv.output(0).dtype)
    vw = row_block(ow, width)
    yb = largest_divisor(oh, 8)
    b, c, y, x = out_st.op.axis
    yo, yi = out_st.split(y, factor=yb)
    xo, xi = out_st.split(x, factor=vw)
    out_st.reorder(b, c, yo, xo, yi, xi)
    if worth_parallel(conv):
        out_st.parallel(c)
    if is_pow2(vw):
        out_st.vectorize(xi)
    cs = s[inner]
    cs.compute_at(out_st, xo)
    bi, ci, yi2, xi2 = cs.op.axis
    di, dj = cs.op.reduce_axis
    cs.reorder(bi, ci, di, dj, yi2, xi2)
    cs.unroll(yi2)
    if is_pow2(vw):
        cs.vectorize(xi2)
    return s


__all__ = [
    "schedule_conv2d_nchw", "schedule_group_conv2d_nchw", "schedule_conv2d_nhwc",
    "schedule_conv2d_NCHWc", "schedule_depthwise_conv2d_nchw",
    "schedule_depthwise_conv2d_NCHWc", "schedule_conv_nchw_block",
    "schedule_conv_nchwc_block",
]
