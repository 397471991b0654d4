"""dense / matmul / batch_matmul, pooling, normalization and softmax against numpy, with the
default and the x86 schedules."""

import numpy as np
import pytest

from kiln import te, topi

from . import ref
from .common import check, randn, run

special = pytest.importorskip("scipy.special")


@pytest.mark.parametrize("m, k, n, bias", [(1, 64, 10, True), (7, 13, 5, False),
                                           (16, 48, 24, True), (3, 32, 1, False)])
def test_dense(m, k, n, bias):
    A = te.placeholder((m, k), name="A")
    W = te.placeholder((n, k), name="W")
    B = te.placeholder((n,), name="B") if bias else None
    Y = topi.nn.dense(A, W, B)
    a, w, b = randn((m, k), 1), randn((n, k), 2), randn((n,), 3)
    expected = a.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    ins, arrays = ([A, W, B], [a, w, b]) if bias else ([A, W], [a, w])
    check("schedule_dense", Y, ins, arrays, expected, rtol=1e-4, atol=1e-4)


def test_dense_relu_epilogue():
    A = te.placeholder((2, 32), name="A")
    W = te.placeholder((12, 32), name="W")
    B = te.placeholder((12,), name="B")
    Y = topi.nn.relu(topi.nn.dense(A, W, B))
    a, w, b = randn((2, 32), 4), randn((12, 32), 5), randn((12,), 6)
    (got,) = run(topi.x86.schedule_dense, Y, [A, W, B], [a, w, b])
    np.testing.assert_allclose(got, np.maximum(a @ w.T + b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m, k, n, ta, tb", [(5, 7, 33, False, False), (16, 32, 64, False, False),
                                             (6, 16, 9, False, True), (4, 5, 3, True, False)])
def test_matmul(m, k, n, ta, tb):
    A = te.placeholder((k, m) if ta else (m, k), name="A")
    B = te.placeholder((n, k) if tb else (k, n), name="B")
    Y = topi.matmul(A, B, ta, tb)
    a = randn((k, m) if ta else (m, k), 7)
    b = randn((n, k) if tb else (k, n), 8)
    expected = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    check("schedule_matmul", Y, [A, B], [a, b], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ba, bb, m, k, n, tb", [(3, 3, 5, 16, 7, True), (1, 4, 6, 8, 5, True),
                                                 (2, 2, 3, 7, 17, False)])
def test_batch_matmul(ba, bb, m, k, n, tb):
    A = te.placeholder((ba, m, k), name="A")
    B = te.placeholder((bb, n, k) if tb else (bb, k, n), name="B")
    Y = topi.nn.batch_matmul(A, B, transpose_b=tb)
    a, b = randn((ba, m, k), 9), randn((bb, n, k) if tb else (bb, k, n), 10)
    bm = b.transpose(0, 2, 1) if tb else b
    expected = np.matmul(a.astype(np.float64), bm.astype(np.float64))
    check("schedule_batch_matmul", Y, [A, B], [a, b], expected, rtol=1e-4, atol=1e-4)


# (shape, kernel, stride, dilation, padding, pool type, ceil_mode, count_include_pad)
POOL_CASES = [
    ((1, 4, 12, 12), 3, 2, 1, (1, 1, 1, 1), "max", False, True),
    ((2, 3, 13, 11), 2, 2, 1, (0, 0, 0, 0), "max", True, True),
    ((1, 5, 9, 9), 3, 1, 2, (2, 1, 2, 1), "max", False, True),
    ((1, 4, 12, 12), 3, 2, 1, (1, 1, 1, 1), "avg", False, True),
    ((1, 4, 12, 12), 3, 2, 1, (1, 1, 1, 1), "avg", False, False),
    ((1, 3, 10, 7), 3, 2, 1, (1, 0, 1, 0), "avg", True, False),
    ((1, 2, 8, 8), 2, 2, 1, (0, 0, 0, 0), "avg", False, True),
    ((1, 16, 35, 35), 3, 2, 1, (1, 1, 1, 1), "max", False, True),
    # max pooling reads clamped indices instead of a padding stage: edges, ceil mode
    ((1, 3, 10, 7), 3, 2, 1, (1, 0, 1, 0), "max", True, True),
    ((1, 2, 9, 8), 3, 3, 1, (2, 2, 2, 2), "max", True, True),
    ((1, 2, 6, 6), 2, 1, 1, (1, 1, 0, 0), "max", False, True),
]


@pytest.mark.parametrize("shape, k, s, d, p, ptype, ceil, cip", POOL_CASES)
def test_pool2d(shape, k, s, d, p, ptype, ceil, cip):
    X = te.placeholder(shape, name="X")
    Y = topi.nn.pool2d(X, k, s, d, p, ptype, ceil_mode=ceil, count_include_pad=cip)
    x = randn(shape, 11)
    expected = ref.pool2d_nchw(x, k, s, d, p, ptype, ceil, cip)
    check("schedule_pool", Y, [X], [x], expected)


