"""Book §4.9 "Depthwise Convolution" on CPU, packed into NCHW[x]c like §4.8.

* ``depthwise_conv_pack(c, nh, nw, kh, kw, ph, pw, tc)`` returns
  ``X, K, PaddedX, PackedX, PackedK`` (K is (c, 1, kh, kw), packed to (c/tc, 1, kh, kw, 1, tc)).
  When ``c < tc`` the tile shrinks to ``c``.
* ``depthwise_conv(c, nh, nw, kh, kw, ph, pw, sh, sw, tc)`` returns
  ``X, K, Y, PaddedX, PackedX, PackedK, PackedY``.
* ``depthwise_cached_block(c, n, k, p, s)`` is the book's schedule; returns ``sch, (X, K, Y)``.
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def depthwise_conv_pack(c, nh, nw, kh, kw, ph, pw, tc):
    X = te.placeholder((c, nh, nw), name="X")
    K = te.placeholder((c, 1, kh, kw), name="K")
    PaddedX = d2ltvm.padding(X, ph, pw) if ph * pw != 0 else X
    # make sure the channel tiling is valid
    if c < tc:
        tc = c
    assert c % tc == 0
    # pack X and K
    PackedX = te.compute(
        (c // tc, nh + ph * 2, nw + pw * 2, tc),
        lambda c_out, x, y, c_in: PaddedX[c_out * tc + c_in, x, y],
        name="PackedX",
    )
    PackedK = te.compute(
        (c // tc, 1, kh, kw, 1, tc),
        lambda c_out, _, x, y, __, c_in: K[c_out * tc + c_in, 0, x, y],
        name="PackedK",
    )
    return X, K, PaddedX, PackedX, PackedK


def depthwise_conv(c, nh, nw, kh, kw, ph, pw, sh, sw, tc):
    X, K, PaddedX, PackedX, PackedK = depthwise_conv_pack(c, nh, nw, kh, kw, ph, pw, tc)
    tc = min(tc, c)  # the tile depthwise_conv_pack used
    # reduction axes
    rkh = te.reduce_axis((0, kh), name="rkh")
    rkw = te.reduce_axis((0, kw), name="rkw")
    # output height and width
    oh = d2ltvm.conv_out_size(nh, kh, ph, sh)
    ow = d2ltvm.conv_out_size(nw, kw, pw, sw)
    # compute Y in the packed layout
    PackedY = te.compute(
        (c // tc, oh, ow, tc),
        lambda c_out, x, y, c_in: te.sum(
            PackedX[c_out, x * sh + rkh, y * sw + rkw, c_in] * PackedK[c_out, 0, rkh, rkw, 0, c_in],
            axis=[rkh, rkw],
        ),
        name="PackedY",
    )
    # Unpack the result
    Y = te.compute((c, oh, ow), lambda c, x, y: PackedY[c // tc, x, y, c % tc], name="Y")
    return X, K, Y, PaddedX, PackedX, PackedK, PackedY


def depthwise_cached_block(c, n, k, p, s, tc=16, tw=4):
    """The book's schedule; tile sizes for channel and width."""
    X, K, Y, PaddedX, PackedX, PackedK, PackedY = depthwise_conv(c, n, n, k, k, p, p, s, s, tc)
    sch = te.create_schedule(Y.op)

    CachedY = sch.cache_write(PackedY, "global")

    c_out, h, w, c_in = sch[PackedY].op.axis
    w_out, w_in = sch[PackedY].split(w, factor=tw)
    sch[PackedY].reorder(c_out, h, w_out, w_in, c_in)
    c_out_h = sch[PackedY].fuse(c_out, h)
    sch[PackedY].parallel(c_out_h)
    sch[CachedY].compute_at(sch[PackedY], w_out)

    cc_out, ch, cw, cc_in = sch[CachedY].op.axis
    kh, kw = sch[CachedY].op.reduce_axis
    sch[CachedY].reorder(cc_out, ch, kh, kw, cw, cc_in)
    sch[CachedY].vectorize(cc_in)
    sch[CachedY].unroll(cw)

    # Schedule the padding by adding thread-level parallelism
    if PaddedX != X:
        sch[PaddedX].parallel(PaddedX.op.axis[0])
    # Optimize the packing of X and K
    sch[PackedX].parallel(sch[PackedX].fuse(*PackedX.op.axis[0:2]))
    sch[PackedX].unroll(PackedX.op.axis[-1])
    sch[PackedK].parallel(sch[PackedK].fuse(*PackedK.op.axis[0:2]))
    sch[PackedK].unroll(PackedK.op.axis[-1])
    # Optimize the unpacking of Y
    sch[Y].parallel(sch[Y].fuse(*Y.op.axis[0:2]))
    sch[Y].unroll(Y.op.axis[-1])
    return sch, (X, K, Y)


if __name__ == "__main__":
    sch, args = depthwise_cached_block(32, 64, 3, 1, 1)
    print(tvm.lower(sch, args, simple_mode=True))
