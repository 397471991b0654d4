"""Book §3.6 "Batch Normalization": d2ltvm.batch_norm (inference), default schedule.

The book checks against MXNet's BatchNorm; here the reference is the formula in numpy:
out = (data - mean) / sqrt(var + eps) * gamma + beta, per channel.
"""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm


def bn_reference(data, mean, var, gamma, beta, eps=1e-5):
    f = lambda x: np.asarray(x, dtype=np.float64)
    return (f(data) - f(mean)) / np.sqrt(f(var) + eps) * f(gamma) + f(beta)


def test_get_bn_data():
    data, mean, var, gamma, beta, out = d2ltvm.get_bn_data(32, 28)
    assert data.shape == out.shape == (32, 28, 28)
    assert mean.shape == var.shape == gamma.shape == beta.shape == (32, 1, 1)
    assert (var >= 0).all()
    assert all(x.dtype == np.float32 for x in (data, mean, var, gamma, beta, out))


def test_book_batch_norm(lower_text):
    c, n = 32, 28
    X, Mean, Var, Gamma, Beta, Y = d2ltvm.batch_norm(c, n)
    sch = te.create_schedule(Y.op)
    mod = tvm.build(sch, [X, Mean, Var, Gamma, Beta, Y])
    text = lower_text(sch, [X, Mean, Var, Gamma, Beta])
    for stage in ("produce T_subtract", "produce T_divide", "produce T_multiply", "produce T_add"):
        assert stage in text
    assert "sqrt(" in text

    data, mean, var, gamma, beta, out = d2ltvm.get_bn_data(c, n, tvm.nd.array)
    mod(data, mean, var, gamma, beta, out)
    expected = bn_reference(*(x.asnumpy() for x in (data, mean, var, gamma, beta)))
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c, n, eps", [(1, 1, 1e-5), (3, 7, 1e-3)])
def test_batch_norm_variants(c, n, eps):
    X, Mean, Var, Gamma, Beta, Y = d2ltvm.batch_norm(c, n, eps=eps)
    mod = tvm.build(te.create_schedule(Y.op), [X, Mean, Var, Gamma, Beta, Y])
    arrays = d2ltvm.get_bn_data(c, n, tvm.nd.array)
    mod(*arrays)
    expected = bn_reference(*(x.asnumpy() for x in arrays[:5]), eps=eps)
    np.testing.assert_allclose(arrays[5].asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_book_batch_norm_with_topi():
    """The book's own definition: TOPI broadcast arithmetic on tensors and topi.sqrt."""
    topi = pytest.importorskip("kiln.topi")
    if not hasattr(topi, "sqrt"):
        pytest.skip("kiln.topi has no sqrt yet")
    c, n, eps = 8, 6, 1e-5
    X = te.placeholder((c, n, n), name="X")
    Mean = te.placeholder((c, 1, 1), name="Mean")
    Var = te.placeholder((c, 1, 1), name="Var")
    Gamma = te.placeholder((c, 1, 1), name="Gamma")
    Beta = te.placeholder((c, 1, 1), name="Beta")
    C1 = X - Mean
    C2 = topi.sqrt(Var + eps)
    Y = C1 / C2 * Gamma + Beta
    mod = tvm.build(te.create_schedule(Y.op), [X, Mean, Var, Gamma, Beta, Y])
    arrays = d2ltvm.get_bn_data(c, n, tvm.nd.array)
    mod(*arrays)
    expected = bn_reference(*(x.asnumpy() for x in arrays[:5]), eps=eps)
    np.testing.assert_allclose(arrays[5].asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_numpy_stand_in_for_mxnet_batch_norm():
    data, mean, var, gamma, beta, out = d2ltvm.get_bn_data_mxnet(4, 5)
    assert data.shape == out.shape == (1, 4, 5, 5)
    d2ltvm.batch_norm_mxnet(data, mean, var, gamma, beta, out)
    np.testing.assert_allclose(out[0], bn_reference(data[0], mean, var, gamma, beta), rtol=1e-6)
