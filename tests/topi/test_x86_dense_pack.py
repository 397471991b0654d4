"""topi.x86.dense_pack: the weight packed into panels of SIMD registers of columns, the
register-blocked kernel over any row count (symbolic included) and its fused epilogue;
against numpy in float64."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te, topi
from kiln.topi.x86 import packed_dense

from .common import randn

#: every result against numpy's float64 product (float32 sums over k <= 768)
RTOL = ATOL = 1e-4


def _packed(n: int, k: int, rows=None, bias: bool = True):
    """Placeholders of a packed dense with ``n`` units over ``k`` (``rows``: default a
    symbolic ``m``), its output with a relu epilogue, and the panel width."""
    nb = packed_dense.dense_pack_block(n)
    A = te.placeholder((te.var("m") if rows is None else rows, k), name="A")
    W = te.placeholder((-(-n // nb), k, nb), name="W")
    B = te.placeholder((n,), name="B") if bias else None
    Y = topi.nn.relu(topi.x86.dense_pack(A, W, B, units=n))
    return A, W, B, Y, nb


def _run(f, args, m: int, k: int, n: int, nb: int, seed: int = 0):
    a, w, b = randn((m, k), seed), randn((n, k), seed + 1), randn((n,), seed + 2)
    y = kiln.nd.empty((m, n))
    ins = [a, packed_dense.pack_dense_weight(w, nb)] + ([b] if len(args) == 4 else [])
    f(*[kiln.nd.array(x) for x in ins], y)
    want = a.astype(np.float64) @ w.T.astype(np.float64)
    if len(args) == 4:
        want = want + b
    return y.numpy(), np.maximum(want, 0)


def test_pack_dense_weight_pads_the_last_panel():
    w = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    p = packed_dense.pack_dense_weight(w, 4)
    assert p.shape == (2, 3, 4)
    np.testing.assert_array_equal(p[1, :, 0], w[4])
    np.testing.assert_array_equal(p[1, :, 1:], 0)
    np.testing.assert_array_equal(p[0].T, w[:4])


@pytest.mark.parametrize("vector_bytes, nb, mb", [(64, 64, 6), (32, 16, 6)])
def test_blocks_follow_the_target_vectors(monkeypatch, vector_bytes, nb, mb):
    """AVX-512: panels of 4 vectors, 6 rows; AVX2 (16 registers): 2 vectors, 6 rows."""
    monkeypatch.setenv("KILN_VECTOR_BYTES", str(vector_bytes))
    width = vector_bytes // 4
    assert packed_dense.dense_pack_block(768) == nb
    assert packed_dense.dense_pack_block(width) == width  # one register of units
    assert packed_dense.dense_pack_rows(nb) == mb


@pytest.mark.parametrize("units, nb", [(3072, 64), (1000, 64), (100, 64), (40, 64),
                                       (32, 32), (96, 32), (160, 32)])
def test_wide_panels_pad_no_more_than_narrow_ones(monkeypatch, units, nb):
    """Four vectors (AVX-512) only where the last panel pads no more than two vectors'."""
    monkeypatch.setenv("KILN_VECTOR_BYTES", "64")
    assert packed_dense.dense_pack_block(units) == nb


def test_repack_dense_weight():
    w = randn((40, 5), 0)
    packed = packed_dense.pack_dense_weight(w, 32)
    np.testing.assert_array_equal(packed_dense.repack_dense_weight(packed, 40, 16),
                                  packed_dense.pack_dense_weight(w, 16))


@pytest.mark.parametrize("m, k, n", [(1, 64, 40),  # one row, a partial panel
                                     (7, 33, 100),  # odd k, rows below one block
                                     (197, 65, 24),  # a row tail, units below a panel
                                     (16, 48, 64)])  # whole blocks
