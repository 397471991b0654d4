"""Book §3.4 "Depthwise Convolution": d2ltvm.depthwise_conv and the depthwise data helper.

The book checks against MXNet's grouped convolution; here each channel is checked with
scipy.signal.correlate2d against its own 2-D kernel.
"""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm

signal = pytest.importorskip("scipy.signal")


def depthwise_reference(data: np.ndarray, weight: np.ndarray, p: int, s: int) -> np.ndarray:
    """data (c, n, n), weight (c, 1, k, k) -> (c, on, on): channel i with kernel i only."""
    padded = np.pad(data.astype(np.float64), ((0, 0), (p, p), (p, p)))
    out = [
        signal.correlate2d(x, w[0].astype(np.float64), mode="valid")
        for x, w in zip(padded, weight, strict=True)
    ]
    return np.stack(out)[:, ::s, ::s]


def test_depthwise_data_shapes():
    data, weight, out = d2ltvm.get_conv_data(8, 8, 12, 3, 1, 1, conv_type="depthwise")
    assert (data.shape, weight.shape, out.shape) == ((8, 12, 12), (8, 1, 3, 3), (8, 12, 12))
    direct = d2ltvm.get_conv_data(8, 8, 12, 3, 1, 1)
    np.testing.assert_array_equal(data, direct[0])  # same seed, same data


def test_book_depthwise_conv(lower_text):
    """§3.4.1: 256 channels, 12x12 input, 3x3 kernel, padding 1, stride 1."""
    ic, n, k, p, s = 256, 12, 3, 1, 1
    X, K, Y, _ = d2ltvm.depthwise_conv(ic, n, n, k, k, p, p, s, s)
    sch = te.create_schedule(Y.op)
    mod = tvm.build(sch, [X, K, Y])
    text = lower_text(sch, [X, K, Y])
    assert "produce PaddedX" in text and "produce Y" in text
    for loop in ("for (c, 0, 256)", "for (rkh, 0, 3)", "for (rkw, 0, 3)"):
        assert loop in text
    assert "ric" not in text  # no reduction over input channels

    data, weight, out = d2ltvm.get_conv_data(
        ic, ic, n, k, p, s, constructor=tvm.nd.array, conv_type="depthwise"
    )
    mod(data, weight, out)
    expected = depthwise_reference(data.asnumpy(), weight.asnumpy(), p, s)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ic, n, k, p, s", [(8, 13, 3, 0, 2), (4, 9, 5, 2, 1), (3, 10, 3, 1, 3)])
def test_depthwise_variants(ic, n, k, p, s):
    X, K, Y, PaddedX = d2ltvm.depthwise_conv(ic, n, n, k, k, p, p, s, s)
    if p == 0:
        assert PaddedX is X
    mod = tvm.build(te.create_schedule(Y.op), [X, K, Y])
    data, weight, out = d2ltvm.get_conv_data(ic, ic, n, k, p, s, tvm.nd.array, "depthwise")
    mod(data, weight, out)
    expected = depthwise_reference(data.asnumpy(), weight.asnumpy(), p, s)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_numpy_stand_in_for_mxnet_depthwise():
    ic, n, k, p, s = 6, 11, 3, 1, 2
    data, weight, bias, out = d2ltvm.get_conv_data_mxnet(ic, ic, n, k, p, s, conv_type="depthwise")
    d2ltvm.depthwise_conv_mxnet(data, weight, bias, out, k, p, s)
    expected = depthwise_reference(data[0], weight, p, s)
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-5)
