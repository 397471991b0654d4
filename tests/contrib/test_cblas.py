"""tvm.contrib.cblas (extern matrix products calling numpy's BLAS through a packed function),
checked against numpy; tvm.contrib.mkl / cublas / cudnn fail clearly."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import cblas, cublas, cudnn, mkl

RNG = np.random.default_rng(0)


def _arrays(*shapes, dtype="float32"):
    return [RNG.random(sh).astype(dtype) for sh in shapes]


def _run(s, args, inputs, out_shape, dtype="float32"):
    f = tvm.build(s, args)
    out = tvm.nd.array(np.zeros(out_shape, dtype))
    f(*[tvm.nd.array(x) for x in inputs], out)
    return out.numpy()


@pytest.mark.parametrize("transa", [False, True])
@pytest.mark.parametrize("transb", [False, True])
def test_matmul(transa, transb):
    n, k, m = 6, 5, 7
    A = te.placeholder((k, n) if transa else (n, k), name="A")
    B = te.placeholder((m, k) if transb else (k, m), name="B")
    C = cblas.matmul(A, B, transa, transb)
    assert isinstance(C.op, te.ExternOp) and [int(d) for d in C.shape] == [n, m]
    s = te.create_schedule(C.op)
    a, b = _arrays(A.shape, B.shape)
    out = _run(s, [A, B, C], [a, b], (n, m))
    np.testing.assert_allclose(out, (a.T if transa else a) @ (b.T if transb else b), rtol=1e-5)


def test_matmul_inside_a_schedule():
    """The extern stage read by a scheduled te.compute (bias + relu), float64, symbolic n."""
    n = te.var("n")
    k, m = 8, 12
    A = te.placeholder((n, k), name="A", dtype="float64")
    B = te.placeholder((k, m), name="B", dtype="float64")
    bias = te.placeholder((m,), name="bias", dtype="float64")
    C = cblas.matmul(A, B)
    D = te.compute(C.shape, lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="D")
    s = te.create_schedule(D.op)
    _, ji = s[D].split(D.op.axis[1], factor=4)
    s[D].vectorize(ji)
    text = str(tvm.lower(s, [A, B, bias, D], simple_mode=True))
    assert 'tvm_call_packed("tvm.contrib.cblas.matmul"' in text, text
    a, b, c = _arrays((9, k), (k, m), (m,), dtype="float64")
    out = _run(s, [A, B, bias, D], [a, b, c], (9, m), dtype="float64")
    np.testing.assert_allclose(out, np.maximum(a @ b + c, 0), rtol=1e-12)


@pytest.mark.parametrize("iterative", [False, True])
def test_batch_matmul(iterative):
    A = te.placeholder((3, 4, 5), name="A")
    B = te.placeholder((3, 6, 5), name="B")
    C = cblas.batch_matmul(A, B, transb=True, iterative=iterative)
    s = te.create_schedule(C.op)
    a, b = _arrays(A.shape, B.shape)
    out = _run(s, [A, B, C], [a, b], (3, 4, 6))
    np.testing.assert_allclose(out, a @ b.transpose(0, 2, 1), rtol=1e-5)


def test_batch_matmul_broadcasts_batch_of_one():
    A = te.placeholder((1, 4, 5), name="A")
    B = te.placeholder((3, 5, 2), name="B")
    C = cblas.batch_matmul(A, B)
    assert [int(d) for d in C.shape] == [3, 4, 2]
    s = te.create_schedule(C.op)
    a, b = _arrays(A.shape, B.shape)
    np.testing.assert_allclose(_run(s, [A, B, C], [a, b], (3, 4, 2)), a @ b, rtol=1e-5)


def test_registered_as_in_tvm():
    assert tvm.get_global_func("tvm.contrib.cblas.matmul", True) is not None
    assert tvm.get_global_func("tvm.contrib.cblas.batch_matmul", True) is not None
    # TVM's tests skip vendor libraries whose function is not registered
    assert tvm.get_global_func("tvm.contrib.cublas.matmul", True) is None


@pytest.mark.parametrize("func, library", [
    (mkl.matmul, "mkl"), (mkl.batch_matmul, "mkl"), (cublas.matmul, "cublas"),
    (cublas.batch_matmul, "cublas"), (cudnn.conv_forward, "cudnn"),
])
def test_vendor_libraries_unavailable(func, library):
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(tvm.TVMError, match=rf"tvm.contrib.{library}.{func.__name__} is not "
                                           rf"available: kiln links no vendor library"):
        func(A, A)

