"""``kiln.topi.testing`` (TVM's ``tvm.topi.testing``): each numpy reference against an
independent computation (scipy's correlate and softmax, sliding windows, explicit loops) and,
where kiln has the operator, against ``topi.nn.*`` built with the generic schedule."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal, special

from kiln import te, topi
from kiln.topi import testing as tt

from .common import randn, run


def _correlate_nchw(x, w, stride, pads, groups=1):
    """scipy.signal.correlate per (batch, filter) over the filter's channel group."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    f, cg = w.shape[:2]
    fg = f // groups
    out = np.stack([np.stack([
        signal.correlate(xp[b, (o // fg) * cg:(o // fg + 1) * cg], w[o].astype(np.float64),
                         mode="valid", method="direct")[0]
        for o in range(f)]) for b in range(x.shape[0])])
    return out[:, :, ::stride, ::stride]


# (input shape, filter shape, stride, padding as given, the same as (t, l, b, r), groups)
CONV_CASES = [
    ((1, 3, 7, 7), (4, 3, 3, 3), 1, 1, (1, 1, 1, 1), 1),
    ((2, 4, 9, 8), (6, 2, 3, 2), 2, (1, 0), (1, 0, 1, 0), 2),
    ((1, 2, 6, 6), (3, 2, 3, 3), 1, (0, 1, 2, 1), (0, 1, 2, 1), 1),
    ((1, 2, 5, 6), (2, 2, 3, 3), 1, "SAME", (1, 1, 1, 1), 1),
    ((1, 2, 5, 6), (2, 2, 2, 2), 1, "VALID", (0, 0, 0, 0), 1),
]


@pytest.mark.parametrize("xs, ws, stride, padding, pads, groups", CONV_CASES)
def test_conv2d_nchw_and_nhwc_match_scipy(xs, ws, stride, padding, pads, groups):
    x, w = randn(xs, 1), randn(ws, 2)
    expected = _correlate_nchw(x, w, stride, pads, groups)
    got = tt.conv2d_nchw_python(x, w, stride, padding, groups)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    nhwc = tt.conv2d_nhwc_python(x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), stride,
                                 padding, groups)
    np.testing.assert_allclose(nhwc, expected.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)


def test_conv2d_references_match_kiln_topi():
    x, w = randn((1, 3, 8, 8), 3), randn((4, 3, 3, 3), 4)
    X, W = te.placeholder(x.shape, name="X"), te.placeholder(w.shape, name="W")
    got, = run(topi.generic.schedule_conv2d_nchw, topi.nn.conv2d_nchw(X, W, 2, 1, 1), [X, W],
               [x, w])
    np.testing.assert_allclose(got, tt.conv2d_nchw_python(x, w, 2, 1), rtol=1e-5, atol=1e-5)
    xh, wh = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)
    Xh, Wh = te.placeholder(xh.shape, name="X"), te.placeholder(wh.shape, name="W")
    got, = run(topi.generic.schedule_conv2d_nhwc, topi.nn.conv2d_nhwc(Xh, Wh, 1, 1, 1), [Xh, Wh],
               [xh, wh])
    np.testing.assert_allclose(got, tt.conv2d_nhwc_python(xh, wh, 1, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride, padding", [(1, 1), (2, 0), (1, "SAME")])
def test_depthwise_conv2d_matches_scipy_and_kiln_topi(stride, padding):
    x, w = randn((1, 3, 7, 7), 5), randn((3, 2, 3, 3), 6)
    pads = (1, 1, 1, 1) if padding in (1, "SAME") else (0, 0, 0, 0)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), pads[::2], pads[1::2]))
    expected = np.stack([signal.correlate2d(xp[0, c], w[c, m], mode="valid")[::stride, ::stride]
                         for c in range(3) for m in range(2)])[None]
    got = tt.depthwise_conv2d_python_nchw(x, w, stride, padding)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    nhwc = tt.depthwise_conv2d_python_nhwc(x.transpose(0, 2, 3, 1), w.transpose(2, 3, 0, 1),
                                           stride, padding)
    np.testing.assert_allclose(nhwc, expected.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)
    X, W = te.placeholder(x.shape, name="X"), te.placeholder(w.shape, name="W")
    out, = run(topi.generic.schedule_depthwise_conv2d_nchw,
               topi.nn.depthwise_conv2d_nchw(X, W, stride, padding, 1), [X, W], [x, w])
    np.testing.assert_allclose(out, got, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride, padding, dilation", [(1, 0, 1), (2, (1, 2), 2), (1, "SAME", 1)])
def test_conv1d_ncw_matches_scipy(stride, padding, dilation):
    x, w = randn((2, 3, 11), 7), randn((4, 3, 3), 8)
    left, right = {0: (0, 0), (1, 2): (1, 2), "SAME": (1, 1)}[padding]
    wd = np.zeros((4, 3, (3 - 1) * dilation + 1))
    wd[:, :, ::dilation] = w
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (left, right)))
    expected = np.stack([np.stack([signal.correlate(xp[b], wd[f], mode="valid")[0]
                                   for f in range(4)]) for b in range(2)])[:, :, ::stride]
    np.testing.assert_allclose(tt.conv1d_ncw_python(x, w, stride, padding, dilation), expected,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride, padding, out_pad", [(1, 0, 0), (2, 1, 1), (2, (0, 1, 1, 0), 0)])
def test_conv2d_transpose_matches_scatter_loop(stride, padding, out_pad):
    x, w = randn((1, 2, 4, 5), 9), randn((2, 3, 3, 3), 10)
    pt, pl, pb, pr = (padding,) * 4 if isinstance(padding, int) else padding
    full = np.zeros((1, 3, (4 - 1) * stride + 3 + out_pad, (5 - 1) * stride + 3 + out_pad))
    for c in range(2):
        for i in range(4):
            for j in range(5):
                full[0, :, i * stride:i * stride + 3, j * stride:j * stride + 3] += (
                    x[0, c, i, j] * w[c].astype(np.float64))
    expected = full[:, :, pt:full.shape[2] - pb, pl:full.shape[3] - pr]
    got = tt.conv2d_transpose_nchw_python(x, w, stride, padding, out_pad)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_dilate_python():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    got = tt.dilate_python(x, (2, 3), dilation_value=-1.0)
    assert got.shape == (3, 7)
    expected = np.full((3, 7), -1.0, "float32")
    for i in range(2):
        for j in range(3):
            expected[2 * i, 3 * j] = x[i, j]
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="strides"):
        tt.dilate_python(x, (2,))


