"""Depthwise convolution: every input channel is convolved with its own filters."""

from __future__ import annotations

from kiln import te
from kiln.ir import dtype as dt

from ..utils import get_const_tuple
from .conv2d import _block_of, _cast, _padded
from .utils import _pair, conv_out_size, conv_window, get_pad_tuple


def depthwise_conv2d_nchw(Input, Filter, stride, padding, dilation, out_dtype=None):  # noqa: N803
    """Input ``[N, C, H, W]``, Filter ``[C, M, KH, KW]`` (M = channel multiplier), output
    ``[N, C*M, OH, OW]`` where output channel ``c`` uses input channel ``c // M`` and filter
    ``[c // M, c % M]`` (tag ``"depthwise_conv2d_nchw"``)."""
    out_dtype = dt.normalize(out_dtype or Input.dtype)
    batch, in_c, in_h, in_w = get_const_tuple(Input.shape)
    f_c, mult, kh, kw = get_const_tuple(Filter.shape)
    if f_c != in_c:
        raise ValueError(f"depthwise_conv2d_nchw: filter has {f_c} channels, input has {in_c}")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = get_pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))
    out_h = conv_out_size(in_h, kh, pt, pb, sh, dh)
    out_w = conv_out_size(in_w, kw, pl, pr, sw, dw)
    temp = _padded(Input, [0, 0, pt, pl], [0, 0, pb, pr], "PaddedInput")
    di = te.reduce_axis((0, kh), name="di")
    dj = te.reduce_axis((0, kw), name="dj")

    def f(b, c, i, j):
        ic = c if mult == 1 else c // mult
        m = 0 if mult == 1 else c % mult
        return te.sum(_cast(temp[b, ic, i * sh + di * dh, j * sw + dj * dw], out_dtype)
                      * _cast(Filter[ic, m, di, dj], out_dtype), axis=[di, dj])

    attrs = {"strides": (sh, sw), "padding": (pt, pl, pb, pr), "dilation": (dh, dw),
             "groups": in_c, "layout": "NCHW"}
    return te.compute((batch, in_c * mult, out_h, out_w), f, name="DepthwiseConv2d",
                      tag="depthwise_conv2d_nchw", attrs=attrs)


def depthwise_conv2d_NCHWc(Input, Filter, stride, padding, dilation, layout=None,  # noqa: N802,N803
                           out_layout=None, out_dtype=None):
    """Packed depthwise convolution (channel multiplier 1): Input ``[N, C/cb, H, W, cb]``,
    Filter ``[C/cb, 1, KH, KW, 1, cb]``, output ``[N, C/cb, OH, OW, cb]``
    (tag ``"depthwise_conv2d_NCHWc"``)."""
    out_dtype = dt.normalize(out_dtype or Input.dtype)
    batch, c_chunk, in_h, in_w, c_bn = get_const_tuple(Input.shape)
    f_chunk, mult, kh, kw, one, f_bn = get_const_tuple(Filter.shape)
    if (f_chunk, f_bn) != (c_chunk, c_bn) or mult != 1 or one != 1:
        raise ValueError(
            f"depthwise_conv2d_NCHWc: filter shape {[f_chunk, mult, kh, kw, one, f_bn]} does "
            f"not match [{c_chunk}, 1, KH, KW, 1, {c_bn}] (only multiplier 1 is supported)")
    for lay in (layout, out_layout):
        if _block_of(lay, "layout") not in (None, c_bn):
            raise ValueError(f"depthwise_conv2d_NCHWc: layout {lay} does not match block "
                             f"{c_bn}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr), (out_h, out_w) = conv_window(
        (in_h, in_w), (kh, kw), stride, padding, dilation)
    temp = _padded(Input, [0, 0, pt, pl, 0], [0, 0, pb, pr, 0], "PaddedInput", masked=True)
    di = te.reduce_axis((0, kh), name="di")
    dj = te.reduce_axis((0, kw), name="dj")
    return te.compute(
        (batch, c_chunk, out_h, out_w, c_bn),
        lambda b, c, i, j, cb: te.sum(
            _cast(temp[b, c, i * sh + di * dh, j * sw + dj * dw, cb], out_dtype)
            * _cast(Filter[c, 0, di, dj, 0, cb], out_dtype), axis=[di, dj]),
        name="DepthwiseConv2d", tag="depthwise_conv2d_NCHWc",
        attrs={"strides": (sh, sw), "padding": (pt, pl, pb, pr), "dilation": (dh, dw),
               "groups": c_chunk * c_bn, "layout": f"NCHW{c_bn}c"})


__all__ = ["depthwise_conv2d_nchw", "depthwise_conv2d_NCHWc"]
