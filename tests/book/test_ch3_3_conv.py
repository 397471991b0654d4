"""Book §3.3 "Convolution": d2ltvm.padding, conv_out_size, conv, get_conv_data.

The book checks against MXNet's convolution; here the reference is scipy.signal.correlate
(a convolution layer is a cross-correlation) summed over input channels.
"""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import conv_reference

signal = pytest.importorskip("scipy.signal")


def test_padding_3d(lower_text):
    """§3.3.1: pad the last two axes of a (2, 3, 4) tensor by 1 row and 2 columns."""
    A = te.placeholder((2, 3, 4))
    B = d2ltvm.padding(A, 1, 2)
    assert [int(x) for x in B.shape] == [2, 5, 8]
    s = te.create_schedule(B.op)
    assert "produce PaddedX" in lower_text(s, [A, B])
    mod = tvm.build(s, [A, B])

    a = tvm.nd.array(np.ones((2, 3, 4), dtype="float32"))
    b = tvm.nd.array(np.empty((2, 5, 8), dtype="float32"))
    mod(a, b)
    expected = np.zeros((2, 5, 8), dtype="float32")
    expected[:, 1:4, 2:6] = 1
    np.testing.assert_equal(b.asnumpy(), expected)


def test_padding_with_value_and_distinct_data():
    A = te.placeholder((3, 2, 3))
    B = d2ltvm.padding(A, 2, 1, val=-7.0)
    mod = tvm.build(te.create_schedule(B.op), [A, B])
    a = np.arange(18, dtype="float32").reshape((3, 2, 3))
    b = tvm.nd.array(np.empty((3, 6, 5), dtype="float32"))
    mod(tvm.nd.array(a), b)
    np.testing.assert_equal(b.asnumpy(), np.pad(a, ((0, 0), (2, 2), (1, 1)), constant_values=-7.0))


def test_padding_needs_two_dims():
    with pytest.raises(ValueError):
        d2ltvm.padding(te.placeholder((5,)), 1, 1)


@pytest.mark.parametrize(
    "n, k, p, s, expected",
    [(12, 3, 1, 1, 12), (5, 3, 0, 1, 3), (3, 2, 1, 3, 2), (3, 2, 1, 2, 2), (7, 3, 1, 2, 4)],
)
def test_conv_out_size(n, k, p, s, expected):
    assert d2ltvm.conv_out_size(n, k, p, s) == expected


def test_figure_3_3_1():
    """Fig. 3.3.1: 3x3 input 0..8, 2x2 kernel 0..3, padding 1, strides 3 (h) and 2 (w):
    the two highlighted outputs are 0*0+0*1+1*2+2*3 = 8 and 0*0+6*1+0*2+0*3 = 6; the full
    output is [[0, 8], [6, 8]]."""
    X, K, Y, PaddedX = d2ltvm.conv(1, 1, 3, 3, 2, 2, 1, 1, 3, 2)
    mod = tvm.build(te.create_schedule(Y.op), [X, K, Y])
    x = np.arange(9, dtype="float32").reshape((1, 3, 3))
    w = np.arange(4, dtype="float32").reshape((1, 1, 2, 2))
    y = tvm.nd.array(np.empty((1, 2, 2), dtype="float32"))
    mod(tvm.nd.array(x), tvm.nd.array(w), y)
    np.testing.assert_equal(y.asnumpy()[0], np.array([[0, 8], [6, 8]], dtype="float32"))


def test_book_conv(lower_text):
    """§3.3.2: 4 output and 6 input channels, 12x12 input, 3x3 kernel, padding 1, stride 1."""
    oc, ic, n, k, p, s = 4, 6, 12, 3, 1, 1
    X, K, Y, _ = d2ltvm.conv(oc, ic, n, n, k, k, p, p, s, s)
    sch = te.create_schedule(Y.op)
    mod = tvm.build(sch, [X, K, Y])
    text = lower_text(sch, [X, K, Y])
    assert "produce PaddedX" in text and "produce Y" in text
    for loop in ("for (c, 0, 4)", "for (ric, 0, 6)", "for (rkh, 0, 3)", "for (rkw, 0, 3)"):
        assert loop in text

    data, weight, out = d2ltvm.get_conv_data(oc, ic, n, k, p, s, tvm.nd.array)
    mod(data, weight, out)
    expected = conv_reference(data.asnumpy(), weight.asnumpy(), p, s)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "oc, ic, n, k, p, s",
    [(2, 3, 9, 3, 1, 2), (3, 2, 8, 5, 2, 1), (2, 2, 7, 3, 0, 1), (1, 4, 10, 1, 0, 3)],
)
def test_conv_variants(oc, ic, n, k, p, s):
    """Strides, wider padding, and no padding (then PaddedX is X itself)."""
    X, K, Y, PaddedX = d2ltvm.conv(oc, ic, n, n, k, k, p, p, s, s)
    if p == 0:
        assert PaddedX is X
    mod = tvm.build(te.create_schedule(Y.op), [X, K, Y])
    data, weight, out = d2ltvm.get_conv_data(oc, ic, n, k, p, s, tvm.nd.array)
    assert tuple(out.shape) == (oc,) + (d2ltvm.conv_out_size(n, k, p, s),) * 2
    mod(data, weight, out)
    expected = conv_reference(data.asnumpy(), weight.asnumpy(), p, s)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_numpy_stand_in_for_mxnet_conv():
    """d2ltvm.conv_mxnet (numpy stand-in) agrees with the scipy reference."""
    oc, ic, n, k, p, s = 4, 6, 12, 3, 1, 2
    data, weight, bias, out = d2ltvm.get_conv_data_mxnet(oc, ic, n, k, p, s)
    assert data.shape == (1, ic, n, n) and out.shape == (1, oc, 6, 6) and bias.shape == (oc,)
    d2ltvm.conv_mxnet(data, weight, bias, out, k, p, s)
    np.testing.assert_allclose(out[0], conv_reference(data[0], weight, p, s), rtol=1e-5, atol=1e-5)
