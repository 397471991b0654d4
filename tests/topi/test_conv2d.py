"""Convolutions (NCHW, grouped, NHWC, packed NCHWc, depthwise) against direct numpy loops,
with the default and the x86 schedules."""

import numpy as np
import pytest

import kiln
from kiln import te, topi

from . import ref
from .common import check, randn, run

# (batch, in_c, in_h, in_w, out_c, kernel, stride, padding, dilation)
CONV_CASES = [
    (1, 3, 7, 7, 4, 3, 1, 1, 1),
    (1, 8, 13, 11, 12, 3, 2, 1, 1),
    (2, 5, 9, 9, 7, 3, 1, 0, 2),
    (1, 16, 28, 28, 32, 3, 1, 1, 1),
    (1, 4, 20, 20, 16, 1, 1, 0, 1),
    (1, 3, 17, 17, 8, 5, 2, 2, 1),
    (1, 6, 1, 1, 5, 1, 1, 0, 1),
    (1, 13, 19, 37, 3, 3, 1, (1, 2, 0, 1), 1),
]


@pytest.mark.parametrize("n, c, h, w, f, k, s, p, d", CONV_CASES)
def test_conv2d_nchw(n, c, h, w, f, k, s, p, d):
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((f, c, k, k), name="W")
    Y = topi.nn.conv2d_nchw(X, W, s, p, d)
    x, wt = randn((n, c, h, w), 1), randn((f, c, k, k), 2)
    expected = ref.conv2d_nchw(x, wt, s, p, d)
    assert Y.op.tag == "conv2d_nchw"
    check("schedule_conv2d_nchw", Y, [X, W], [x, wt], expected, rtol=1e-4, atol=1e-4)


