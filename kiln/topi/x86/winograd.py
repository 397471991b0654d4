"""CPU schedule of the Winograd convolution (``topi.nn.conv2d_winograd_NCHWc``).

The three stages run block by block: the output is cut into blocks of ``rows`` tile rows
(run in parallel; at batch > 1 the blocks of all images, the batch fused into the parallel
loop, each block ``rows`` tile rows of one image or ``images`` whole images); for each
block the input transform (``winograd_BTd`` per tile and channel vector, then
``winograd_V``) and the batched matrix product ``winograd_M`` are computed for
just the block's tiles, so their intermediate data (``alpha^2 x tiles x channels``) stays in
the cache between the stages instead of making three passes over memory; the output
transform's first half (``winograd_ATM``) is computed per tile just before the tile's output
pixels. The matrix product is blocked like the packed direct convolution: ``rt`` tiles x
``vo`` output-channel vectors of accumulators in registers, the input channels streamed
(:func:`winograd_plan`). The transforms are unrolled over the tile's coordinates (which makes the
transform matrices' entries constants: zeros vanish, +-1 become adds) and vectorized along
the channel block.
"""

from __future__ import annotations

from ..utils import get_const_tuple, input_tensors
from ._common import (
    inline_injective,
    largest_divisor,
    num_threads,
    schedule_pad,
    vector_registers,
    worth_parallel,
)
from .injective import anchored_schedule, schedule_others