def _pool_by_windows(x, kernel, strides, dilation, before, after, pool_type, cip, ceil):
    """Pooling from numpy's sliding windows over a nan-padded copy (nan marks the padding;
    ceil mode pads one more stride at the end)."""
    nd = len(kernel)
    extra = [s if ceil else 0 for s in strides]
    widths = [(0, 0), (0, 0)] + [(b, a + e) for b, a, e in zip(before, after, extra, strict=True)]
    xp = np.pad(x.astype(np.float64), widths, constant_values=np.nan)
    ones = np.pad(np.ones(x.shape[2:]), [(b, a) for b, a in zip(before, after, strict=True)],
                  constant_values=1.0 if cip else 0.0)
    ones = np.pad(ones, [(0, e) for e in extra])
    dk = [(k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True)]
    win = np.lib.stride_tricks.sliding_window_view(xp, dk, axis=tuple(range(2, 2 + nd)))
    cnt = np.lib.stride_tricks.sliding_window_view(ones, dk)
    taps = (..., *[slice(None, None, d) for d in dilation])
    starts = tuple(slice(None, None, s) for s in strides)
    win, cnt = win[(slice(None), slice(None)) + starts][taps], cnt[starts][taps]
    axes = tuple(range(-nd, 0))
    sizes = [(n + b + a - k) // s + 1 if not ceil else -(-(n + b + a - k) // s) + 1
             for n, b, a, k, s in zip(x.shape[2:], before, after, dk, strides, strict=True)]
    sizes = [o - 1 if ceil and (o - 1) * s >= n + b else o
             for o, s, n, b in zip(sizes, strides, x.shape[2:], before, strict=True)]
    keep = (slice(None), slice(None)) + tuple(slice(0, o) for o in sizes)
    if pool_type == "max":
        return np.nanmax(win, axis=axes)[keep]
    return (np.nansum(win, axis=axes) / np.maximum(cnt.sum(axis=axes), 1))[keep]


# (shape, kernel, strides, dilation, before, after, pool type, count_include_pad, ceil_mode)
POOL_CASES = [
    ((1, 2, 9, 9), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), "max", True, False),
    ((2, 3, 8, 7), (3, 2), (2, 2), (1, 1), (1, 0), (1, 1), "avg", True, False),
    ((1, 2, 8, 7), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), "avg", False, False),
    ((1, 2, 10, 7), (3, 3), (2, 2), (1, 1), (1, 0), (1, 0), "avg", False, True),
    ((1, 2, 10, 7), (3, 3), (2, 2), (1, 1), (1, 0), (1, 0), "max", True, True),
    ((1, 2, 9, 9), (3, 3), (1, 1), (2, 2), (2, 1), (2, 1), "avg", True, False),
    ((1, 2, 11), (3,), (2,), (1,), (1,), (1,), "avg", True, True),
    ((1, 2, 5, 6, 4), (2, 3, 2), (2, 1, 2), (1, 1, 1), (0, 1, 1), (1, 1, 0), "max", True, False),
]