def test_conv2d_same_padding_and_layout_dispatch():
    X = te.placeholder((1, 4, 10, 9), name="X")
    W = te.placeholder((6, 4, 4, 4), name="W")
    Y = topi.nn.conv2d(X, W, 1, "SAME", 1, layout="NCHW")
    assert tuple(int(v) for v in Y.shape) == (1, 6, 10, 9)
    x, wt = randn((1, 4, 10, 9), 3), randn((6, 4, 4, 4), 4)
    # SAME with an even kernel: one row/column more padding after than before
    expected = ref.conv2d_nchw(x, wt, 1, (1, 1, 2, 2), 1)
    check("schedule_conv2d_nchw", Y, [X, W], [x, wt], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n, c, h, f, k, s, p", [(1, 8, 14, 16, 3, 1, 1), (2, 3, 9, 5, 3, 2, 0)])
def test_conv2d_nchw_bias_relu_epilogue(n, c, h, f, k, s, p):
    """conv + bias + relu scheduled as one kernel (the graph compiler's fused group)."""
    X = te.placeholder((n, c, h, h), name="X")
    W = te.placeholder((f, c, k, k), name="W")
    B = te.placeholder((f, 1, 1), name="B")
    Y = topi.nn.relu(topi.add(topi.nn.conv2d_nchw(X, W, s, p, 1), B))
    x, wt, b = randn((n, c, h, h), 5), randn((f, c, k, k), 6), randn((f, 1, 1), 7)
    expected = np.maximum(ref.conv2d_nchw(x, wt, s, p, 1) + b, 0)
    for sched in (topi.x86.schedule_conv2d_nchw, topi.x86.schedule_auto,
                  topi.generic.schedule_conv2d_nchw):
        (got,) = run(sched, Y, [X, W, B], [x, wt, b])
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_conv2d_nchw_residual_add_and_two_outputs():
    X = te.placeholder((1, 4, 8, 8), name="X")
    W = te.placeholder((4, 4, 3, 3), name="W")
    R = te.placeholder((1, 4, 8, 8), name="R")
    conv = topi.nn.conv2d_nchw(X, W, 1, 1, 1)
    Y = topi.add(conv, R)
    x, wt, r = randn((1, 4, 8, 8), 8), randn((4, 4, 3, 3), 9), randn((1, 4, 8, 8), 10)
    c_ref = ref.conv2d_nchw(x, wt, 1, 1, 1)
    (got,) = run(topi.x86.schedule_conv2d_nchw, Y, [X, W, R], [x, wt, r])
    np.testing.assert_allclose(got, c_ref + r, rtol=1e-4, atol=1e-4)
    # the convolution and the sum both as outputs
    g_conv, g_sum = run(topi.x86.schedule_conv2d_nchw, [Y, conv], [X, W, R], [x, wt, r])
    np.testing.assert_allclose(g_conv, c_ref + r, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g_sum, c_ref, rtol=1e-4, atol=1e-4)


def test_conv2d_followed_by_flatten():
    """An epilogue of another shape: the convolution is blocked on its own."""
    X = te.placeholder((1, 3, 6, 6), name="X")
    W = te.placeholder((5, 3, 3, 3), name="W")
    Y = topi.nn.flatten(topi.nn.relu(topi.nn.conv2d_nchw(X, W, 1, 0, 1)))
    x, wt = randn((1, 3, 6, 6), 11), randn((5, 3, 3, 3), 12)
    expected = np.maximum(ref.conv2d_nchw(x, wt, 1, 0, 1), 0).reshape(1, -1)
    (got,) = run(topi.x86.schedule_conv2d_nchw, Y, [X, W], [x, wt])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n, c, h, f, k, s, p, d, g", [
    (1, 8, 10, 12, 3, 1, 1, 1, 4),
    (1, 6, 9, 6, 3, 2, 1, 2, 3),
    (2, 4, 7, 8, 1, 1, 0, 1, 2),
])
def test_group_conv2d_nchw(n, c, h, f, k, s, p, d, g):
    X = te.placeholder((n, c, h, h), name="X")
    W = te.placeholder((f, c // g, k, k), name="W")
    Y = topi.nn.group_conv2d_nchw(X, W, s, p, d, g)
    assert Y.op.tag == "group_conv2d_nchw"
    x, wt = randn((n, c, h, h), 13), randn((f, c // g, k, k), 14)
    expected = ref.conv2d_nchw(x, wt, s, p, d, groups=g)
    check("schedule_group_conv2d_nchw", Y, [X, W], [x, wt], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n, h, w, c, f, k, s, p", [(1, 9, 9, 4, 16, 3, 1, 1),
                                                    (2, 7, 10, 3, 5, 3, 2, 0)])
def test_conv2d_nhwc(n, h, w, c, f, k, s, p):
    X = te.placeholder((n, h, w, c), name="X")
    W = te.placeholder((k, k, c, f), name="W")
    Y = topi.nn.conv2d(X, W, s, p, 1, layout="NHWC")
    x, wt = randn((n, h, w, c), 15), randn((k, k, c, f), 16)
    expected = ref.conv2d_nchw(x.transpose(0, 3, 1, 2), wt.transpose(3, 2, 0, 1), s, p, 1)
    check("schedule_conv2d_nhwc", Y, [X, W], [x, wt], expected.transpose(0, 2, 3, 1),
          rtol=1e-4, atol=1e-4)


# (batch, in_c, ic_bn, size, out_c, oc_bn, kernel, stride, padding, dilation)
NCHWC_CASES = [
    (1, 16, 8, 14, 32, 16, 3, 1, 1, 1),
    (1, 3, 3, 13, 16, 16, 3, 2, 1, 1),
    (2, 8, 4, 9, 8, 8, 3, 1, 2, 2),
    (1, 32, 16, 7, 16, 16, 1, 1, 0, 1),
    (1, 16, 8, 10, 32, 8, 3, 1, 1, 1),
]


@pytest.fixture(params=[32, 64], ids=["avx2", "avx512"])
def vector_bytes(request, monkeypatch):
    """Schedules planned for 16 (AVX2) and 32 (AVX-512) vector registers."""
    monkeypatch.setenv("KILN_VECTOR_BYTES", str(request.param))
    return request.param


@pytest.mark.parametrize("n, c, icb, h, f, ocb, k, s, p, d", NCHWC_CASES)
def test_conv2d_NCHWc(n, c, icb, h, f, ocb, k, s, p, d, vector_bytes):  # noqa: N802
    X = te.placeholder((n, c // icb, h, h, icb), name="X")
    W = te.placeholder((f // ocb, c // icb, k, k, icb, ocb), name="W")
    Y = topi.nn.conv2d_NCHWc(X, W, s, p, d, f"NCHW{icb}c", f"NCHW{ocb}c")
    x, wt = randn((n, c, h, h), 17), randn((f, c, k, k), 18)
    expected = ref.pack_nchwc(ref.conv2d_nchw(x, wt, s, p, d), ocb)
    check("schedule_conv2d_NCHWc", Y, [X, W],
          [ref.pack_nchwc(x, icb), ref.pack_kernel(wt, icb, ocb)], expected,
          rtol=1e-4, atol=1e-4)


def test_conv2d_NCHWc_with_epilogue():  # noqa: N802
    X = te.placeholder((1, 2, 10, 10, 8), name="X")
    W = te.placeholder((2, 2, 3, 3, 8, 16), name="W")
    B = te.placeholder((1, 2, 1, 1, 16), name="B")
    Y = topi.nn.relu(topi.add(topi.nn.conv2d_NCHWc(X, W, 1, 1, 1), B))
    x, wt, b = randn((1, 16, 10, 10), 19), randn((32, 16, 3, 3), 20), randn((1, 2, 1, 1, 16), 21)
    expected = np.maximum(ref.pack_nchwc(ref.conv2d_nchw(x, wt, 1, 1, 1), 16) + b, 0)
    (got,) = run(topi.x86.schedule_conv2d_NCHWc, Y, [X, W, B],
                 [ref.pack_nchwc(x, 8), ref.pack_kernel(wt, 8, 16), b])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("par, loops", [("oc", ["oc.outer", "n"]), ("y", ["n", "oh"])])
def test_conv2d_NCHWc_batch_joins_the_parallel_loop(par, loops):  # noqa: N802
    """At batch > 1 the batch is fused into the parallel loop: inside the channel blocks
    when they run outermost (each block's weights serve every image), else outside the
    rows."""
    X = te.placeholder((3, 2, 9, 9, 8), name="X")
    W = te.placeholder((4, 2, 3, 3, 8, 8), name="W")
    Y = topi.nn.conv2d_NCHWc(X, W, 1, 1, 1)
    x, wt = randn((3, 16, 9, 9), 22), randn((32, 16, 3, 3), 23)

    def sched(outs):
        s = te.create_schedule([t.op for t in outs])
        conv = outs[0].op
        plan = {**topi.x86.conv2d.nchwc_plan(conv), "par": par}
        topi.x86.conv2d.schedule_conv_nchwc_block(s, outs, conv, plan)
        text = str(kiln.lower(s, [X, W, *outs], simple_mode=True))
        assert f"parallel ({'.'.join(loops)}.fused" in text
        return s

    (got,) = run(sched, Y, [X, W], [ref.pack_nchwc(x, 8), ref.pack_kernel(wt, 8, 8)])
    np.testing.assert_allclose(got, ref.pack_nchwc(ref.conv2d_nchw(x, wt, 1, 1, 1), 8),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c, h, f, k, s, p", [(32, 7, 64, 3, 1, 1), (32, 14, 32, 3, 1, 1),
                                              (32, 10, 64, 1, 2, 0), (32, 9, 32, 3, 2, 1)])
def test_conv2d_NCHWc_input_channels_outermost(c, h, f, k, s, p):  # noqa: N802
    """``icc_outer``: a block of output channels accumulated over the whole image, one
    input-channel block at a time (each block's weights serve every row while in L1), then
    the epilogue; the same results as the tile-by-tile order."""
    X = te.placeholder((1, c // 16, h, h, 16), name="X")
    W = te.placeholder((f // 16, c // 16, k, k, 16, 16), name="W")
    B = te.placeholder((f // 16, 1, 1, 16), name="B")
    Y = topi.nn.relu(topi.add(topi.nn.conv2d_NCHWc(X, W, s, p, 1), B))
    x, wt, b = randn((1, c, h, h), 24), randn((f, c, k, k), 25), randn((f // 16, 1, 1, 16), 26)

    def sched(outs):
        s = te.create_schedule([t.op for t in outs])
        conv = outs[0].op.input_tensors[0].op.input_tensors[0].op
        plan = {**topi.x86.conv2d.nchwc_plan(conv), "par": "oc", "icc_outer": True}
        topi.x86.conv2d.schedule_conv_nchwc_block(s, outs, conv, plan)
        text = str(kiln.lower(s, [X, W, B, *outs], simple_mode=True))
        assert text.index("for (icc, ") < text.index("for (oh, ")
        return s

    expected = np.maximum(ref.pack_nchwc(ref.conv2d_nchw(x, wt, s, p, 1), 16) + b, 0)
    (got,) = run(sched, Y, [X, W, B], [ref.pack_nchwc(x, 16), ref.pack_kernel(wt, 16, 16), b])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_nchwc_plan_input_channels_outermost(monkeypatch):
    """On AVX-512 a batch-1 convolution with a 3x3 window whose channel blocks run in
    parallel (big weights) takes ``icc_outer``; a 1x1 window, rows in parallel, a batch of 2,
    or AVX2 do not."""
    monkeypatch.setattr(topi.x86.conv2d, "num_threads", lambda: 2)
    plan = topi.x86.conv2d.nchwc_plan

    def conv(n, h, k=3):
        X = te.placeholder((n, 16, h, h, 16), name="X")
        return topi.nn.conv2d_NCHWc(X, te.placeholder((64, 16, k, k, 16, 16), name="W"),
                                    1, k // 2, 1).op

    monkeypatch.setenv("KILN_VECTOR_BYTES", "64")
    assert plan(conv(1, 7))["icc_outer"] and plan(conv(1, 7))["par"] == "oc"
    assert not plan(conv(1, 7, k=1))["icc_outer"]  # 1 MB of 1x1 weights
    assert not plan(conv(2, 7))["icc_outer"]
    assert not plan(conv(1, 112))["icc_outer"]  # 12.8 MB of input: rows in parallel
    monkeypatch.setenv("KILN_VECTOR_BYTES", "32")
    assert not plan(conv(1, 7))["icc_outer"]


def test_nchwc_plan_fits_the_vector_registers(monkeypatch):
    """AVX-512 (32 registers): 8 pixels x 2 channel blocks, input channels unrolled by 2;
    AVX2 (16 registers): 7 pixels x 2 blocks, pixels outermost in the tile, or (odd channel
    blocks, or a 3-channel input block) 8 pixels x 1 block with the input block unrolled;
    depthwise rows of up to 14 / 8."""
    X = te.placeholder((1, 8, 58, 58, 8), name="X")
    conv = topi.nn.conv2d_NCHWc(X, te.placeholder((8, 8, 3, 3, 8, 8), name="W"), 1, 0, 1)
    dw = topi.nn.depthwise_conv2d_NCHWc(X, te.placeholder((8, 1, 3, 3, 1, 8), name="D"),
                                        1, 0, 1)
    plan = topi.x86.conv2d.nchwc_plan
    monkeypatch.setenv("KILN_VECTOR_BYTES", "64")
    assert (plan(conv.op)["rw"], plan(conv.op)["vo"], plan(conv.op)["ku"]) == (8, 2, 2)
    assert plan(dw.op)["rw"] == 14
    monkeypatch.setenv("KILN_VECTOR_BYTES", "32")
    p = plan(conv.op)
    assert (p["rw"], p["vo"], p["ku"], p["pixels_outer"]) == (7, 2, 1, True)
    odd = topi.nn.conv2d_NCHWc(X, te.placeholder((3, 8, 3, 3, 8, 8), name="W3"), 1, 0, 1)
    p = plan(odd.op)
    assert (p["rw"], p["vo"], p["ku"], p["pixels_outer"]) == (8, 1, 8, False)
    assert plan(dw.op)["rw"] == 8


# (batch, channels, multiplier, size, kernel, stride, padding, dilation)
DEPTHWISE_CASES = [
    (1, 8, 1, 14, 3, 1, 1, 1),
    (1, 6, 2, 13, 3, 2, 1, 1),
    (2, 4, 1, 9, 3, 1, 0, 2),
    (1, 3, 1, 7, 5, 1, 2, 1),
    (1, 16, 1, 34, 3, 2, 1, 1),
]


@pytest.mark.parametrize("n, c, m, h, k, s, p, d", DEPTHWISE_CASES)
def test_depthwise_conv2d_nchw(n, c, m, h, k, s, p, d):
    X = te.placeholder((n, c, h, h), name="X")
    W = te.placeholder((c, m, k, k), name="W")
    Y = topi.nn.depthwise_conv2d_nchw(X, W, s, p, d)
    x, wt = randn((n, c, h, h), 22), randn((c, m, k, k), 23)
    expected = ref.depthwise_conv2d_nchw(x, wt, s, p, d)
    check("schedule_depthwise_conv2d_nchw", Y, [X, W], [x, wt], expected, rtol=1e-4,
          atol=1e-4)


@pytest.mark.parametrize("n, c, cb, h, k, s, p", [(1, 32, 16, 14, 3, 1, 1),
                                                   (1, 8, 8, 11, 3, 2, 1),
                                                   (3, 16, 8, 9, 3, 1, 1)])
def test_depthwise_conv2d_NCHWc(n, c, cb, h, k, s, p, vector_bytes):  # noqa: N802
    X = te.placeholder((n, c // cb, h, h, cb), name="X")
    W = te.placeholder((c // cb, 1, k, k, 1, cb), name="W")
    Y = topi.nn.depthwise_conv2d_NCHWc(X, W, s, p, 1)
    x, wt = randn((n, c, h, h), 24), randn((c, 1, k, k), 25)
    expected = ref.pack_nchwc(ref.depthwise_conv2d_nchw(x, wt, s, p, 1), cb)
    packed_w = wt.reshape(c // cb, cb, 1, k, k).transpose(0, 2, 3, 4, 1)[:, :, :, :, None, :]
    check("schedule_depthwise_conv2d_NCHWc", Y, [X, W], [ref.pack_nchwc(x, cb), packed_w],
          expected, rtol=1e-4, atol=1e-4)


def test_conv_shape_errors():
    X = te.placeholder((1, 4, 8, 8), name="X")
    with pytest.raises(ValueError, match="input channels"):
        topi.nn.conv2d_nchw(X, te.placeholder((4, 3, 3, 3), name="W"), 1, 1, 1)
    with pytest.raises(ValueError, match="divisible by groups"):
        topi.nn.group_conv2d_nchw(X, te.placeholder((6, 2, 3, 3), name="W"), 1, 1, 1, 3)
    with pytest.raises(ValueError, match="does not fit"):
        topi.nn.conv2d_nchw(X, te.placeholder((4, 4, 11, 11), name="W"), 1, 0, 1)
    with pytest.raises(ValueError, match="unknown padding"):
        topi.nn.conv2d_nchw(X, te.placeholder((4, 4, 3, 3), name="W"), 1, "FULL", 1)
