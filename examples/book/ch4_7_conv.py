"""Book §4.7 "Convolution" on CPU: a blocked convolution with a local write cache.

``cached_block(oc, ic, n, k, p, s)`` keeps the book's signature (output channels, input
channels, input size, kernel size, padding, stride) and returns ``sch, (X, K, Y)``. Each
output channel's ``th x tw`` output blocks are computed in parallel into a local cache,
with the input channel and kernel axes outermost, the block's rows unrolled and its columns
vectorized. The padding stage, when there is one, is computed in parallel over channels.
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def cached_block(oc, ic, n, k, p, s, th=8, tw=8):
    X, K, Y, PaddedX = d2ltvm.conv(oc, ic, n, n, k, k, p, p, s, s)
    sch = te.create_schedule(Y.op)
    CachedY = sch.cache_write(Y, "local")
    # Compute the output block for every output channel in parallel
    oc, h, w = Y.op.axis
    ho, wo, hi, wi = sch[Y].tile(h, w, th, tw)
    ochw = sch[Y].fuse(oc, ho, wo)
    sch[Y].parallel(ochw)
    # Cache the output block, and move the inner height and width axes
    # to innermost, so we can vectorize and unroll them
    sch[CachedY].compute_at(sch[Y], ochw)
    _, ch, cw = CachedY.op.axis
    ric, rkh, rkw = CachedY.op.reduce_axis
    sch[CachedY].reorder(ric, rkh, rkw, ch, cw)
    sch[CachedY].vectorize(cw)
    sch[CachedY].unroll(ch)
    # Schedule the padding by adding thread-level parallelism
    if PaddedX != X:
        sch[PaddedX].parallel(PaddedX.op.axis[0])
    return sch, (X, K, Y)


if __name__ == "__main__":
    sch, args = cached_block(32, 32, 64, 3, 1, 1)
    print(tvm.lower(sch, args, simple_mode=True))
