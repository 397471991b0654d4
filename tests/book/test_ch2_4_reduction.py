"""Book §2.4 "Reduction Operations": te.sum over one and two axes, te.min/te.max, comm_reducer."""

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import te


@pytest.fixture
def a():
    np.random.seed(0)
    return np.random.normal(size=(3, 4)).astype("float32")


@pytest.fixture
def nmA():
    n, m = te.var("n"), te.var("m")
    return n, m, te.placeholder((n, m), name="a")


def test_numpy_sum_rows(a):
    """§2.4.1: the loop version matches a.sum(axis=1)."""

    def sum_rows(a, b):
        for i in range(len(b)):
            b[i] = np.sum(a[i, :])

    b = np.empty((3,), dtype="float32")
    sum_rows(a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-6)


def test_sum_rows(a, nmA, lower_text):
    """§2.4.1: b[i] = sum_j a[i, j]; b is zero-initialized, then accumulated over j."""
    n, m, A = nmA
    j = te.reduce_axis((0, m), name="j")
    B = te.compute((n,), lambda i: te.sum(A[i, j], axis=j), name="b")
    s = te.create_schedule(B.op)
    text = lower_text(s, [A, B])
    assert "produce b" in text
    assert "for (i, 0, n)" in text and "for (j, 0, m)" in text
    assert re.search(r"= 0(\.0*)?f", text), text

    mod = tvm.build(s, [A, B])
    c = tvm.nd.array(np.empty((3,), dtype="float32"))
    mod(tvm.nd.array(a), c)
    np.testing.assert_allclose(c.asnumpy(), a.sum(axis=1), rtol=1e-6, atol=1e-6)


def test_sum_all(a, nmA, lower_text):
    """§2.4.1: a 0-rank output summing over both axes (like a.sum())."""
    n, m, A = nmA
    i = te.reduce_axis((0, n), name="i")
    j = te.reduce_axis((0, m), name="j")
    B = te.compute((), lambda: te.sum(A[i, j], axis=(i, j)), name="b")
    s = te.create_schedule(B.op)
    text = lower_text(s, [A, B])
    assert "produce b" in text
    assert "for (i, 0, n)" in text and "for (j, 0, m)" in text

    mod = tvm.build(s, [A, B])
    c = tvm.nd.array(np.empty((), dtype="float32"))
    mod(tvm.nd.array(a), c)
    np.testing.assert_allclose(a.sum(), c.asnumpy(), atol=1e-5)


@pytest.mark.parametrize("reducer, reference", [("min", np.min), ("max", np.max)])
def test_min_max_rows(a, nmA, reducer, reference):
    """§2.4.1: te.min and te.max are reductions used like te.sum."""
    n, m, A = nmA
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: getattr(te, reducer)(A[i, k], axis=k), name="b")
    s = te.create_schedule(B.op)
    mod = tvm.build(s, [A, B])
    b = tvm.nd.array(np.empty((3,), dtype="float32"))
    mod(tvm.nd.array(a), b)
    np.testing.assert_equal(b.asnumpy(), reference(a, axis=1))


def test_comm_reducer_product(a, nmA, lower_text):
    """§2.4.2: a product reducer from a combiner and an identity; b is initialized to 1."""

    def prod_rows(a, b):
        n, m = a.shape
        for i in range(n):
            b[i] = 1
            for j in range(m):
                b[i] = b[i] * a[i, j]

    expected = np.empty((3,), dtype="float32")
    prod_rows(a, expected)
    np.testing.assert_allclose(expected, a.prod(axis=1), rtol=1e-6)

    comp = lambda a, b: a * b
    init = lambda dtype: tvm.tir.const(1, dtype=dtype)
    product = te.comm_reducer(comp, init)

    n, m, A = nmA
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: product(A[i, k], axis=k), name="b")
    s = te.create_schedule(B.op)
    text = lower_text(s, [A, B])
    assert "for (k, 0, m)" in text
    assert re.search(r"= 1(\.0*)?f", text), text

    mod = tvm.build(s, [A, B])
    b = tvm.nd.array(np.empty((3,), dtype="float32"))
    mod(tvm.nd.array(a), b)
    np.testing.assert_allclose(a.prod(axis=1), b.asnumpy(), atol=1e-5)