def test_dense_pack_static_rows(m, k, n):
    A, W, B, Y, nb = _packed(n, k, rows=m)
    f = kiln.build(topi.x86.schedule_dense_pack(Y), [A, W, B, Y])
    got, want = _run(f, [A, W, B, Y], m, k, n, nb)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.fixture(scope="module", params=[
    (16, 64),  # whole panels
    # units below a panel: a crop stage stores the block (its build 2-5 s)
    pytest.param((20, 40), marks=pytest.mark.slow),
])
def symbolic_kernel(request):
    """The packed dense over a symbolic row count ``m`` and ``(k, n)``, built once:
    ``(f, args, nb, k, n)``."""
    k, n = request.param
    A, W, B, Y, nb = _packed(n, k)
    return kiln.build(topi.x86.schedule_dense_pack(Y), [A, W, B, Y]), [A, W, B, Y], nb, k, n


def _check_rows(symbolic_kernel, m: int) -> None:
    f, args, nb, k, n = symbolic_kernel
    got, want = _run(f, args, m, k, n, nb, seed=m)
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"m = {m}")


def test_dense_pack_symbolic_rows_one_kernel(symbolic_kernel):
    """Every number of rows left in the last block (0 to 7 with 6-row blocks, 2 to 5 of
    them for 8-row blocks), and the sequence lengths of the dynamic benchmarks."""
    for m in (0, 1, 2, 3, 4, 5, 6, 7, 8, 13, 64, 500):
        _check_rows(symbolic_kernel, m)


@settings(max_examples=20, deadline=None)
@given(m=st.integers(0, 300))
def test_dense_pack_symbolic_rows_any_count(symbolic_kernel, m):
    _check_rows(symbolic_kernel, m)


@pytest.mark.parametrize("n", [64, 256])  # row blocks in parallel; column panels
def test_symbolic_tail_block_is_a_micro_kernel_per_rows_left(n):
    """The last block of a symbolic row count is compiled once per number of rows left
    (``specialize_remainder``): no block loops over a run-time row count nor computes a
    row twice, and the full blocks are as before."""
    A, W, B, Y, nb = _packed(n, 64)
    text = str(kiln.lower(topi.x86.schedule_dense_pack(Y), [A, W, B, Y]))
    mb = packed_dense.dense_pack_rows(nb)
    assert text.count("for (k, ") == mb  # the full block's and one per rows left
    for rows in range(1, mb + 1):
        assert f"unrolled (i, 0, {rows})" in text
    assert "0, (m - " not in text and "min(" not in text  # no run-time row loop, no clamp


def test_epilogue_is_computed_from_the_register_block():
    A, W, B, Y, nb = _packed(64, 32, rows=16)
    Z = topi.add(Y, te.placeholder((16, 64), name="R"))  # a residual add after the relu
    R = Z.op.input_tensors[1]
    s = topi.x86.schedule_dense_pack(Z)
    text = str(kiln.lower(s, [A, W, B, R, Z], simple_mode=True))
    mb = packed_dense.dense_pack_rows(nb)
    # the product lives in one mb x nb local block; bias, relu and add read it there
    assert f"allocate T_dense_pack[float32 * {mb * nb}]" in text
    assert "T_relu" not in text and "T_add" in text
    f = kiln.build(s, [A, W, B, R, Z])
    a, w, b, r = randn((16, 32), 1), randn((64, 32), 2), randn((64,), 3), randn((16, 64), 4)
    z = kiln.nd.empty((16, 64))
    f(*[kiln.nd.array(x) for x in (a, packed_dense.pack_dense_weight(w, nb), b, r)], z)
    want = np.maximum(a.astype(np.float64) @ w.T + b, 0) + r
    np.testing.assert_allclose(z.numpy(), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("m, n", [(24, 64), (9, 32)])  # the product itself, cropped
def test_dense_pack_without_epilogue(m, n):
    A, W, _, Y, nb = _packed(n, 16, rows=m, bias=False)
    Y = Y.op.input_tensors[0]  # no relu
    assert (Y.op.tag == "dense_pack") == (m % packed_dense.dense_pack_rows(nb) == 0)
    f = kiln.build(topi.x86.schedule_dense_pack(Y), [A, W, Y])
    a, w = randn((m, 16), 5), randn((n, 16), 6)
    y = kiln.nd.empty((m, n))
    f(kiln.nd.array(a), kiln.nd.array(packed_dense.pack_dense_weight(w, nb)), y)
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ w.T, rtol=RTOL, atol=ATOL)


