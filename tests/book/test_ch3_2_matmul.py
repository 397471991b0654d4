"""Book §3.2 "Matrix Multiplication": d2ltvm.matmul with the default (naive) schedule."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def test_square_matmul(lower_text):
    n = 100
    A, B, C = d2ltvm.matmul(n, n, n)
    s = te.create_schedule(C.op)
    text = lower_text(s, [A, B])
    assert "produce C" in text
    for loop in ("for (x, 0, 100)", "for (y, 0, 100)", "for (k, 0, 100)"):
        assert loop in text

    mod = tvm.build(s, [A, B, C])
    a, b, c = d2ltvm.get_abc((100, 100), tvm.nd.array)
    mod(a, b, c)
    np.testing.assert_allclose(np.dot(a.asnumpy(), b.asnumpy()), c.asnumpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n, m, l", [(3, 5, 7), (1, 1, 1), (17, 1, 33)])
def test_rectangular_matmul(n, m, l):
    """A (n x l) times B (l x m)."""
    A, B, C = d2ltvm.matmul(n, m, l)
    mod = tvm.build(te.create_schedule(C.op), [A, B, C])
    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, l)).astype("float32")
    b = rng.normal(size=(l, m)).astype("float32")
    c = tvm.nd.array(np.empty((n, m), dtype="float32"))
    mod(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.asnumpy(), a @ b, rtol=1e-5, atol=1e-5)