def test_max_pool_has_no_padding_stage():
    """Dilation 1, padding smaller than the window: no padding stage (reads are clamped);
    dilated windows still pad with -inf."""
    from kiln.topi.utils import all_ops

    X = te.placeholder((1, 1, 12, 12, 4), name="X")
    names = {op.name for op in all_ops([topi.nn.pool2d(X, 3, 2, 1, 1, "max",
                                                       layout="NCHW4c")])}
    assert "PaddedInput" not in names
    names = {op.name for op in all_ops([topi.nn.pool2d(X, 3, 2, 2, 1, "max",
                                                       layout="NCHW4c")])}
    assert "PaddedInput" in names
    # NCHW (W innermost, vectorized): keeps its padding stage
    X2 = te.placeholder((1, 4, 12, 12), name="X2")
    names = {op.name for op in all_ops([topi.nn.pool2d(X2, 3, 2, 1, 1, "max")])}
    assert "PaddedInput" in names


@pytest.mark.parametrize("shape, k, s, d, p, ceil", [
    ((1, 3, 10, 7), 3, 2, 1, (1, 0, 1, 0), True),
    ((1, 2, 9, 8), 3, 3, 1, (2, 2, 2, 2), True),
    ((1, 2, 6, 6), 2, 1, 1, (1, 1, 0, 0), False),
    ((1, 4, 12, 12), 3, 2, 1, (1, 1, 1, 1), False),
])
def test_max_pool_clamped_packed(shape, k, s, d, p, ceil):
    """Packed (NCHW4c) max pooling with clamped reads, against the NCHW reference."""
    x = randn(shape, 14)
    xp = np.ascontiguousarray(np.pad(x, [(0, 0), (0, (-shape[1]) % 4), (0, 0), (0, 0)]))
    X = te.placeholder(ref.pack_nchwc(xp, 4).shape, name="X")
    Y = topi.nn.pool2d(X, k, s, d, p, "max", ceil_mode=ceil, layout="NCHW4c")
    expected = ref.pool2d_nchw(xp, k, s, d, p, "max", ceil)
    check("schedule_pool", Y, [X], [ref.pack_nchwc(xp, 4)], ref.pack_nchwc(expected, 4))


