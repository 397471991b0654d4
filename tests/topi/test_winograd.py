"""Winograd convolution F(m x m, 3 x 3) (topi.nn.conv2d_winograd_NCHWc, topi.x86 schedule)
against the direct convolution in float64, over sizes that divide no tile."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi.nn.winograd import winograd_matrices

from .common import randn
from .ref import conv2d_nchw, pack_nchwc, unpack_nchwc


def _winograd(c, k, h, w, m, pad=1, cb=8, ob=8, epilogue=False, schedule="x86", batch=1):
    x = randn((batch, c, h, w), seed=1)
    wt = randn((k, c, 3, 3), seed=2)
    bias = randn((k,), seed=3)
    X = te.placeholder((batch, c // cb, h, w, cb), name="X")
    U = te.placeholder((m + 2, m + 2, k // ob, c, ob), name="U")
    Y = topi.nn.conv2d_winograd_NCHWc(X, U, pad, m)
    args = [X, U]
    arrays = [pack_nchwc(x, cb), topi.nn.winograd_weight_transform(wt, m, ob)]
    ref = conv2d_nchw(x.astype("float64"), wt.astype("float64"), 1, pad, 1)
    if epilogue:  # bias + relu, fused into the output transform's loops
        B = te.placeholder((k // ob, 1, 1, ob), name="B")
        Y = te.compute(Y.shape, lambda n, o, i, j, b: te.max(Y[n, o, i, j, b] + B[o, 0, 0, b],
                                                              0.0), name="bias_relu")
        args.append(B)
        arrays.append(bias.reshape(k // ob, ob)[:, None, None, :].copy())
        ref = np.maximum(ref + bias[None, :, None, None], 0)
    s = (topi.x86.schedule_conv2d_winograd_NCHWc([Y]) if schedule == "x86"
         else te.create_schedule(Y.op))
    mod = kiln.build(s, args + [Y])
    out = kiln.nd.empty([int(d) for d in Y.shape], "float32")
    mod(*[kiln.nd.array(a) for a in arrays], out)
    return unpack_nchwc(out.numpy()), ref


@pytest.fixture(params=[32, 64], ids=["avx2", "avx512"])
def vector_bytes(request, monkeypatch):
    """Batched-product plans for 16 (AVX2) and 32 (AVX-512) vector registers."""
    monkeypatch.setenv("KILN_VECTOR_BYTES", str(request.param))
    return request.param


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("c,k,h,w,pad", [(8, 16, 8, 8, 1), (16, 8, 7, 9, 1), (8, 8, 13, 5, 1),
                                         (8, 16, 10, 10, 0), (4, 8, 3, 3, 1)])
def test_matches_direct_convolution(m, c, k, h, w, pad, vector_bytes):
    cb, ob = min(c, 8), 8
    got, ref = _winograd(c, k, h, w, m, pad, cb=cb, ob=ob)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("m,c,k,h,w", [(4, 8, 16, 13, 11), (2, 16, 8, 7, 7), (2, 8, 8, 15, 13)])
def test_batches(batch, m, c, k, h, w):
    """The batch is folded into the tile index: blocks of tile rows of one image (15x13, the
    last block's rows cut by the image's edge), or of whole images (13x11, 7x7)."""
    got, ref = _winograd(c, k, h, w, m, batch=batch)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("schedule", ["x86", "default"])
@pytest.mark.parametrize("batch", [1, 3])
def test_fused_bias_relu(schedule, batch):
    got, ref = _winograd(16, 16, 14, 14, 2, epilogue=True, schedule=schedule, batch=batch)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_transforms_multiply_by_no_zero():
    """The transforms are sums over the matrices' non-zero entries only."""
    X = te.placeholder((1, 1, 8, 8, 8), name="X")
    U = te.placeholder((4, 4, 1, 8, 8), name="U")
    Y = topi.nn.conv2d_winograd_NCHWc(X, U, 1, 2)
    text = str(kiln.lower(te.create_schedule(Y.op), [X, U, Y], simple_mode=True))
    assert "*0f" not in text and "*1f" not in text


def test_matrices_compute_a_correlation():
    """A^T [(G g G^T) . (B^T d B)] A equals the 3x3 correlation of every tile (float64)."""
    rng = np.random.default_rng(0)
    for m in (2, 4):
        bt, g, at = winograd_matrices(m)
        d = rng.standard_normal((m + 2, m + 2))
        f = rng.standard_normal((3, 3))
        y = at @ ((g @ f @ g.T) * (bt @ d @ bt.T)) @ at.T
        ref = np.array([[np.sum(d[i:i + 3, j:j + 3] * f) for j in range(m)] for i in range(m)])
        np.testing.assert_allclose(y, ref, atol=1e-12)


