"""topi.x86's dense and batch_matmul plans on transformer-like shapes (small): the dot plan's
lane tree, column tiles and row tails; the gemm plan's column remainder; against numpy."""

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi.x86 import dense as x86_dense

from .common import randn, run


def _dense_case(m: int, k: int, n: int):
    A = te.placeholder((m, k), name="A")
    W = te.placeholder((n, k), name="W")
    B = te.placeholder((n,), name="B")
    a, w, b = randn((m, k), 1), randn((n, k), 2), randn((n,), 3)
    want = a.astype(np.float64) @ w.T.astype(np.float64) + b
    return A, W, B, [a, w, b], want


@pytest.mark.parametrize("m, k, n", [(13, 64, 24),  # a row tail (13 = 3 x 4 + 1)
                                     (1, 48, 40),  # one row: matrix-vector
                                     (8, 256, 96)])  # a longer reduction
def test_dense_bias_relu(m, k, n):
    A, W, B, arrays, want = _dense_case(m, k, n)
    Y = topi.nn.relu(topi.nn.dense(A, W, B))
    (got,) = run(topi.x86.schedule_dense, Y, [A, W, B], arrays)
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-4, atol=1e-4)


def test_dense_column_tiles_fit_the_budget(monkeypatch):
    monkeypatch.setattr(x86_dense, "TILE_BYTES", 64 * 256 * 4)  # 64 rows of k = 256
    A, W, B, arrays, want = _dense_case(8, 256, 192)
    Y = topi.nn.dense(A, W, B)
    assert x86_dense.dot_plan_params(Y.op.input_tensors[0].op)["nt"] == 64
    (got,) = run(topi.x86.schedule_dense, Y, [A, W, B], arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dense_lanes_reduced_by_halves():
    A = te.placeholder((4, 64), name="A")
    W = te.placeholder((8, 64), name="W")
    Y = topi.nn.dense(A, W)
    text = str(kiln.lower(topi.x86.schedule_dense([Y]), [A, W, Y], simple_mode=True))
    kv = x86_dense.dot_plan_params(Y.op)["kv"]
    widths = [kv // 2 ** i for i in range(4) if kv // 2 ** i >= 2]
    for w in widths:  # one vector partial-sum stage per level
        assert f"x{w}(0f)" in text


@pytest.mark.parametrize("bt, m, k, n", [(3, 13, 8, 19),  # row and column tails
                                         (2, 16, 12, 35)])
def test_batch_matmul_column_remainder(bt, m, k, n):
    A = te.placeholder((bt, m, k), name="A")
    C = te.placeholder((bt, k, n), name="C")
    Y = topi.nn.batch_matmul(A, C, transpose_b=False)
    a, c = randn((bt, m, k), 4), randn((bt, k, n), 5)
    (got,) = run(topi.x86.schedule_batch_matmul, Y, [A, C], [a, c])
    np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), c), rtol=1e-4, atol=1e-4)
