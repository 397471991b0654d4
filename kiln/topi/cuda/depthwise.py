"""CUDA schedule of ``depthwise_conv2d_nchw``: a tile of outputs per block, its input window in
shared memory, several outputs per thread.

Each block computes a ``tile_h x tile_w`` tile of ``channels`` output channels of one image;
each thread a ``per_h x per_w`` patch of one channel, accumulated in registers. The block
first copies the tile's input window (``(tile_h-1)*stride + KH`` rows by
``(tile_w-1)*stride + KW`` columns per channel, zero padding inlined into the copy) into
shared memory, every thread a few elements; the window taps are unrolled, so each thread
loads each shared value it needs once and the filter taps once::

    blockIdx.z: image x channel group   blockIdx.y / blockIdx.x: output tile rows / columns
      X.shared[ch, y, x] = pad(X)[...]   // cooperative fetch, then __syncthreads()
      threadIdx.z (channel), threadIdx.y, threadIdx.x:
        out.local[per_h, per_w] = 0
        for di, dj (unrolled) for ii, jj (unrolled)
          out.local[ii, jj] += X.shared[ch, (ty*per_h + ii)*s + di, (tx*per_w + jj)*s + dj]
                               * w.local[di, dj]
        out[...] = epilogue(out.local[ii, jj])

An elementwise epilogue of the output's shape (bias, batch norm, ReLU6) is fused into the
store (an epilogue of another shape, e.g. a flatten, is a kernel of its own). The knobs are a
plain dict (:data:`DEFAULT_CONFIG`); :func:`default_config` fits the tiles to the output so
that no block has a partial tile (a 14x14 map is one tile).
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.te.tensor import ComputeOp, Operation, Tensor

from ..nn.depthwise_conv2d import depthwise_conv2d_nchw
from ..utils import as_list, get_const_tuple, traverse_inline
from .injective import schedule_injective_from_existing
from .per_thread import schedule_per_thread

#: knobs of :func:`schedule_depthwise_conv2d_nchw`: output tile per block (rows, columns,
#: channels) and outputs per thread (rows, columns); :func:`default_config` shrinks the tile
#: to a divisor of the output so that no block has a partial tile
DEFAULT_CONFIG: dict[str, int] = {"tile_h": 8, "tile_w": 64, "channels": 1, "per_h": 2,
                                  "per_w": 2}

_TAG = "depthwise_conv2d_nchw"


def _divisor_tile(extent: int, limit: int, per: int) -> tuple[int, int]:
    """(tile, per-thread) along an axis of ``extent``: the largest tile ``<= limit`` dividing
    ``extent`` and divisible by ``per`` (``per`` drops to 1 where none is; a prime extent
    above ``limit`` keeps ``limit`` and a partial last tile)."""
    for p in (per, 1):
        tiles = [t for t in range(p, min(limit, extent) + 1, p) if extent % t == 0]
        if tiles and (tiles[-1] > 1 or extent == 1):
            return tiles[-1], p
    return min(limit, extent), 1


def default_config(out_h: int, out_w: int) -> dict[str, int]:
    """:data:`DEFAULT_CONFIG` fitted to an ``out_h x out_w`` output: tiles divide the output
    (56x56: 8x56 tiles; a map of at most 16 rows is one tile high, 14x14 one 14x14 tile), and
    blocks of few threads take several channels (about 96 threads per block)."""
    cfg = dict(DEFAULT_CONFIG)
    limit_h = max(cfg["tile_h"], 16) if out_h <= 16 else cfg["tile_h"]
    cfg["tile_h"], cfg["per_h"] = _divisor_tile(out_h, limit_h, cfg["per_h"])
    cfg["tile_w"], cfg["per_w"] = _divisor_tile(out_w, cfg["tile_w"], cfg["per_w"])
    threads = (cfg["tile_h"] // cfg["per_h"]) * (cfg["tile_w"] // cfg["per_w"])
    cfg["channels"] = min(8, -(-96 // threads))
    return cfg


def _find_conv(s, outs: list[Tensor]) -> Operation | None:
    found: list[Operation] = []

    def visit(op: Operation) -> None:
        if op.tag == _TAG and not found:
            found.append(op)

    for t in outs:
        traverse_inline(s, t.op, visit)
    return found[0] if found else None


def _fit(extent: int, tile: int, per: int) -> tuple[int, int]:
    """(tile, per-thread) along one output axis: the tile no larger than the axis, a multiple
    of the per-thread count."""
    per = max(1, min(per, extent))
    tile = max(per, min(tile, -(-extent // per) * per))
    return tile - tile % per, per


def _cooperative_fetch(s, cache: Tensor, threads: tuple[int, int, int]) -> None:
    """Spread the copy into ``cache`` over the block's ``(tz, ty, tx)`` threads."""
    tz, ty, tx = threads
    fused = s[cache].fuse(*s[cache].op.axis)
    _, inner = s[cache].split(fused, factor=tz * ty * tx)
    rest, t_x = s[cache].split(inner, factor=tx)
    t_z, t_y = s[cache].split(rest, factor=ty)
    s[cache].bind(t_z, te.thread_axis("threadIdx.z"))
    s[cache].bind(t_y, te.thread_axis("threadIdx.y"))
    s[cache].bind(t_x, te.thread_axis("threadIdx.x"))


