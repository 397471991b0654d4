"""Book §2.2 "Shapes": symbolic (te.var) lengths and multi-dimensional shapes."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def check_mod(mod, shape):
    a, b, c = d2ltvm.get_abc(shape, tvm.nd.array)
    mod(a, b, c)
    assert tuple(c.shape) == (shape if isinstance(shape, tuple) else (shape,))
    np.testing.assert_equal(c.asnumpy(), a.asnumpy() + b.asnumpy())


def test_var_type():
    n = te.var(name="n")
    assert type(n).__name__ == "Var"
    assert n.dtype == "int32"


@pytest.fixture(scope="module")
def variable_length():
    n = te.var(name="n")
    A = te.placeholder((n,), name="a")
    B = te.placeholder((n,), name="b")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="c")
    s = te.create_schedule(C.op)
    return s, (A, B, C)


def test_variable_length_lower(variable_length, lower_text):
    """§2.2.1: the loop bound is the symbol n instead of 100."""
    s, args = variable_length
    text = lower_text(s, list(args))
    assert "produce c" in text
    assert "for (i, 0, n)" in text


def test_variable_length_runs(variable_length):
    s, args = variable_length
    mod = tvm.build(s, list(args))
    check_mod(mod, 5)
    check_mod(mod, 1000)


def test_variable_length_mismatch_is_rejected(variable_length):
    """§2.2.1: A, B and C must still have the same length."""
    s, args = variable_length
    mod = tvm.build(s, list(args))
    a, b, _ = d2ltvm.get_abc(5, tvm.nd.array)
    c = tvm.nd.array(np.empty(6, dtype="float32"))
    with pytest.raises(tvm.TVMError):
        mod(a, b, c)


def tvm_vector_add(ndim):
    A = te.placeholder([te.var() for _ in range(ndim)])
    B = te.placeholder(A.shape)
    C = te.compute(A.shape, lambda *i: A[i] + B[i])
    s = te.create_schedule(C.op)
    return tvm.build(s, [A, B, C])


@pytest.mark.parametrize("shape", [(2, 2), (2, 3, 4, 5)])
def test_multi_dimensional(shape):
    """§2.2.2: one program per rank; every dimension is an (unnamed) te.var."""
    check_mod(tvm_vector_add(len(shape)), shape)
