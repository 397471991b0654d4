"""Book §4.7 "Convolution" on CPU: the blocked convolution with a local write cache
(``cached_block`` of examples/book/ch4_7_conv.py), checked against scipy's correlate.

With padding (p = 1, the book's case) the root stage PaddedX is read by the cache stage
computed inside Y's fused block loop, so bound inference must relax that loop: PaddedX has
to cover the whole padded input. The tests assert that allocation before running anything
(once a wrong bound here let the kernel write out of bounds).
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


ex = load_example("book", "ch4_7_conv")
TARGET = "llvm"


def check_cached_block(oc, ic, n, k, p, s):
    sch, (X, K, Y) = ex.cached_block(oc, ic, n, k, p, s)
    text = str(tvm.lower(sch, [X, K, Y], simple_mode=True))
    if p:
        # PaddedX is computed at root, so it must hold the whole padded input
        assert allocated(text, "PaddedX") >= ic * (n + 2 * p) ** 2
    mod = tvm.build(sch, [X, K, Y], TARGET)
    x, w, y = d2ltvm.get_conv_data(oc, ic, n, k, p, s, tvm.nd.array)
    mod(x, w, y)
    np.testing.assert_allclose(y.asnumpy(), conv_reference(x.asnumpy(), w.asnumpy(), p, s),
                               rtol=1e-4, atol=1e-4)
    return text


def test_cached_block_book_size(golden):
    """§4.7.2: oc = ic = 32, 64 x 64 input, 3 x 3 kernel, padding 1, stride 1."""
    text = check_cached_block(32, 32, 64, 3, 1, 1)
    assert "allocate Y.local[float32 * 64]" in text
    assert "parallel (c.i.outer.fused.j.outer.fused, 0, 2048)" in text
    assert "Y.local[ramp(" in text
    golden("ch4_7_conv_cached_block", text)


def test_cached_block_odd_size():
    """13 x 13 output: the 8 x 8 tiles leave partial blocks at the right and bottom."""
    check_cached_block(5, 3, 13, 3, 1, 1)


@pytest.mark.parametrize("oc, ic, n, k, p, s", [(5, 3, 13, 3, 0, 1), (4, 4, 17, 3, 0, 2)])
def test_cached_block_no_padding(oc, ic, n, k, p, s):
    """Without padding PaddedX is X itself (a placeholder), and the schedule is right."""
    check_cached_block(oc, ic, n, k, p, s)


def test_cached_block_structure_without_padding(lower_text):
    """A 66 x 66 input without padding gives the book's 64 x 64 output."""
    sch, args = ex.cached_block(32, 32, 66, 3, 0, 1)
    text = lower_text(sch, args)
    assert "PaddedX" not in text
    assert "allocate Y.local[float32 * 64]" in text
    # the 64 x 64 output of each of the 32 channels gives 8 x 8 blocks of 8 x 8
    assert "parallel (c.i.outer.fused.j.outer.fused, 0, 2048)" in text
    assert "unrolled (i, 0, 8)" in text and "Y.local[ramp((i*8), 1, 8)]" in text
