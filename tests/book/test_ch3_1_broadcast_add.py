"""Book §3.1 "Broadcast Add": d2ltvm.broadcast_add on 2-D tensors, default schedule."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm

m, n = 3, 4


def build_and_check(shape1, shape2):
    A, B, C = d2ltvm.broadcast_add(shape1, shape2)
    s = te.create_schedule(C.op)
    mod = tvm.build(s, [A, B, C])
    a, b, c = d2ltvm.get_bcast_data(shape1, shape2, tvm.nd.array)
    mod(a, b, c)
    np.testing.assert_allclose(np.add(a.asnumpy(), b.asnumpy()), c.asnumpy(), atol=1e-5)
    return a, b, c


def test_column_broadcast(lower_text):
    """(3, 1) + (3, 4): A[x] is reused along y. C is not an argument of lower, so it is
    allocated inside the function, as in the book's printout."""
    A, B, C = d2ltvm.broadcast_add((m, 1), (m, n))
    s = te.create_schedule(C.op)
    text = lower_text(s, [A, B])
    assert "produce C" in text
    assert "for (x, 0, 3)" in text and "for (y, 0, 4)" in text
    assert "A[x]" in text
    build_and_check((m, 1), (m, n))


@pytest.mark.parametrize(
    "shape1, shape2", [((m, 1), (1, n)), ((1, n), (m, 1)), ((m, n), (1, n)), ((1, 1), (m, n))]
)
def test_broadcast_patterns(shape1, shape2):
    """Broadcasting along one or both dimensions."""
    a, b, c = build_and_check(shape1, shape2)
    assert tuple(c.shape) == (m, n)


def test_same_shapes_is_elementwise_add():
    a, b, c = build_and_check((m, n), (m, n))
    np.testing.assert_equal(c.asnumpy(), a.asnumpy() + b.asnumpy())


def test_get_bcast_data_shapes():
    a, b, c = d2ltvm.get_bcast_data((m, 1), (1, n))
    assert (a.shape, b.shape, c.shape) == ((m, 1), (1, n), (m, n))
    assert a.dtype == b.dtype == c.dtype == np.float32


@pytest.mark.parametrize("shape1, shape2", [((3, 2), (3, 4)), ((3, 4, 1), (3, 4, 5))])
def test_rejects_bad_shapes(shape1, shape2):
    with pytest.raises(ValueError):
        d2ltvm.broadcast_add(shape1, shape2)
