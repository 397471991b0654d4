"""2-D convolutions: NCHW, NHWC, grouped NCHW and the packed NCHW[x]c layout.

All take ``stride`` and ``dilation`` as an int or a pair, and ``padding`` as an int, a pair
``(pad_h, pad_w)``, four ints ``(top, left, bottom, right)`` or ``"SAME"``/``"VALID"``.
Inputs are zero-padded by a separate ``pad`` stage (tag ``"injective,pad"``, name
``"pad_temp"``/``"data_pad"``) that schedules inline or compute where they like; when there
is no padding there is no such stage.
"""

from __future__ import annotations

import re

from kiln import te
from kiln.ir import dtype as dt
from kiln.ir.op import cast

from ..utils import get_const_tuple
from .pad import pad, pad_masked
from .utils import _pair, conv_out_size, conv_window, get_pad_tuple


def _cast(x, dtype):
    return x if x.dtype == dtype else cast(x, dtype)


def _padded(data, pads_before, pads_after, name, masked=False):
    """The zero-padded input (``data`` itself without padding). ``masked``: the branch-free
    :func:`pad_masked` form, for packed layouts whose channel block is innermost."""
    if any(pads_before) or any(pads_after):
        if masked and dt.is_float(data.dtype):
            return pad_masked(data, pads_before, pads_after, name=name)
        return pad(data, pads_before, pads_after, name=name)
    return data


def conv2d(input, filter, strides, padding, dilation, layout="NCHW", out_dtype=None):  # noqa: A002
    """Convolution in ``layout`` ``"NCHW"`` (filter OIHW) or ``"NHWC"`` (filter HWIO)."""
    if layout == "NCHW":
        return conv2d_nchw(input, filter, strides, padding, dilation, out_dtype)
    if layout == "NHWC":
        return conv2d_nhwc(input, filter, strides, padding, dilation, out_dtype)
    raise ValueError(f"conv2d: unsupported layout {layout!r} (use 'NCHW' or 'NHWC')")


def conv2d_nchw(Input, Filter, stride, padding, dilation, out_dtype=None):  # noqa: N803
    """``Output[n, f, y, x] = sum_{c, ry, rx} pad(Input)[n, c, y*sh + ry*dh, x*sw + rx*dw]
    * Filter[f, c, ry, rx]`` with Input ``[N, C, H, W]`` and Filter ``[F, C, KH, KW]``
    (tag ``"conv2d_nchw"``)."""
    return group_conv2d_nchw(Input, Filter, stride, padding, dilation, 1, out_dtype,
                             _tag="conv2d_nchw", _name="conv2d_nchw")


