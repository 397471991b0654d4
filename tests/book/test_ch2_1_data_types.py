"""Book §2.1 "Data Types": placeholders of other dtypes, and casting inside compute."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm

n = 100


def tvm_vector_add(dtype):
    A = te.placeholder((n,), dtype=dtype)
    B = te.placeholder((n,), dtype=dtype)
    C = te.compute(A.shape, lambda i: A[i] + B[i])
    assert (A.dtype, B.dtype, C.dtype) == (dtype, dtype, dtype)
    s = te.create_schedule(C.op)
    return tvm.build(s, [A, B, C])


def check_mod(mod, dtype):
    a, b, c = d2ltvm.get_abc(n, lambda x: tvm.nd.array(x.astype(dtype)))
    assert (str(a.dtype), str(b.dtype), str(c.dtype)) == (dtype, dtype, dtype)
    mod(a, b, c)
    np.testing.assert_equal(c.asnumpy(), a.asnumpy() + b.asnumpy())


# get_abc's c is np.empty_like: casting its garbage to an integer dtype may warn.
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("dtype", ["int32", "float16", "float64", "int8", "int16", "int64"])
def test_vector_add_dtype(dtype):
    """§2.1.1: the same program compiled for each dtype gives numpy's result exactly."""
    check_mod(tvm_vector_add(dtype), dtype)


def tvm_vector_add_2(dtype):
    A = te.placeholder((n,))
    B = te.placeholder((n,))
    C = te.compute(A.shape, lambda i: A[i].astype(dtype) + B[i].astype(dtype))
    assert (A.dtype, B.dtype, C.dtype) == ("float32", "float32", dtype)
    s = te.create_schedule(C.op)
    return tvm.build(s, [A, B, C])


@pytest.mark.parametrize("dtype", ["int32", "float64", "int16"])
def test_cast_in_compute(dtype):
    """§2.1.2: float32 inputs cast with astype inside compute, output of another dtype."""
    mod = tvm_vector_add_2(dtype)
    a, b, c = d2ltvm.get_abc(n)
    a_tvm, b_tvm = tvm.nd.array(a), tvm.nd.array(b)
    c_tvm = tvm.nd.array(c.astype(dtype))
    assert (str(a_tvm.dtype), str(b_tvm.dtype), str(c_tvm.dtype)) == ("float32", "float32", dtype)
    mod(a_tvm, b_tvm, c_tvm)
    np.testing.assert_equal(c_tvm.asnumpy(), a.astype(dtype) + b.astype(dtype))