#: the batched product's register tile: tiles x output-channel vectors
TILE_ROWS, TILE_VECTORS = 7, 2
#: with 32 vector registers up to 8 tiles x 2 vectors: blocks of 16 or 64 tiles (7² images)
#: then take 8 x 2 accumulators instead of 4 x 2, too few FMA chains to hide the latency
#: (512@7², batch 1, 1 thread: the whole convolution in 0.67x the time)
TILE_ROWS_WIDE = 8
#: tiles per parallel block: at least ``BLOCK_TILES`` (whole tile rows), and at batch > 1
#: whole images up to ``BLOCK_TILES_MAX`` tiles when one image has fewer than ``BLOCK_TILES``
BLOCK_TILES, BLOCK_TILES_MAX = 16, 64
def winograd_plan(conv) -> dict:
    """``rows`` tile rows per parallel block (enough blocks for every thread, and at least
    ~16 tiles per block), ``images`` images per block, ``rt``/``vo`` the register tile of the
    batched product, and its loop order inside the tile.

    At batch 1 the rows are not balanced over the threads (7 tile rows on 2 threads: blocks
    of 3, 3 and 1): blocks of 4 and 3 measured 2x slower on ResNet-18's 28² F(4x4) layers
    inside the model (2 threads, AVX-512), though faster on a 14² F(2x2) layer alone.

    At batch > 1 a block never straddles two images' partial rows: ``rows`` is the smallest
    divisor of the image's tile rows giving at least 16 tiles (the fused batch x row-block
    loop then has no tail block), and an image of fewer than 16 tiles gives blocks of whole
    images (up to ``BLOCK_TILES_MAX`` tiles, at least one block per thread): at 7² the
    transformed kernel, 16 MB at 512 channels, is then streamed once for several images.

    With 16 vector registers (AVX2) the tiles run outside the output-channel vectors and the
    input channels are not unrolled (``tiles_outer``, ``ku = 1``), as in the direct
    convolution's AVX2 plan (:func:`.conv2d.nchwc_plan`): each broadcast value of ``V``
    feeds its ``vo`` FMAs at once, and the 14 accumulators fit beside one broadcast and one
    weight vector. Vectors outside the tiles kept the 7 broadcasts live and spilled
    accumulators: ResNet-18's eight Winograd layers took 7.05 ms in all against 5.18 (Zen 3,
    2 threads, measured per kernel inside the model). AVX-512 keeps vectors outside and the
    channels unrolled by 2, and takes up to ``TILE_ROWS_WIDE`` (8) tiles."""
    n_batch, oco, oh, ow, _ = get_const_tuple(conv.output(0).shape)
    m = conv.attrs["winograd_m"]
    nh, nw = -(-oh // m), -(-ow // m)
    rows = min((r for r in range(1, nh) if r * nw >= BLOCK_TILES), default=nh)
    images, nt = 1, num_threads()
    if n_batch == 1:
        while rows > 1 and -(-nh // rows) < nt:
            rows -= 1
    elif rows < nh:  # blocks of whole tile rows of one image: no tail block
        rows = min(d for d in range(rows, nh + 1) if nh % d == 0)
    else:  # small images: blocks of whole images, enough of them for every thread
        images = max(d for d in range(1, n_batch + 1) if n_batch % d == 0 and (
            d == 1 or (d * nh * nw <= BLOCK_TILES_MAX and n_batch // d >= nt)))
    tiles = images * rows * nw
    wide = vector_registers() >= 32  # AVX-512, else 16 (AVX2)
    max_rt = TILE_ROWS_WIDE if wide else TILE_ROWS
    rt = largest_divisor(tiles, max_rt)
    if rt < 4:
        rt = min(tiles, max_rt)
    vo = TILE_VECTORS if oco % TILE_VECTORS == 0 else 1
    return {"m": m, "rows": rows, "images": images, "rt": rt, "vo": vo,
            "ku": 2 if wide else 1, "tiles_outer": not wide}


def schedule_conv2d_winograd_NCHWc(outs, plan=None):  # noqa: N802
    """Schedule ``outs`` whose anchor is a ``conv2d_NCHWc_winograd`` (module doc)."""
    s, outs, conv = anchored_schedule(outs, ("conv2d_NCHWc_winograd",))
    if conv is None:
        return s
    plan = plan or winograd_plan(conv)
    m, rows, rt, vo = plan["m"], plan["rows"], plan["rt"], plan["vo"]
    n_batch = get_const_tuple(conv.output(0).shape)[0]
    atm = input_tensors(conv)[0].op
    gemm = input_tensors(atm)[0].op
    v_op = input_tensors(gemm)[0].op
    btd = input_tensors(v_op)[0].op
    pad = input_tensors(btd)[0].op

    inline_injective(s, outs, keep=[atm, gemm, v_op, btd, pad])
    out = outs[0].op
    if out is not conv:
        s[conv].compute_inline()  # the output transform is computed in the epilogue's loops
    out_st = s[out]
    b, k, y, x, o = out_st.op.axis
    yo, yr = out_st.split(y, factor=m * rows)
    ty, i = out_st.split(yr, factor=m)
    tx, j = out_st.split(x, factor=m)
    if n_batch == 1:
        out_st.reorder(b, yo, k, ty, tx, i, j, o)
        block = yo
    else:  # parallel over (image blocks, row blocks); the batch is folded into the tiles
        bo, bi = out_st.split(b, factor=plan.get("images", 1))
        out_st.reorder(bo, yo, bi, k, ty, tx, i, j, o)
        block = out_st.fuse(bo, yo)
    if worth_parallel(conv):
        out_st.parallel(block)
    out_st.unroll(i)
    out_st.unroll(j)
    out_st.vectorize(o)
    schedule_others(s, outs[1:], conv)

    # A^T M of one tile, just before its output pixels: m x alpha vectors, in registers
    zs = s[atm]
    zs.compute_at(out_st, tx)
    zi, znu, _, _, zo = zs.op.axis
    zs.unroll(zi)
    zs.unroll(znu)
    zs.vectorize(zo)

    # the batched matrix product of the block's tiles, register-blocked
    acc = s.cache_write(gemm.output(0), "local")
    g = s[gemm]
    g.compute_at(out_st, block)
    e, nu, gk, gt, go = g.op.axis
    gko, gki = g.split(gk, factor=vo)
    gto, gti = g.split(gt, factor=rt)
    g.reorder(e, nu, gko, gto, gki, gti, go)
    g.unroll(gki)  # a constant index into the accumulators keeps them in registers
    g.unroll(gti)
    g.vectorize(go)
    s[acc].compute_at(g, gto)
    ae, anu, ak, at, ao = s[acc].op.axis
    (c,) = s[acc].op.reduce_axis
    ku = plan.get("ku", 1)
    co, ci = s[acc].split(c, factor=ku)
    tile = [at, ak] if plan.get("tiles_outer") else [ak, at]
    s[acc].reorder(ae, anu, co, ci, *tile, ao)
    s[acc].unroll(ci)
    s[acc].unroll(ak)
    s[acc].unroll(at)
    s[acc].vectorize(ao)

    # the input transform of the block's tiles, vectorized along the channel block
    cb = get_const_tuple(pad.output(0).shape)[-1]
    vs = s[v_op]
    vs.compute_at(out_st, block)
    ve, vnu, vt, vc = vs.op.axis
    vco, vci = vs.split(vc, factor=cb)
    vs.reorder(vt, vco, ve, vnu, vci)
    vs.unroll(ve)
    vs.unroll(vnu)
    vs.vectorize(vci)
    # B^T d of one tile and channel vector, just before its B: alpha x alpha vectors
    ts = s[btd]
    ts.compute_at(vs, vco)
    te_, tsx, _, tc = ts.op.axis
    ts.unroll(te_)
    ts.unroll(tsx)
    ts.vectorize(tc)
    schedule_pad(s, pad, channel_axis=1)
    return s


__all__ = ["schedule_conv2d_winograd_NCHWc", "winograd_plan"]