@pytest.mark.parametrize("shape, k, s, d, b, a, ptype, cip, ceil", POOL_CASES)
def test_poolnd_matches_sliding_windows(shape, k, s, d, b, a, ptype, cip, ceil):
    x = randn(shape, 12)
    got = tt.poolnd_python(x, k, s, d, b, a, ptype, cip, ceil)
    expected = _pool_by_windows(x, k, s, d, b, a, ptype, cip, ceil)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, k, s, d, b, a, ptype, cip, ceil", POOL_CASES[:6])
def test_poolnd_matches_kiln_pool2d(shape, k, s, d, b, a, ptype, cip, ceil):
    x = randn(shape, 13)
    X = te.placeholder(shape, name="X")
    Y = topi.nn.pool2d(X, k, s, d, (b[0], b[1], a[0], a[1]), ptype, ceil_mode=ceil,
                       count_include_pad=cip)
    got, = run(topi.generic.schedule_pool, Y, [X], [x])
    np.testing.assert_allclose(got, tt.poolnd_python(x, k, s, d, b, a, ptype, cip, ceil),
                               rtol=1e-5, atol=1e-6)


def test_poolnd_rejects_channels_last_and_unknown_type():
    x = np.zeros((1, 4, 4, 2), "float32")
    with pytest.raises(ValueError, match="channels-first"):
        tt.poolnd_python(x, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0), "max", layout="NHWC")
    with pytest.raises(ValueError, match="pool_type"):
        tt.poolnd_python(x, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0), "sum")


@pytest.mark.parametrize("axis", [1, 0, -1])
def test_softmax_matches_scipy_and_kiln_topi(axis):
    x = randn((3, 5, 4), 14) * 10
    np.testing.assert_allclose(tt.softmax_python(x, axis), special.softmax(x, axis=axis),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tt.log_softmax_python(x, axis),
                               special.log_softmax(x, axis=axis), rtol=1e-5, atol=1e-5)
    X = te.placeholder(x.shape, name="X")
    got, = run(topi.generic.schedule_softmax, topi.nn.softmax(X, axis), [X], [x])
    np.testing.assert_allclose(got, tt.softmax_python(x, axis), rtol=1e-5, atol=1e-6)


def test_softmax_default_axis_is_tvms():
    x = randn((2, 3), 15)
    np.testing.assert_allclose(tt.softmax_python(x), special.softmax(x, axis=1), rtol=1e-6)


@pytest.mark.parametrize("trans_x, trans_y, xb, yb", [(False, True, 2, 2), (True, False, 2, 1),
                                                      (False, False, 1, 3)])
def test_batch_matmul_matches_loops_and_kiln_topi(trans_x, trans_y, xb, yb):
    m, n, k = 3, 4, 5
    x = randn((xb, k, m) if trans_x else (xb, m, k), 16)
    y = randn((yb, n, k) if trans_y else (yb, k, n), 17)
    batch = max(xb, yb)
    expected = np.zeros((batch, m, n))
    for b in range(batch):
        xm = x[b % xb].T if trans_x else x[b % xb]
        ym = y[b % yb].T if trans_y else y[b % yb]
        for i in range(m):
            for j in range(n):
                expected[b, i, j] = sum(float(xm[i, t]) * float(ym[t, j]) for t in range(k))
    got = tt.batch_matmul(x, y, trans_x=trans_x, trans_y=trans_y)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert tt.batch_matmul(x, y, "float64", trans_x, trans_y).dtype == np.float64
    X, Y = te.placeholder(x.shape, name="X"), te.placeholder(y.shape, name="Y")
    out, = run(topi.generic.schedule_batch_matmul,
               topi.nn.batch_matmul(X, Y, transpose_a=trans_x, transpose_b=trans_y), [X, Y],
               [x, y])
    np.testing.assert_allclose(out, got, rtol=1e-5, atol=1e-5)


def test_lrn_matches_loops():
    x = randn((1, 6, 2, 3), 18)
    size, bias, alpha, beta = 3, 2.0, 1e-2, 0.75
    expected = np.zeros(x.shape)
    for c in range(6):
        window = x[:, max(0, c - 1):min(6, c + 2)].astype(np.float64)
        expected[:, c] = x[:, c] / (bias + alpha / size * (window ** 2).sum(axis=1)) ** beta
    np.testing.assert_allclose(tt.lrn_python(x, size, 1, bias, alpha, beta), expected,
                               rtol=1e-5)


def test_importable_under_the_tvm_alias_and_not_eagerly():
    import subprocess
    import sys

    code = ("import sys, kiln.topi; assert 'kiln.topi.testing' not in sys.modules; "
            "kiln.install_as_tvm(); import tvm.topi.testing, kiln.topi.testing; "
            "assert tvm.topi.testing is kiln.topi.testing; "
            "from tvm import topi; topi.testing.conv2d_nchw_python")
    subprocess.run([sys.executable, "-c", code], check=True)