def test_errors():
    with pytest.raises(ValueError, match="tile size m=3"):
        winograd_matrices(3)
    with pytest.raises(ValueError, match="3x3 kernel"):
        topi.nn.winograd_weight_transform(np.zeros((8, 8, 5, 5), "float32"), 2, 8)
    with pytest.raises(ValueError, match="blocks of 16"):
        topi.nn.winograd_weight_transform(np.zeros((8, 8, 3, 3), "float32"), 2, 16)
    X = te.placeholder((1, 1, 8, 8, 8), name="X")
    with pytest.raises(ValueError, match="does not match F"):
        topi.nn.conv2d_winograd_NCHWc(X, te.placeholder((6, 6, 1, 8, 8), name="U"), 1, 2)


def test_tile_choice():
    assert topi.nn.winograd_tile(56, 56, 64, 64) == 4
    assert topi.nn.winograd_tile(28, 28, 512, 512) == 2
    assert topi.nn.winograd_tile(14, 14, 256, 256) is None
    assert topi.nn.winograd_tile(7, 7, 512, 512) is None
    # at batch > 1 from BATCH_TILES F(2x2) tiles of the whole batch, F(2x2) below 24²
    assert topi.nn.winograd_tile(56, 56, 64, 64, batch=8) == 4
    assert topi.nn.winograd_tile(14, 14, 256, 256, batch=2) == 2
    assert topi.nn.winograd_tile(7, 7, 512, 512, batch=4) is None
    assert topi.nn.winograd_tile(7, 7, 512, 512, batch=8) == 2


@pytest.mark.parametrize("batch,n,m,rows,images", [(1, 28, 4, 3, 1), (8, 28, 4, 7, 1),
                                                   (8, 56, 4, 2, 1), (8, 7, 2, 4, 4)])
def test_batch_plan(batch, n, m, rows, images, monkeypatch):
    """At batch > 1 a parallel block is whole tile rows of one image, ``rows`` dividing the
    image's (no tail block in the fused batch x rows loop), or whole images."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    X = te.placeholder((batch, 8, n, n, 8), name="X")
    Y = topi.nn.conv2d_winograd_NCHWc(X, te.placeholder((m + 2, m + 2, 8, 64, 8), name="U"),
                                      1, m)
    plan = topi.x86.winograd.winograd_plan(Y.op)
    assert (plan["rows"], plan["images"]) == (rows, images)


@pytest.mark.slow  # a Winograd build (1-4 s); 13x5 of test_matches_direct_convolution
def test_balanced_blocks_are_correct(monkeypatch):  # has a tail block too on 2 threads
    """14² by F(2x2) on 2 threads: blocks of 3, 3 and 1 tile rows (a tail block)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    got, ref = _winograd(8, 8, 14, 14, 2)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_plan_fits_the_vector_registers(vector_bytes):
    """7 tiles x 2 vectors of accumulators; with 16 registers the tiles run outside the
    vectors and the input channels are not unrolled (one broadcast feeds both FMAs)."""
    X = te.placeholder((1, 8, 56, 56, 8), name="X")
    Y = topi.nn.conv2d_winograd_NCHWc(X, te.placeholder((6, 6, 8, 64, 8), name="U"), 1, 4)
    plan = topi.x86.winograd.winograd_plan(Y.op)
    assert (plan["rt"], plan["vo"]) == (7, 2)
    if vector_bytes == 32:
        assert (plan["ku"], plan["tiles_outer"]) == (1, True)
    else:
        assert (plan["ku"], plan["tiles_outer"]) == (2, False)


def test_small_image_tile(vector_bytes, monkeypatch):
    """A 7² image's 16 F(2x2) tiles in one block (1 thread): 8 tiles x 2 vectors of
    accumulators with 32 registers, 4 x 2 with 16 (7 would leave a tail)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    X = te.placeholder((1, 8, 7, 7, 8), name="X")
    Y = topi.nn.conv2d_winograd_NCHWc(X, te.placeholder((4, 4, 8, 64, 8), name="U"), 1, 2)
    plan = topi.x86.winograd.winograd_plan(Y.op)
    assert (plan["rows"], plan["rt"]) == (4, 8 if vector_bytes == 64 else 4)
