"""Book §4.3 "Vector Add" on CPU: the default, parallel and vectorized schedules of
examples/book/ch4_3_vector_add.py, run against numpy and their lowered code pinned.

The book builds for 'llvm -mcpu=skylake-avx512'; these tests use plain 'llvm' (kiln's C
backend with -march=native) so they run on any x86 or ARM machine.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import load_example


ex = load_example("book", "ch4_3_vector_add")
TARGET = "llvm"


@pytest.mark.parametrize("name", ["default", "parallel", "vectorized"])
@pytest.mark.parametrize("n", [64, 127])
def test_vector_add_runs(name, n):
    s, (A, B, C) = ex.SCHEDULES[name](n)
    mod = tvm.build(s, [A, B, C], TARGET)
    a, b, c = d2ltvm.get_abc(n, tvm.nd.array)
    mod(a, b, c)
    np.testing.assert_array_equal(c.asnumpy(), a.asnumpy() + b.asnumpy())


def test_default_lowered(golden, lower_text):
    s, args = ex.default(64)
    assert lower_text(s, args) == "produce c { for (i, 0, 64) { c[i] = (a[i] + b[i]) } }"
    golden("ch4_3_vector_add_default", str(tvm.lower(s, args, simple_mode=True)))


def test_parallel_lowered(golden, lower_text):
    s, args = ex.parallel(64)
    assert lower_text(s, args) == "produce c { parallel (i, 0, 64) { c[i] = (a[i] + b[i]) } }"
    golden("ch4_3_vector_add_parallel", str(tvm.lower(s, args, simple_mode=True)))


def test_vectorized_lowered(golden, lower_text):
    """§4.3.4: 8 parallel iterations, each one ramp of width 8 (as printed in the book)."""
    s, args = ex.vectorized(64)
    text = lower_text(s, args)
    assert "parallel (i.outer, 0, 8)" in text
    assert ("c[ramp((i.outer*8), 1, 8)] = (a[ramp((i.outer*8), 1, 8)] + "
            "b[ramp((i.outer*8), 1, 8)])") in text
    golden("ch4_3_vector_add_vectorized", str(tvm.lower(s, args, simple_mode=True)))


def test_vectorized_tail(lower_text):
    """127 = 15 * 8 + 7: the 15 full blocks are ramps; the partial last block is either
    bound-checked (classic TVM's likely guard) or, as kiln does now, peeled into its own
    loop of 7 elements starting at 120."""
    s, args = ex.vectorized(127)
    text = lower_text(s, args)
    assert "ramp((i.outer*8), 1, 8)" in text
    assert "< 127" in text or ("parallel (i.outer, 0, 15)" in text and "+ 120)" in text)


def test_book_target_string_lowers():
    """The book's target string is accepted (lowering does not depend on the target)."""
    s, args = ex.vectorized(64)
    target = tvm.target.Target("llvm -mcpu=skylake-avx512")
    assert target.kind == "llvm" and target.attrs["mcpu"] == "skylake-avx512"
    assert "ramp(" in str(tvm.lower(s, args, simple_mode=True))
