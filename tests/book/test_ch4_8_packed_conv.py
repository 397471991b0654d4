"""Book §4.8 "Packed Convolution": packing to NCHW[x]c, the packed computation and the
``cached_block`` schedule of examples/book/ch4_8_packed_conv.py.

``cached_block`` reads the root stages PackedX, PackedK (and PaddedX) from a cache stage
computed at PackedY's ``w_out`` loop; the tests assert that each still covers its whole
tensor before running anything.
"""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import allocated, conv_reference, load_example

signal = pytest.importorskip("scipy.signal")


ex = load_example("book", "ch4_8_packed_conv")
TARGET = "llvm"


def test_pack_data_like_numpy():
    """§4.8.1: c = 4 channels of 2 x 2 packed with tc = 2 equals numpy's reshape/transpose."""
    c, n, tc = 4, 2, 2
    x = np.arange(c * n * n).reshape((c, n, n)).astype("float32")
    y = x.reshape(c // tc, n, n, tc).transpose(0, 2, 3, 1)
    X, _, _, PackedX, _ = ex.conv_pack(c, c, n, n, 1, 1, 0, 0, tc, tc)
    mod = tvm.build(te.create_schedule(PackedX.op), [X, PackedX])
    packed_x = tvm.nd.array(np.empty((c // tc, n, n, tc), dtype="float32"))
    mod(tvm.nd.array(x), packed_x)
    np.testing.assert_equal(packed_x.asnumpy(), y)


def test_pack_weight():
    oc, ic, k, toc, tic = 4, 6, 3, 2, 3
    _, K, _, _, PackedK = ex.conv_pack(oc, ic, 5, 5, k, k, 0, 0, toc, tic)
    mod = tvm.build(te.create_schedule(PackedK.op), [K, PackedK])
    w = np.random.default_rng(0).normal(size=(oc, ic, k, k)).astype("float32")
    packed = tvm.nd.array(np.empty((oc // toc, ic // tic, k, k, tic, toc), dtype="float32"))
    mod(tvm.nd.array(w), packed)
    expected = w.reshape(oc // toc, toc, ic // tic, tic, k, k).transpose(0, 2, 4, 5, 3, 1)
    np.testing.assert_equal(packed.asnumpy(), expected)


@pytest.mark.parametrize("oc, ic, n, k, p, s, toc, tic",
                         [(4, 6, 12, 3, 1, 1, 2, 3), (6, 4, 13, 3, 0, 2, 3, 2)])
def test_packed_conv_default_schedule(oc, ic, n, k, p, s, toc, tic):
    """§4.8.2: the book's sizes with the default schedule, and an odd strided case."""
    X, K, Y, _, _, _, _ = ex.conv(oc, ic, n, n, k, k, p, p, s, s, toc, tic)
    mod = tvm.build(te.create_schedule(Y.op), [X, K, Y], TARGET)
    data, weight, out = d2ltvm.get_conv_data(oc, ic, n, k, p, s, tvm.nd.array)
    mod(data, weight, out)
    np.testing.assert_allclose(out.asnumpy(), conv_reference(data.asnumpy(), weight.asnumpy(),
                                                             p, s), rtol=1e-5, atol=1e-5)


def check_cached_block(oc, ic, n, k, p, s):
    sch, (X, K, Y) = ex.cached_block(oc, ic, n, k, p, s)
    text = str(tvm.lower(sch, [X, K, Y], simple_mode=True))
    # PaddedX and PackedX are computed at root: each holds the whole (padded) input
    # (partial blocks may make the bounds larger than the tensors, never smaller)
    assert allocated(text, "PackedX") >= ic * (n + 2 * p) ** 2
    assert allocated(text, "PackedK") >= oc * ic * k * k
    if p:
        assert allocated(text, "PaddedX") >= ic * (n + 2 * p) ** 2
    mod = tvm.build(sch, [X, K, Y], TARGET)
    data, weight, out = d2ltvm.get_conv_data(oc, ic, n, k, p, s, tvm.nd.array)
    mod(data, weight, out)
    np.testing.assert_allclose(out.asnumpy(), conv_reference(data.asnumpy(), weight.asnumpy(),
                                                             p, s), rtol=1e-4, atol=1e-4)
    return text


def test_cached_block_book_size(golden):
    """§4.8.3: oc = ic = 32, 64 x 64 input, toc = tic = 16, tw = 4."""
    text = check_cached_block(32, 32, 64, 3, 1, 1)
    assert "parallel (oc_out.x.fused, 0, 128)" in text
    assert "unrolled (ric_in, 0, 16)" in text
    assert "parallel (ic_out.x.fused, 0, 132)" in text  # packing of X: 2 x 66 rows
    golden("ch4_8_packed_conv_cached_block", text)


@pytest.mark.parametrize("oc, ic, n, k, p, s", [(16, 32, 13, 3, 1, 1), (32, 16, 13, 3, 0, 1)])
def test_cached_block_odd_size(oc, ic, n, k, p, s):
    """13 columns with tw = 4 leave a partial width block; p = 0 skips the padding stage."""
    check_cached_block(oc, ic, n, k, p, s)


def test_cached_block_structure(lower_text):
    """The schedule's loop structure, which does not depend on the bound of PackedX."""
    sch, args = ex.cached_block(32, 32, 64, 3, 1, 1)
    text = lower_text(sch, args)
    assert "allocate Y.local[float32 * 64]" in text  # tw * toc = 4 * 16
    assert "unrolled (ric_in, 0, 16) { unrolled (y, 0, 4) {" in text
    assert "Y.local[ramp((y*16), 1, 16)]" in text
    assert "parallel (oc.x.fused, 0, 2048)" in text  # unpacking of Y: 32 x 64 rows
