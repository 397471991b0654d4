"""Book §4.5 "Matrix Multiplication" on CPU: the default (x, y, k), reordered (x, k, y) and
parallel schedules of examples/book/ch4_5_matmul.py, checked against numpy."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import load_example


ex = load_example("book", "ch4_5_matmul")
TARGET = "llvm"


@pytest.mark.parametrize("name", ["default", "reorder", "parallel"])
@pytest.mark.parametrize("n", [64, 127])
def test_matmul_runs(name, n):
    s, (A, B, C) = ex.SCHEDULES[name](n)
    mod = tvm.build(s, [A, B, C], TARGET)
    a, b, c = d2ltvm.get_abc((n, n), tvm.nd.array)
    mod(a, b, c)
    expected = a.asnumpy().astype(np.float64) @ b.asnumpy().astype(np.float64)
    np.testing.assert_allclose(c.asnumpy(), expected, rtol=1e-4, atol=1e-4)


def test_default_lowered(golden, lower_text):
    s, args = ex.default(64)
    text = lower_text(s, args)
    assert ("for (x, 0, 64) { for (y, 0, 64) { C[((x*64) + y)] = 0f for (k, 0, 64) { "
            "C[((x*64) + y)] = (C[((x*64) + y)] + (A[((x*64) + k)]*B[((k*64) + y)]))") in text
    golden("ch4_5_matmul_default", str(tvm.lower(s, args, simple_mode=True)))


def test_reorder_lowered(golden, lower_text):
    """§4.5.3: the initialization gets its own y.init loop; then k outside y."""
    s, args = ex.reorder(64)
    text = lower_text(s, args)
    assert ("for (x, 0, 64) { for (y.init, 0, 64) { C[((x*64) + y.init)] = 0f } "
            "for (k, 0, 64) { for (y, 0, 64) {") in text
    golden("ch4_5_matmul_reorder", str(tvm.lower(s, args, simple_mode=True)))


def test_parallel_lowered(golden, lower_text):
    s, args = ex.parallel(64)
    text = lower_text(s, args)
    assert text.startswith("produce C { parallel (x, 0, 64) { for (y.init, 0, 64)")
    golden("ch4_5_matmul_parallel", str(tvm.lower(s, args, simple_mode=True)))
