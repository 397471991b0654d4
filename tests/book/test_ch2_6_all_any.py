"""Book §2.6 "Truth Value Testing: all and any": zero padding of a matrix."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te


def pad_reference(a: np.ndarray, p: int) -> np.ndarray:
    b = np.zeros((a.shape[0] + 2 * p, a.shape[1] + 2 * p), dtype=a.dtype)
    b[p:-p, p:-p] = a
    return b


def test_python_any_all():
    assert (any((0, 1, 2)), all((0, 1, 2))) == (True, False)


def padded_with_any(p, te_any):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    B = te.compute(
        (n + p * 2, m + p * 2),
        lambda i, j: te.if_then_else(
            te_any(i < p, i >= n + p, j < p, j >= m + p), 0, A[i - p, j - p]
        ),
        name="b",
    )
    return A, B


def padded_with_all(p, te_all):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="a")
    B = te.compute(
        (n + p * 2, m + p * 2),
        lambda i, j: te.if_then_else(
            te_all(i >= p, i < n + p, j >= p, j < m + p), A[i - p, j - p], 0
        ),
        name="b",
    )
    return A, B


@pytest.mark.parametrize("te_any", [te.any, tvm.tir.any])
def test_book_padding_with_any(te_any):
    """The book's program: pad a 3 x 4 matrix of ones with one ring of zeros."""
    p = 1
    a = np.ones((3, 4), dtype="float32")
    b = pad_reference(a, p)
    A, B = padded_with_any(p, te_any)
    mod = tvm.build(te.create_schedule(B.op), [A, B])
    c = tvm.nd.array(np.empty_like(b))
    mod(tvm.nd.array(a), c)
    np.testing.assert_equal(c.asnumpy(), b)


@pytest.mark.parametrize("make", [padded_with_any, padded_with_all])
@pytest.mark.parametrize("te_fn_name", ["te", "tir"])
def test_padding_wider_ring_distinct_values(make, te_fn_name):
    """Two rings of zeros around distinct values, with any() or the equivalent all()."""
    p = 2
    a = np.arange(15, dtype="float32").reshape((3, 5)) + 1
    ns = te if te_fn_name == "te" else tvm.tir
    fn = ns.any if make is padded_with_any else ns.all
    A, B = make(p, fn)
    mod = tvm.build(te.create_schedule(B.op), [A, B])
    expected = pad_reference(a, p)
    c = tvm.nd.array(np.empty_like(expected))
    mod(tvm.nd.array(a), c)
    np.testing.assert_equal(c.asnumpy(), expected)
