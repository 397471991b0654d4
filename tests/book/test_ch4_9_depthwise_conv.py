"""Book §4.9 "Depthwise Convolution" on CPU: packed depthwise convolution and the
``depthwise_cached_block`` schedule of examples/book/ch4_9_depthwise_conv.py.

The schedule reads the root stage PackedX from a cache stage computed at PackedY's ``w_out``
loop; the tests assert that PackedX still covers the whole packed input before running.
"""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import allocated, load_example

signal = pytest.importorskip("scipy.signal")


ex = load_example("book", "ch4_9_depthwise_conv")
TARGET = "llvm"


def depthwise_reference(data, weight, p, s):
    """data (c, n, n), weight (c, 1, k, k): channel i correlated with weight[i, 0]."""
    padded = np.pad(data.astype(np.float64), ((0, 0), (p, p), (p, p)))
    out = [signal.correlate2d(padded[i], weight[i, 0].astype(np.float64), mode="valid")
           for i in range(data.shape[0])]
    return np.stack(out)[:, ::s, ::s]


def run_and_check(sch, args, c, n, k, p, s):
    mod = tvm.build(sch, args, TARGET)
    data, weight, out = d2ltvm.get_conv_data(c, c, n, k, p, s, tvm.nd.array,
                                             conv_type="depthwise")
    mod(data, weight, out)
    np.testing.assert_allclose(out.asnumpy(),
                               depthwise_reference(data.asnumpy(), weight.asnumpy(), p, s),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c, n, k, p, s, tc", [(32, 64, 3, 1, 1, 16), (8, 13, 3, 1, 2, 16)])
def test_depthwise_default_schedule(c, n, k, p, s, tc):
    """§4.9.2 at the book's sizes; then c = 8 < tc (the tile shrinks to c) with stride 2."""
    X, K, Y, _, _, _, _ = ex.depthwise_conv(c, n, n, k, k, p, p, s, s, tc)
    run_and_check(te.create_schedule(Y.op), [X, K, Y], c, n, k, p, s)


def check_cached_block(c, n, k, p, s):
    sch, args = ex.depthwise_cached_block(c, n, k, p, s)
    text = str(tvm.lower(sch, args, simple_mode=True))
    assert allocated(text, "PackedX") >= c * (n + 2 * p) ** 2
    run_and_check(sch, args, c, n, k, p, s)
    return text


def test_depthwise_cached_block_book_size(golden):
    """§4.9.3: c = 32, 64 x 64 input, 3 x 3 kernel, tc = 16, tw = 4."""
    text = check_cached_block(32, 64, 3, 1, 1)
    assert "parallel (c_out.x.fused, 0, 128)" in text
    golden("ch4_9_depthwise_cached_block", text)


@pytest.mark.parametrize("c, n, k, p, s", [(16, 13, 3, 1, 1), (32, 13, 3, 0, 1)])
def test_depthwise_cached_block_odd_size(c, n, k, p, s):
    check_cached_block(c, n, k, p, s)


def test_depthwise_cached_block_structure(lower_text):
    sch, args = ex.depthwise_cached_block(32, 64, 3, 1, 1)
    text = lower_text(sch, args)
    # cache_write with scope 'global': one tw x tc = 4 x 16 block per w_out iteration
    assert "for (y.outer, 0, 16) { allocate PackedY.global[float32 * 64]" in text
    assert "unrolled (y, 0, 4) { PackedY.global[ramp((y*16), 1, 16)]" in text
    assert "parallel (c.x.fused, 0, 2048)" in text  # unpacking of Y
