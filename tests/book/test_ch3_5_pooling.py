"""Book §3.5 "Pooling": d2ltvm.pool, max and avg, default schedule.

The book checks against MXNet's Pooling; here the reference is a numpy sliding-window
max/mean (padding counted in the average, as MXNet does by default).
"""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def pool_reference(pool_type: str, data: np.ndarray, k: int, p: int, s: int) -> np.ndarray:
    """data (c, n, n) -> (c, on, on); max pads with -inf, avg pads with 0 and divides by k*k."""
    fill = -np.inf if pool_type == "max" else 0.0
    padded = np.pad(data.astype(np.float64), ((0, 0), (p, p), (p, p)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))[:, ::s, ::s]
    return win.max(axis=(-2, -1)) if pool_type == "max" else win.sum(axis=(-2, -1)) / (k * k)


def run_pool(pool_type, c, n, k, p, s):
    X, Y, PaddedX = d2ltvm.pool(pool_type, c, n, n, k, k, p, p, s, s)
    sch = te.create_schedule(Y.op)
    mod = tvm.build(sch, [X, Y])
    data, _, out = d2ltvm.get_conv_data(c, c, n, k, p, s, tvm.nd.array)
    mod(data, out)
    expected = pool_reference(pool_type, data.asnumpy(), k, p, s)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-6, atol=1e-6)
    return sch, (X, Y, PaddedX)


def test_book_max_pool(lower_text):
    c, n, k, p, s = 4, 12, 3, 1, 1
    sch, (X, Y, _) = run_pool("max", c, n, k, p, s)
    text = lower_text(sch, [X, Y])
    assert "produce PaddedX" in text and "produce PoolMax" in text
    assert "for (rkh, 0, 3)" in text and "for (rkw, 0, 3)" in text
    assert "max(" in text


def test_book_avg_pool(lower_text):
    c, n, k, p, s = 4, 12, 3, 1, 1
    sch, (X, Y, _) = run_pool("avg", c, n, k, p, s)
    text = lower_text(sch, [X, Y])
    for stage in ("produce PaddedX", "produce PoolSum", "produce PoolAvg"):
        assert stage in text


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("c, n, k, p, s", [(4, 12, 3, 1, 2), (2, 9, 2, 0, 2), (3, 10, 5, 2, 1)])
def test_pool_variants(pool_type, c, n, k, p, s):
    """Stride 2, no padding (PaddedX is X), a wider window."""
    _, (X, _, PaddedX) = run_pool(pool_type, c, n, k, p, s)
    if p == 0:
        assert PaddedX is X


def test_max_pool_of_negative_data_ignores_padding():
    """Padding with the dtype's minimum must not win the max, even for all-negative data."""
    X, Y, _ = d2ltvm.pool("max", 2, 5, 5, 3, 3, 1, 1, 1, 1)
    mod = tvm.build(te.create_schedule(Y.op), [X, Y])
    data = -np.arange(1, 51, dtype="float32").reshape((2, 5, 5))
    out = tvm.nd.array(np.empty((2, 5, 5), dtype="float32"))
    mod(tvm.nd.array(data), out)
    np.testing.assert_equal(out.asnumpy(), pool_reference("max", data, 3, 1, 1))


def test_unknown_pool_type():
    with pytest.raises(ValueError, match="avg' or 'max"):
        d2ltvm.pool("min", 4, 12, 12, 3, 3)


@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_numpy_stand_in_for_mxnet_pool(pool_type):
    c, n, k, p, s = 4, 12, 3, 1, 1
    data, out = d2ltvm.get_pool_data_mxnet(c, n, k, p, s)
    assert data.shape == (1, c, n, n) and out.shape == (1, c, n, n)
    d2ltvm.pool_mxnet(pool_type, data, out, k, p, s)
    np.testing.assert_allclose(out[0], pool_reference(pool_type, data[0], k, p, s), rtol=1e-6)
