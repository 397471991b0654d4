"""Book §4.8 "Packed Convolution": channels tiled and packed into the NCHW[x]c layout.

* ``conv_pack(oc, ic, nh, nw, kh, kw, ph, pw, toc, tic)`` returns
  ``X, K, PaddedX, PackedX, PackedK``: X (ic, nh, nw) padded, then packed to
  (ic/tic, nh+2ph, nw+2pw, tic); K (oc, ic, kh, kw) packed to (oc/toc, ic/tic, kh, kw, tic, toc).
* ``conv(oc, ic, nh, nw, kh, kw, ph, pw, sh, sw, toc, tic)`` computes the packed output
  (oc/toc, oh, ow, toc) and unpacks it to Y (oc, oh, ow); returns
  ``X, K, Y, PaddedX, PackedX, PackedK, PackedY``.
* ``cached_block(oc, ic, n, k, p, s)`` is the book's schedule; returns ``sch, (X, K, Y)``.

As in the book, the packed output stage is also named ``Y`` (two stages share the name).
The channel counts must be multiples of the tile sizes.
"""

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def conv_pack(oc, ic, nh, nw, kh, kw, ph, pw, toc, tic):
    X = te.placeholder((ic, nh, nw), name="X")
    K = te.placeholder((oc, ic, kh, kw), name="K")
    PaddedX = d2ltvm.padding(X, ph, pw) if ph * pw != 0 else X
    # pack X and K
    assert ic % tic == 0 and oc % toc == 0
    PackedX = te.compute(
        (ic // tic, nh + ph * 2, nw + pw * 2, tic),
        lambda ic_out, x, y, ic_in: PaddedX[ic_out * tic + ic_in, x, y],
        name="PackedX",
    )
    PackedK = te.compute(
        (oc // toc, ic // tic, kh, kw, tic, toc),
        lambda oc_out, ic_out, x, y, ic_in, oc_in: K[
            oc_out * toc + oc_in, ic_out * tic + ic_in, x, y],
        name="PackedK",
    )
    return X, K, PaddedX, PackedX, PackedK


def conv(oc, ic, nh, nw, kh, kw, ph, pw, sh, sw, toc, tic):
    X, K, PaddedX, PackedX, PackedK = conv_pack(oc, ic, nh, nw, kh, kw, ph, pw, toc, tic)
    # reduction axes
    ric_in = te.reduce_axis((0, tic), name="ric_in")
    ric_out = te.reduce_axis((0, ic // tic), name="ric_out")
    rkh = te.reduce_axis((0, kh), name="rkh")
    rkw = te.reduce_axis((0, kw), name="rkw")
    # output height and width
    oh = d2ltvm.conv_out_size(nh, kh, ph, sh)
    ow = d2ltvm.conv_out_size(nw, kw, pw, sw)
    # Compute Y in the packed layout
    PackedY = te.compute(
        (oc // toc, oh, ow, toc),
        lambda oc_out, x, y, oc_in: te.sum(
            PackedX[ric_out, x * sh + rkh, y * sw + rkw, ric_in]
            * PackedK[oc_out, ric_out, rkh, rkw, ric_in, oc_in],
            axis=[ric_out, rkh, rkw, ric_in],
        ),
        name="Y",
    )
    # Unpack the result
    Y = te.compute((oc, oh, ow), lambda oc, x, y: PackedY[oc // toc, x, y, oc % toc], name="Y")
    return X, K, Y, PaddedX, PackedX, PackedK, PackedY


def cached_block(oc, ic, n, k, p, s, toc=16, tic=16, tw=4):
    """The book's schedule; tile sizes for output channel, input channel and width."""
    X, K, Y, PaddedX, PackedX, PackedK, PackedY = conv(oc, ic, n, n, k, k, p, p, s, s, toc, tic)
    sch = te.create_schedule(Y.op)
    CachedY = sch.cache_write(PackedY, "local")
    oc_out, h, w, oc_in = sch[PackedY].op.axis
    oc_out_h = sch[PackedY].fuse(oc_out, h)
    # Parallel on the first two dimensions oc_out and h
    sch[PackedY].parallel(oc_out_h)
    # Optimize the computation of a cached output block
    w_out, w_in = sch[PackedY].split(w, factor=tw)  # Split the columns
    sch[CachedY].compute_at(sch[PackedY], w_out)
    _, _, cw, oc_in = CachedY.op.axis
    ric_out, rkh, rkw, ric_in = CachedY.op.reduce_axis
    sch[CachedY].reorder(ric_out, rkh, rkw, ric_in, cw, oc_in)
    sch[CachedY].unroll(ric_in)
    sch[CachedY].unroll(cw)
    sch[CachedY].vectorize(oc_in)
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
    sch, args = cached_block(32, 32, 64, 3, 1, 1)
    print(tvm.lower(sch, args, simple_mode=True))
