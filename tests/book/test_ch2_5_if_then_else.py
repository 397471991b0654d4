"""Book §2.5 "Conditional Expression: if-then-else": the lower triangle of a matrix."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te


@pytest.mark.parametrize("if_then_else", [te.if_then_else, tvm.tir.if_then_else])
def test_lower_triangle(if_then_else, lower_text):
    a = np.arange(12, dtype="float32").reshape((3, 4))
    expected = np.array([[0, 0, 0, 0], [4, 5, 0, 0], [8, 9, 10, 0]], dtype="float32")
    np.testing.assert_equal(np.tril(a), expected)

    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m))
    B = te.compute(A.shape, lambda i, j: if_then_else(i >= j, A[i, j], 0.0))
    s = te.create_schedule(B.op)
    text = lower_text(s, [A, B])
    assert "produce compute" in text  # te's default names: placeholder, compute
    assert "placeholder[" in text
    assert "if_then_else(" in text

    b = tvm.nd.array(np.empty_like(a))
    mod = tvm.build(s, [A, B])
    mod(tvm.nd.array(a), b)
    np.testing.assert_equal(b.asnumpy(), np.tril(a))


def test_lower_triangle_other_shapes():
    """Same program, taller than wide and random data."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m))
    B = te.compute(A.shape, lambda i, j: te.if_then_else(i >= j, A[i, j], 0.0))
    mod = tvm.build(te.create_schedule(B.op), [A, B])
    a = np.random.default_rng(0).normal(size=(5, 2)).astype("float32")
    b = tvm.nd.array(np.empty_like(a))
    mod(tvm.nd.array(a), b)
    np.testing.assert_equal(b.asnumpy(), np.tril(a))