def test_dense_pack_rejects_mismatched_shapes():
    A = te.placeholder((4, 8), name="A")
    with pytest.raises(ValueError, match="inner dimensions differ"):
        topi.x86.dense_pack(A, te.placeholder((1, 9, 16), name="W"))
    with pytest.raises(ValueError, match="do not fill"):
        topi.x86.dense_pack(A, te.placeholder((2, 8, 16), name="W"), units=10)


def test_output_of_another_shape_reads_a_blocked_intermediate():
    A, W, _, Y, nb = _packed(40, 16, rows=10, bias=False)
    Z = topi.reshape(Y, (2, 5, 40))  # relu, then a reshape: not a matrix of the units
    f = kiln.build(topi.x86.schedule_dense_pack(Z), [A, W, Z])
    a, w = randn((10, 16), 7), randn((40, 16), 8)
    z = kiln.nd.empty((2, 5, 40))
    f(kiln.nd.array(a), kiln.nd.array(packed_dense.pack_dense_weight(w, nb)), z)
    want = np.maximum(a.astype(np.float64) @ w.T, 0).reshape(2, 5, 40)
    np.testing.assert_allclose(z.numpy(), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("split, axes, data_heads", [
    ((1, 16, 2, 32), (0, 2, 1, 3), False),  # queries [B, H, S, D]
    ((1, 17, 2, 32), (0, 2, 3, 1), False),  # keys [B, H, D, S], a row tail
    ((3, 5, 2, 32), (0, 2, 1, 3), True),  # batches with a row tail, heads read and stored
])
def test_dense_pack_in_head_layouts(split, axes, data_heads):
    """The product read from / stored in attention's head layouts equals the matrix product
    transposed by numpy (a bias and a relu epilogue computed in the stored layout)."""
    b, s, h, d = split
    m, n = b * s, h * d
    k = n if data_heads else 24
    nb = math.gcd(packed_dense.dense_pack_block(n), d)  # panels within a head
    out_layout = packed_dense.HeadLayout(split, axes)
    data_layout = packed_dense.HeadLayout(split, (0, 2, 1, 3)) if data_heads else None
    A = te.placeholder(data_layout.shape if data_heads else (m, k), name="A")
    W = te.placeholder((n // nb, k, nb), name="W")
    B = te.placeholder((n,), name="B")
    Y = topi.nn.relu(topi.x86.dense_pack(A, W, B, units=n, data_layout=data_layout,
                                         out_layout=out_layout.attr))
    assert tuple(int(x) for x in Y.shape) == out_layout.shape
    f = kiln.build(topi.x86.schedule_dense_pack(Y), [A, W, B, Y])
    a, w, bias = randn((m, k), 9), randn((n, k), 10), randn((n,), 11)
    y = kiln.nd.empty(out_layout.shape)
    stored_a = a.reshape(split).transpose(0, 2, 1, 3).copy() if data_heads else a
    f(*[kiln.nd.array(x) for x in (stored_a, packed_dense.pack_dense_weight(w, nb), bias)], y)
    want = np.maximum(a.astype(np.float64) @ w.T + bias, 0).reshape(split).transpose(axes)
    np.testing.assert_allclose(y.numpy(), want, rtol=RTOL, atol=ATOL)


def test_head_layout_must_fit_the_panels():
    A = te.placeholder((8, 16), name="A")
    W = te.placeholder((1, 16, 32), name="W")
    with pytest.raises(ValueError, match="panels of 32"):
        topi.x86.dense_pack(A, W, out_layout=((1, 8, 4, 8), (0, 2, 1, 3)))
    with pytest.raises(ValueError, match="permutation"):
        topi.x86.dense_pack(A, W, out_layout=((1, 8, 4, 8), (0, 1, 1, 3)))
