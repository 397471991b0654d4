"""Shape sizes of ``te.placeholder`` / ``te.compute``: as in TVM, a Python float that is a
whole number (``N / bn`` in Python 3) is taken as that integer; any other float is an error
that says to divide with ``//``."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te


def test_whole_float_sizes_are_integers():
    N, bn = 16, 4
    A = te.placeholder((N / bn, N), name="A")
    B = te.compute((N / bn, np.float32(N)), lambda i, j: A[i, j] * 2.0, name="B")
    assert [int(d) for d in A.shape] == [4, 16] and [int(d) for d in B.shape] == [4, 16]
    assert all(d.dtype == "int32" for d in (*A.shape, *B.shape))
    assert [int(d) for d in te.placeholder(8.0).shape] == [8]
    f = kiln.build(te.create_schedule(B.op), [A, B])
    a = kiln.nd.array(np.random.rand(4, 16).astype("float32"))
    b = kiln.nd.array(np.zeros((4, 16), "float32"))
    f(a, b)
    np.testing.assert_allclose(b.numpy(), a.numpy() * 2)


@pytest.mark.parametrize("make", [lambda: te.placeholder((10 / 4,), name="A"),
                                  lambda: te.compute((10 / 4,), lambda i: i, name="B")])
def test_fractional_size_is_an_error(make):
    with pytest.raises(TypeError, match=r"shape size 2.5 is not a whole number.*N // bn"):
        make()
