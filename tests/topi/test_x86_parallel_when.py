"""A parallel loop over a symbolic extent forks the threads only when its work reaches a
run-time threshold (``kiln.topi.x86._common.parallel_when``, the pragma ``parallel_if``,
docs/dynamic.md): the C code tests the condition around two copies of the loop, the
OpenMP one and a serial one, and both compute the stage for every extent."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.topi.x86._common import lanes, parallel_when

from .common import randn

#: the run-time threshold of the small kernel below: rows of 16 elements, parallel from 4
#: rows on
_LEAST = 64


def _doubling(rows):
    """``B = A * 2`` over ``[rows, 16]``, its rows a parallel loop from :data:`_LEAST`
    elements on (``rows`` symbolic or static)."""
    A = te.placeholder((rows, 16), name="A")
    B = te.compute((rows, 16), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    parallel_when(s[B], B.op.axis[0], rows * 16, _LEAST)
    return s, [A, B]


@pytest.fixture(scope="module")
def doubling():
    """``(lowered text, module)`` of :func:`_doubling` over a symbolic row count."""
    s, args = _doubling(te.var("n"))
    return str(kiln.lower(s, args, simple_mode=True)), kiln.build(s, args, "llvm")


def test_symbolic_extent_branches_around_the_parallel_loop(doubling):
    text, mod = doubling
    assert "pragma_parallel_if" in text and text.count("parallel (") == 1
    src = mod.get_source()
    branch = src.index(f"if ((n >= {_LEAST // 16})) {{")  # n*16 >= 64, simplified
    fork = src.index("#pragma omp parallel for", branch)
    serial = src.index("} else {", fork)
    assert src.count("#pragma omp parallel for") == 1
    assert "for (int32_t i = 0; i < n; ++i)" in src[serial:]


@pytest.mark.parametrize("rows", [0, 1, 3, 4, 5, lanes("float32") + 1, 100])
def test_both_copies_compute_the_stage(doubling, rows):
    """Below the threshold (0, 1, 3 rows: the serial copy) and from it on (the parallel
    one)."""
    a = randn((rows, 16), rows)
    b = kiln.nd.array(np.full((rows, 16), np.nan, np.float32))
    doubling[1](kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a * 2)


@pytest.mark.parametrize("rows, parallel", [(3, False), (4, True)])
def test_static_extent_decides_at_compile_time(rows, parallel):
    """A constant amount needs no branch: the loop is parallel or not."""
    s, args = _doubling(rows)
    text = str(kiln.lower(s, args, simple_mode=True))
    assert ("parallel (" in text) is parallel
    assert "pragma_parallel_if" not in text


def test_pragma_on_a_serial_loop_is_ignored():
    """The pragma only matters on a loop that forks; elsewhere the loop is emitted as is."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].pragma(B.op.axis[0], "parallel_if", n >= 4)
    mod = kiln.build(s, [A, B], "llvm")
    assert "#pragma omp" not in mod.get_source()
    a = randn((9,), 9)
    b = kiln.nd.empty((9,))
    mod(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a + 1)