def test_pool_nchwc_and_nhwc_layouts():
    x = randn((1, 32, 9, 9), 12)
    expected = ref.pool2d_nchw(x, 3, 2, 1, (1, 1, 1, 1), "max")
    X = te.placeholder((1, 2, 9, 9, 16), name="X")
    Y = topi.nn.pool(X, 3, 2, (1, 1), "max", layout="NCHW16c")
    check("schedule_pool", Y, [X], [ref.pack_nchwc(x, 16)], ref.pack_nchwc(expected, 16))
    X2 = te.placeholder((1, 9, 9, 32), name="X2")
    Y2 = topi.nn.pool2d(X2, 3, 2, 1, 1, "avg", layout="NHWC")
    exp2 = ref.pool2d_nchw(x, 3, 2, 1, (1, 1, 1, 1), "avg")
    check("schedule_pool", Y2, [X2], [x.transpose(0, 2, 3, 1)], exp2.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("ptype", ["max", "avg"])
def test_global_and_adaptive_pool(ptype):
    x = randn((2, 5, 7, 9), 13)
    X = te.placeholder(x.shape, name="X")
    G = topi.nn.global_pool(X, ptype)
    g_ref = x.max(axis=(2, 3), keepdims=True) if ptype == "max" else x.mean(
        axis=(2, 3), keepdims=True)
    check("schedule_adaptive_pool", G, [X], [x], g_ref)
    A = topi.nn.adaptive_pool(X, (3, 4), ptype)
    check("schedule_adaptive_pool", A, [X], [x], ref.adaptive_pool_nchw(x, (3, 4), ptype))


def test_pool_errors():
    X = te.placeholder((1, 1, 4, 4), name="X")
    with pytest.raises(ValueError, match="pool_type"):
        topi.nn.pool2d(X, 2, 2, 1, 0, "min")
    with pytest.raises(ValueError, match="larger than"):
        topi.nn.pool2d(X, 7, 1, 1, 0, "max")
    with pytest.raises(ValueError, match="layout"):
        topi.nn.pool2d(X, 2, 2, 1, 0, "max", layout="NCDHW")


def test_batch_norm():
    c = 6
    x = randn((2, c, 5, 7), 14)
    gamma, beta = randn((c,), 15), randn((c,), 16)
    mean, var = randn((c,), 17), np.abs(randn((c,), 18)) + 0.5
    X = te.placeholder(x.shape, name="X")
    G, Bt, M, V = (te.placeholder((c,), name=n) for n in "gbmv")
    out, m_out, v_out = topi.nn.batch_norm(X, G, Bt, M, V, epsilon=1e-3)
    assert m_out is M and v_out is V
    bc = (None, slice(None), None, None)
    expected = (x - mean[bc]) / np.sqrt(var[bc] + 1e-3) * gamma[bc] + beta[bc]
    check("schedule_batch_norm", out, [X, G, Bt, M, V], [x, gamma, beta, mean, var], expected,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, axis", [((4, 33), -1), ((2, 3, 16), (1, 2)), ((5, 6), 0)])
def test_layer_norm(shape, axis):
    x = randn(shape, 19)
    axes = (axis,) if isinstance(axis, int) else axis
    axes = tuple(a % len(shape) for a in axes)
    norm_shape = tuple(shape[a] for a in axes)
    gamma, beta = randn(norm_shape, 20), randn(norm_shape, 21)
    X = te.placeholder(shape, name="X")
    G = te.placeholder(norm_shape, name="G")
    B = te.placeholder(norm_shape, name="B")
    Y = topi.nn.layer_norm(X, G, B, axis, epsilon=1e-5)
    mu = x.mean(axis=axes, keepdims=True)
    sd = np.sqrt(x.var(axis=axes, keepdims=True) + 1e-5)
    bshape = [shape[k] if k in axes else 1 for k in range(len(shape))]
    expected = (x - mu) / sd * gamma.reshape(bshape) + beta.reshape(bshape)
    check("schedule_layer_norm", Y, [X, G, B], [x, gamma, beta], expected, rtol=1e-4,
          atol=1e-4)


@pytest.mark.parametrize("shape, axis", [((3, 37), -1), ((2, 5, 4), 1), ((17,), 0),
                                         ((2, 3, 32), 2)])
def test_softmax(shape, axis):
    x = randn(shape, 22) * 3
    X = te.placeholder(shape, name="X")
    check("schedule_softmax", topi.nn.softmax(X, axis), [X], [x],
          special.softmax(x.astype(np.float64), axis=axis))
    check("schedule_softmax", topi.nn.log_softmax(X, axis), [X], [x],
          special.log_softmax(x.astype(np.float64), axis=axis), rtol=1e-4, atol=1e-5)


def test_softmax_row_of_partial_vectors_reduces_in_vector_lanes():
    """A static row that is not a whole number of vectors (ViT's 197 tokens): the row's
    maximum and sum are vectors of partial results (``rfactor``) with a tail, not a scalar
    chain; equal to numpy."""
    x = randn((2, 197), 23) * 4
    X = te.placeholder(x.shape, name="X")
    Y = topi.nn.fast_softmax(X, -1)
    stages = {st.op.name for st in topi.x86.schedule_softmax(Y).stages}
    assert {"T_softmax_maxelem.rf", "T_softmax_expsum.rf"} <= stages
    (got,) = run(topi.x86.schedule_softmax, Y, [X], [x])
    np.testing.assert_allclose(got, special.softmax(x.astype(np.float64), axis=-1),
                               rtol=1e-5, atol=1e-6)


def test_activations():
    x = randn((3, 4, 17), 23) * 2
    X = te.placeholder(x.shape, name="X")
    S = te.placeholder((4,), name="S")
    slope = randn((4,), 24)
    xd = x.astype(np.float64)
    gelu_t = 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)))
    cases = [
        (topi.nn.relu(X), [X], [x], np.maximum(x, 0)),
        (topi.nn.leaky_relu(X, 0.1), [X], [x], np.where(x > 0, x, 0.1 * x)),
        (topi.nn.prelu(X, S, axis=1), [X, S], [x, slope],
         np.where(x > 0, x, x * slope[None, :, None])),
        (topi.nn.gelu(X), [X], [x], 0.5 * xd * (1 + special.erf(xd / np.sqrt(2)))),
        (topi.nn.gelu(X, approximate="tanh"), [X], [x], gelu_t),
        (topi.sigmoid(X), [X], [x], special.expit(xd)),
        (topi.tanh(X), [X], [x], np.tanh(xd)),
        (topi.clip(X, -0.5, 0.75), [X], [x], np.clip(x, -0.5, 0.75)),
    ]
    check("schedule_injective", [c[0] for c in cases], [X, S], [x, slope],
          [c[3] for c in cases], rtol=1e-5, atol=1e-6)


def test_pad_and_flatten():
    x = randn((2, 3, 4), 25)
    X = te.placeholder(x.shape, name="X")
    P = topi.nn.pad(X, (0, 1, 2), (1, 0, 3), pad_value=-1.5)
    assert P.op.tag == "injective,pad"
    check("schedule_injective", P, [X], [x],
          np.pad(x, ((0, 1), (1, 0), (2, 3)), constant_values=-1.5))
    check("schedule_injective", topi.nn.flatten(X), [X], [x], x.reshape(2, 12))
    with pytest.raises(ValueError, match="negative"):
        topi.nn.pad(X, (0, -1, 0))