def group_conv2d_nchw(Input, Filter, stride, padding, dilation, groups, out_dtype=None,  # noqa: N803
                      _tag="group_conv2d_nchw", _name="group_conv2d_nchw"):
    """Grouped convolution: Filter ``[F, C/groups, KH, KW]``; output channel ``f`` reads the
    input channels of group ``f // (F/groups)`` (tag ``"group_conv2d_nchw"``)."""
    out_dtype = dt.normalize(out_dtype or Input.dtype)
    batch, in_c, in_h, in_w = get_const_tuple(Input.shape)
    out_c, f_c, kh, kw = get_const_tuple(Filter.shape)
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if in_c % groups or out_c % groups:
        raise ValueError(f"{_name}: channels in={in_c} out={out_c} must be divisible by "
                         f"groups={groups}")
    if f_c * groups != in_c:
        raise ValueError(f"{_name}: the filter has {f_c} input channels per group, expected "
                         f"{in_c // groups} (input channels {in_c} / groups {groups})")
    (sh, sw), (dh, dw), (pt, pl, pb, pr), (out_h, out_w) = conv_window(
        (in_h, in_w), (kh, kw), stride, padding, dilation)
    temp = _padded(Input, [0, 0, pt, pl], [0, 0, pb, pr], "pad_temp")
    rc = te.reduce_axis((0, f_c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    per_group = out_c // groups

    def f(n, ff, yy, xx):
        c = rc if groups == 1 else (ff // per_group) * f_c + rc
        return te.sum(_cast(temp[n, c, yy * sh + ry * dh, xx * sw + rx * dw], out_dtype)
                      * _cast(Filter[ff, rc, ry, rx], out_dtype), axis=[rc, ry, rx])

    attrs = {"strides": (sh, sw), "padding": (pt, pl, pb, pr), "dilation": (dh, dw),
             "groups": groups, "layout": "NCHW", "layout_free_placeholders": [Filter]}
    return te.compute((batch, out_c, out_h, out_w), f, name=_name, tag=_tag, attrs=attrs)


def conv2d_nhwc(Input, Filter, stride, padding, dilation, out_dtype=None):  # noqa: N803
    """NHWC convolution: Input ``[N, H, W, C]``, Filter ``[KH, KW, C, F]`` (HWIO), output
    ``[N, OH, OW, F]`` (tag ``"conv2d_nhwc"``)."""
    out_dtype = dt.normalize(out_dtype or Input.dtype)
    batch, in_h, in_w, in_c = get_const_tuple(Input.shape)
    kh, kw, f_c, out_c = get_const_tuple(Filter.shape)
    if f_c != in_c:
        raise ValueError(f"conv2d_nhwc: filter has {f_c} input channels, input has {in_c}")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = get_pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))
    out_h = conv_out_size(in_h, kh, pt, pb, sh, dh)
    out_w = conv_out_size(in_w, kw, pl, pr, sw, dw)
    temp = _padded(Input, [0, pt, pl, 0], [0, pb, pr, 0], "pad_temp")
    rc = te.reduce_axis((0, in_c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (batch, out_h, out_w, out_c),
        lambda n, yy, xx, ff: te.sum(
            _cast(temp[n, yy * sh + ry * dh, xx * sw + rx * dw, rc], out_dtype)
            * _cast(Filter[ry, rx, rc, ff], out_dtype), axis=[ry, rx, rc]),
        name="conv2d_nhwc", tag="conv2d_nhwc",
        attrs={"strides": (sh, sw), "padding": (pt, pl, pb, pr), "dilation": (dh, dw),
               "groups": 1, "layout": "NHWC"})


_NCHWC = re.compile(r"^NCHW(\d+)c$")


def _block_of(layout: str | None, what: str):
    if layout is None:
        return None
    m = _NCHWC.match(layout)
    if not m:
        raise ValueError(f"conv2d_NCHWc: {what} must look like 'NCHW16c', got {layout!r}")
    return int(m.group(1))


def conv2d_NCHWc(data, kernel, stride, padding, dilation, layout=None, out_layout=None,  # noqa: N802
                 out_dtype="float32"):
    """Convolution in the packed layout (book §4.8): ``data[n, C/cb, H, W, cb]``,
    ``kernel[F/fb, C/cb, KH, KW, cb, fb]`` (OIHW[cb]i[fb]o), output ``[n, F/fb, OH, OW, fb]``
    (tag ``"conv2d_NCHWc"``). ``layout``/``out_layout`` (``"NCHW{cb}c"``/``"NCHW{fb}c"``)
    are checked against the shapes when given."""
    out_dtype = dt.normalize(out_dtype or data.dtype)
    batch, ic_chunk, in_h, in_w, ic_bn = get_const_tuple(data.shape)
    oc_chunk, k_ic_chunk, kh, kw, k_ic_bn, oc_bn = get_const_tuple(kernel.shape)
    if (k_ic_chunk, k_ic_bn) != (ic_chunk, ic_bn):
        raise ValueError(
            f"conv2d_NCHWc: kernel input blocks {k_ic_chunk}x{k_ic_bn} do not match the data's "
            f"{ic_chunk}x{ic_bn}")
    if _block_of(layout, "layout") not in (None, ic_bn):
        raise ValueError(f"conv2d_NCHWc: layout {layout} does not match data block {ic_bn}")
    if _block_of(out_layout, "out_layout") not in (None, oc_bn):
        raise ValueError(f"conv2d_NCHWc: out_layout {out_layout} does not match kernel block "
                         f"{oc_bn}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr), (out_h, out_w) = conv_window(
        (in_h, in_w), (kh, kw), stride, padding, dilation)
    data_pad = _padded(data, [0, 0, pt, pl, 0], [0, 0, pb, pr, 0], "data_pad", masked=True)
    icc = te.reduce_axis((0, ic_chunk), name="icc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    icb = te.reduce_axis((0, ic_bn), name="icb")
    return te.compute(
        (batch, oc_chunk, out_h, out_w, oc_bn),
        lambda n, oc, oh, ow, ob: te.sum(
            _cast(data_pad[n, icc, oh * sh + ry * dh, ow * sw + rx * dw, icb], out_dtype)
            * _cast(kernel[oc, icc, ry, rx, icb, ob], out_dtype), axis=[icc, ry, rx, icb]),
        name="conv2d_NCHWc", tag="conv2d_NCHWc",
        attrs={"strides": (sh, sw), "padding": (pt, pl, pb, pr), "dilation": (dh, dw),
               "groups": 1, "layout": f"NCHW{ic_bn}c", "out_layout": f"NCHW{oc_bn}c",
               "layout_free_placeholders": [kernel]})


__all__ = ["conv2d", "conv2d_nchw", "conv2d_nhwc", "group_conv2d_nchw", "conv2d_NCHWc"]