def schedule_depthwise_conv2d_nchw(outs, config: dict[str, Any] | None = None):
    """Schedule ``depthwise_conv2d_nchw`` (and an elementwise epilogue) for CUDA; ``config``
    overrides keys of :func:`default_config`. Other operators in ``outs`` fall back to
    one thread per output element."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    conv = _find_conv(s, outs)
    if conv is None:
        return schedule_per_thread(outs)
    _, c, out_h, out_w = get_const_tuple(conv.output(0).shape)
    cfg = {**default_config(out_h, out_w), **(config or {})}
    data, kernel = conv.input_tensors
    if isinstance(data.op, ComputeOp):  # the padding stage: read through into shared memory
        s[data.op].compute_inline()

    conv_t, out = conv.output(0), outs[0]
    if out.op is not conv and get_const_tuple(out.shape) == get_const_tuple(conv_t.shape):
        s[conv].set_scope("local")  # computed per thread inside the epilogue's loops
        local = conv_t
    else:  # the convolution is the output, or writes through for a reshaping epilogue
        if out.op is not conv:
            schedule_injective_from_existing(s, out)
        out = conv_t
        local = s.cache_write(conv_t, "local")
    shared = s.cache_read(data, "shared", [local])
    taps = s.cache_read(kernel, "local", [local])

    tile_h, per_h = _fit(out_h, cfg["tile_h"], cfg["per_h"])
    tile_w, per_w = _fit(out_w, cfg["tile_w"], cfg["per_w"])
    channels = max(1, min(cfg["channels"], c))
    threads = (channels, tile_h // per_h, tile_w // per_w)

    b, ch, h, w = s[out].op.axis
    bc, tc = s[out].split(ch, factor=channels)
    bh, ih = s[out].split(h, factor=tile_h)
    th, ih = s[out].split(ih, factor=per_h)
    bw, iw = s[out].split(w, factor=tile_w)
    tw, iw = s[out].split(iw, factor=per_w)
    s[out].reorder(b, bc, bh, bw, tc, th, tw, ih, iw)
    s[out].bind(s[out].fuse(b, bc), te.thread_axis("blockIdx.z"))
    s[out].bind(bh, te.thread_axis("blockIdx.y"))
    s[out].bind(bw, te.thread_axis("blockIdx.x"))
    s[out].bind(tc, te.thread_axis("threadIdx.z"))
    s[out].bind(th, te.thread_axis("threadIdx.y"))
    s[out].bind(tw, te.thread_axis("threadIdx.x"))
    s[out].unroll(ih)
    s[out].unroll(iw)

    s[local].compute_at(s[out], tw)
    di, dj = s[local].op.reduce_axis
    _, _, lh, lw = s[local].op.axis
    s[local].reorder(di, dj, lh, lw)
    for ax in (di, dj, lh, lw):
        s[local].unroll(ax)
    s[taps].compute_at(s[out], tw)
    s[shared].compute_at(s[out], bw)
    _cooperative_fetch(s, shared, threads)
    return s


__all__ = ["DEFAULT_CONFIG", "default_config", "depthwise_conv2d_nchw",
           "schedule_depthwise_conv2d_nchw"]
