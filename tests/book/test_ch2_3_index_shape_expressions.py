"""Book §2.3 "Index and Shape Expressions": transpose, reshape, slicing with symbolic shapes."""

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import te


@pytest.fixture
def nmA():
    """The book's symbolic n x m input: returns (n, m, A)."""
    n = te.var("n")
    m = te.var("m")
    return n, m, te.placeholder((n, m), name="a")


def test_transpose(nmA, lower_text):
    """§2.3.1: B[i, j] = A[j, i] with B of shape (m, n)."""
    n, m, A = nmA
    B = te.compute((m, n), lambda i, j: A[j, i], "b")
    s = te.create_schedule(B.op)
    text = lower_text(s, [A, B])
    assert "produce b" in text
    assert "for (i, 0, m)" in text
    assert "for (j, 0, n)" in text

    a = np.arange(12, dtype="float32").reshape((3, 4))
    b = np.empty((4, 3), dtype="float32")
    a, b = tvm.nd.array(a), tvm.nd.array(b)
    mod = tvm.build(s, [A, B])
    mod(a, b)
    np.testing.assert_equal(b.asnumpy(), a.asnumpy().T)


def test_reshape_to_1d(nmA, lower_text):
    """§2.3.2: B[i] = A[i // m, i % m] flattens A (like a.reshape(-1))."""
    n, m, A = nmA
    B = te.compute((m * n,), lambda i: A[i // m, i % m], name="b")
    s = te.create_schedule(B.op)
    text = lower_text(s, [A, B])
    assert "produce b" in text
    assert re.search(r"for \(i, 0, \((m\*n|n\*m)\)\)", text), text

    mod = tvm.build(s, [A, B])
    a = tvm.nd.array(np.arange(12, dtype="float32").reshape((3, 4)))
    b = tvm.nd.array(np.empty((12,), dtype="float32"))
    mod(a, b)
    np.testing.assert_equal(b.asnumpy(), np.arange(12, dtype="float32"))


@pytest.mark.parametrize("out_shape", [(2, 6), (6, 2), (4, 3), (1, 12)])
def test_general_2d_reshape(nmA, out_shape, lower_text):
    """§2.3.2: reshape (n, m) to a free (p, q).

    The book also shows a (5, 4) output, larger than the input, whose tail reads past the
    input buffer (undefined values); only in-bounds shapes p * q == n * m are tested here.
    """
    n, m, A = nmA
    p, q = te.var("p"), te.var("q")
    B = te.compute((p, q), lambda i, j: A[(i * q + j) // m, (i * q + j) % m], name="b")
    s = te.create_schedule(B.op)
    text = lower_text(s, [A, B])
    assert "for (i, 0, p)" in text and "for (j, 0, q)" in text

    mod = tvm.build(s, [A, B])
    a = np.arange(12, dtype="float32").reshape((3, 4))
    b = tvm.nd.array(np.zeros(out_shape, dtype="float32"))
    mod(tvm.nd.array(a), b)
    np.testing.assert_equal(b.asnumpy(), a.reshape(out_shape))


def test_slicing(nmA):
    """§2.3.3: a[bi::si, bj::sj] with the four bounds passed as scalar arguments."""
    n, m, A = nmA
    bi, bj, si, sj = [te.var(name) for name in ["bi", "bj", "si", "sj"]]
    B = te.compute(
        ((n - bi) // si, (m - bj) // sj), lambda i, j: A[i * si + bi, j * sj + bj], name="b"
    )
    s = te.create_schedule(B.op)
    mod = tvm.build(s, [A, B, bi, si, bj, sj])

    a = tvm.nd.array(np.arange(12, dtype="float32").reshape((3, 4)))
    b = tvm.nd.array(np.empty((1, 3), dtype="float32"))
    mod(a, b, 1, 2, 1, 1)
    np.testing.assert_equal(b.asnumpy(), a.asnumpy()[1::2, 1::1])

    b = tvm.nd.array(np.empty((1, 2), dtype="float32"))
    mod(a, b, 2, 1, 0, 2)
    np.testing.assert_equal(b.asnumpy(), a.asnumpy()[2::1, 0::2])
