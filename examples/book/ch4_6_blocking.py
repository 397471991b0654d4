"""Book §4.6 "Improve Cache Efficiency by Blocking": blocked matmul, then a write cache.

``block(n)`` tiles C into ``tx x ty`` blocks computed in parallel, splits the reduction by
``tk``, unrolls the inner reduction loop and vectorizes the inner column loop.
``cached_block(n)`` does the same on a local write cache of each block (``cache_write``
placed by ``compute_at`` in the fused block loop). Both return ``s, (A, B, C)``; the tile
sizes default to the book's ``tx = ty = 32, tk = 4``.
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def block(n, tx=32, ty=32, tk=4):
    A, B, C = d2ltvm.matmul(n, n, n)
    s = te.create_schedule(C.op)
    # Tile by blocks, and then parallelize the computation of each block
    xo, yo, xi, yi = s[C].tile(*C.op.axis, tx, ty)
    xy = s[C].fuse(xo, yo)
    s[C].parallel(xy)
    # Optimize the computation of each block
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=tk)
    s[C].reorder(ko, xi, ki, yi)
    s[C].vectorize(yi)
    s[C].unroll(ki)
    return s, (A, B, C)


def cached_block(n, tx=32, ty=32, tk=4):
    A, B, C = d2ltvm.matmul(n, n, n)
    s = te.create_schedule(C.op)
    # Create a write cache for C
    CachedC = s.cache_write(C, "local")
    # As in block: tile, then compute the blocks in parallel
    xo, yo, xi, yi = s[C].tile(*C.op.axis, tx, ty)
    xy = s[C].fuse(xo, yo)
    s[C].parallel(xy)
    # One cached block per iteration of the fused block loop
    s[CachedC].compute_at(s[C], xy)
    # Optimize the computation of a block, now on the cache
    xc, yc = s[CachedC].op.axis
    ko, ki = s[CachedC].split(CachedC.op.reduce_axis[0], factor=tk)
    s[CachedC].reorder(ko, xc, ki, yc)
    s[CachedC].unroll(ki)
    s[CachedC].vectorize(yc)
    return s, (A, B, C)


if __name__ == "__main__":
    s, args = block(64)
    print("# block(64)")
    print(tvm.lower(s, args, simple_mode=True))
    s, args = cached_block(512)
    print("# cached_block(512)")
    print(tvm.lower(s, args, simple_mode=True))
