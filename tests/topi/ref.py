"""Numpy references of the topi tests in topi's argument conventions: convolutions and pooling
come from ``kiln.topi.testing`` (checked against scipy in test_topi_testing.py); layout packing
and adaptive pooling per window are here."""

from __future__ import annotations

import numpy as np

from kiln.topi import testing


def pair(x):
    return (x, x) if isinstance(x, int) else tuple(x)


def conv2d_nchw(x, w, stride, padding, dilation, groups=1):
    """Convolution with a dilated kernel: ``topi.testing.conv2d_nchw_python`` of the kernel
    spread by ``topi.testing.dilate_python``."""
    dh, dw = pair(dilation)
    return testing.conv2d_nchw_python(x, testing.dilate_python(w, (1, 1, dh, dw)), stride,
                                      padding, groups)


def depthwise_conv2d_nchw(x, w, stride, padding, dilation):
    """Depthwise: input channel c // m with filter (c // m, c % m)."""
    dh, dw = pair(dilation)
    return testing.depthwise_conv2d_python_nchw(x, testing.dilate_python(w, (1, 1, dh, dw)),
                                                stride, padding)


def pack_nchwc(x, cb):
    n, c, h, w = x.shape
    return x.reshape(n, c // cb, cb, h, w).transpose(0, 1, 3, 4, 2).copy()


def unpack_nchwc(x):
    n, cc, h, w, cb = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, cc * cb, h, w)


def pack_kernel(w, icb, ocb):
    f, c, kh, kw = w.shape
    return w.reshape(f // ocb, ocb, c // icb, icb, kh, kw).transpose(0, 2, 4, 5, 3, 1).copy()


def pool2d_nchw(x, kernel, stride, dilation, padding, pool_type, ceil_mode=False,
                count_include_pad=True):
    """``topi.testing.poolnd_python`` with topi's ``(top, left, bottom, right)`` padding."""
    pt, pl, pb, pr = padding
    return testing.poolnd_python(x, pair(kernel), pair(stride), pair(dilation), (pt, pl),
                                 (pb, pr), pool_type, count_include_pad, ceil_mode,
                                 dtype="float64")


def adaptive_pool_nchw(x, out_size, pool_type):
    n, c, h, w = x.shape
    oh, ow = out_size
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            win = x[:, :, h0:h1, w0:w1].astype(np.float64)
            out[:, :, i, j] = win.max(axis=(2, 3)) if pool_type == "max" else win.mean(
                axis=(2, 3))
    return out
