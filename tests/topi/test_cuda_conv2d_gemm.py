"""``topi.cuda.conv2d_nchw_implicit_gemm`` (kiln/topi/cuda/conv2d_gemm.py): the compute equals
topi.nn's convolution, its fallback tiles divide the axes and fill the GPU, every config
builds for sm_90 and is correct on the CPU emulator of generated kernels, and relay's
CUDA strategy chooses it unless a tuned record holds the direct template's config."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import kiln
from kiln import autotvm, te, topi
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.relay import strategy
from kiln.target import Target
from kiln.topi.cuda import conv2d_gemm

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import NVRTC_MISSING, have_nvrtc
from . import ref
from .common import randn

needs_emulator = pytest.mark.skipif(not cuda_emulator.available(),
                                    reason="g++ is needed to emulate kernels")
needs_nvrtc = pytest.mark.skipif(not have_nvrtc(), reason=NVRTC_MISSING)

# (batch, channels, size, filters, kernel, stride, padding, dilation)
CASES = [
    (1, 4, 8, 8, 3, 1, 1, 1),
    (2, 3, 9, 5, 3, 2, 1, 1),
    (1, 6, 7, 12, 1, 1, 0, 1),
    (2, 5, 10, 4, 1, 2, 0, 1),
    (1, 3, 11, 8, 3, 1, 2, 2),
    (1, 2, 12, 6, 5, 2, 2, 1),
]


def _conv(case):
    n, c, h, f, k, stride, pad, dil = case
    x = te.placeholder((n, c, h, h), name="x")
    w = te.placeholder((f, c, k, k), name="w")
    xv, wv = randn((n, c, h, h), 1), randn((f, c, k, k), 2)
    return x, w, xv, wv, ref.conv2d_nchw(xv, wv, stride, pad, dil), (stride, pad, dil)


def _emulate(s, args, arrays):
    mod = kiln.build(s, args, target="cuda -arch=sm_90")
    out = np.zeros([int(d) for d in args[-1].shape], "float32")
    cuda_emulator.Emulated(mod)(*[a.copy() for a in arrays], out)
    return out


@needs_nvrtc
@needs_emulator
@pytest.mark.parametrize("case", CASES, ids=str)
def test_fallback_is_correct_on_the_emulator(case):
    x, w, xv, wv, expected, (stride, pad, dil) = _conv(case)
    with Target("cuda"):
        y = topi.cuda.conv2d_nchw_implicit_gemm(x, w, stride, pad, dil)
        s = topi.cuda.schedule_conv2d_nchw([y])
    np.testing.assert_allclose(_emulate(s, [x, w, y], [xv, wv]), expected, rtol=1e-4,
                               atol=1e-4)


def test_compute_equals_topi_nn_on_cpu():
    x, w, xv, wv, expected, (stride, pad, dil) = _conv(CASES[1])
    y = topi.cuda.conv2d_nchw_implicit_gemm(x, w, stride, pad, dil)
    s = te.create_schedule(y.op)
    f = kiln.build(s, [x, w, y], target="llvm")
    out = kiln.nd.empty(expected.shape)
    f(kiln.nd.array(xv), kiln.nd.array(wv), out)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@needs_nvrtc
@needs_emulator
def test_epilogue_reads_the_product_in_nchw_order():
    x, w, xv, wv, expected, (stride, pad, dil) = _conv(CASES[0])
    b = te.placeholder((8,), name="b")
    with Target("cuda"):
        y = topi.cuda.conv2d_nchw_implicit_gemm(x, w, stride, pad, dil)
        out = te.compute(y.shape, lambda n, f, i, j: te.max(y[n, f, i, j] + b[f], 0.0),
                         name="relu", tag="elemwise")
        s = topi.cuda.schedule_conv2d_nchw([out])
    bv = randn((8,), 3)
    got = _emulate(s, [x, w, b, out], [xv, wv, bv])
    np.testing.assert_allclose(got, np.maximum(expected + bv[:, None, None], 0), rtol=1e-4,
                               atol=1e-4)


@needs_nvrtc
@needs_emulator
@pytest.mark.slow
def test_sampled_configs_are_correct_on_the_emulator():
    x, w, xv, wv, expected, _ = _conv(CASES[0])
    task = autotvm.task.create(conv2d_gemm.CONV2D_GEMM, (x, w, 1, 1, 1, "float32"), "cuda")
    rng = np.random.default_rng(0)
    checked = 0
    for index in rng.permutation(len(task.config_space))[:40]:
        try:
            s, args = task.instantiate(task.config_space.get(int(index)))
        except autotvm.task.space.InstantiationError:
            continue
        np.testing.assert_allclose(_emulate(s, args, [xv, wv]), expected, rtol=1e-4,
                                   atol=1e-4, err_msg=str(index))
        checked += 1
        if checked == 4:
            break
    assert checked == 4


@pytest.mark.parametrize("rows, cols", [(64, 3136), (512, 49), (256, 196), (64, 50176),
                                        (512, 784), (3, 5)])
def test_fallback_tiles_divide_the_axes_and_fill_the_gpu(rows, cols):
    tiles = conv2d_gemm.fallback_tiles(rows, cols)
    ty, tx = math.prod(tiles["tile_y"][1:]), math.prod(tiles["tile_x"][1:])
    assert rows % ty == 0 and cols % tx == 0
    blocks = rows // ty * cols // tx
    assert blocks >= conv2d_gemm.MIN_BLOCKS or (ty <= 8 and tx <= 8)


def _record(template, x, w, stride):
    task = autotvm.task.create(template, (x, w, stride, (0, 0), (1, 1), "float32"), "cuda")
    return (MeasureInput(task.target, task, task.config_space.get(0)),
            MeasureResult((1e-3,), 0, 1.0, time.time()))


def test_relay_strategy_chooses_by_shape_then_by_tuning_records():
    x = te.placeholder((1, 8, 10, 10), name="x")
    w = te.placeholder((16, 8, 1, 1), name="w")

    def chosen(stride):
        y = strategy.cuda_conv2d_nchw(x, w, stride, (0, 0), (1, 1), "float32")
        return "implicit_gemm" if conv2d_gemm.is_implicit_gemm([y]) else y.op.tag

    with Target("cuda"):
        assert chosen((2, 2)) == "implicit_gemm"  # a strided 1x1 shortcut
        assert chosen((1, 1)) == "conv2d_nchw"  # few outputs, stride 1: direct
    direct = _record(topi.cuda.conv2d.CONV2D_NCHW, x, w, (2, 2))
    with autotvm.apply_history_best([direct]), Target("cuda"):
        assert chosen((2, 2)) == "conv2d_nchw"
    gemm = _record(conv2d_gemm.CONV2D_GEMM, x, w, (1, 1))
    with autotvm.apply_history_best([gemm]), Target("cuda"):
        assert chosen((1, 1)) == "implicit_gemm"


@pytest.mark.parametrize("shape, expected", [
    ((16, 64, 56, 56, 64, 3, 1, 1), True),  # batched 3x3
    ((1, 3, 224, 224, 64, 7, 2, 3), True),  # the stem
    ((1, 64, 56, 56, 64, 3, 1, 1), False),  # batch 1, stride 1
    ((1, 64, 56, 56, 128, 1, 2, 0), True),  # a 1x1 shortcut
    ((16, 16, 112, 112, 96, 1, 1, 0), False),  # a memory-bound pointwise layer
    ((16, 512, 14, 14, 512, 1, 1, 0), True),
    ((1, 576, 14, 14, 96, 1, 1, 0), True),  # few outputs, a long reduction
    ((1, 512, 14, 14, 512, 1, 1, 0), False),
])
def test_prefers_implicit_gemm(shape, expected):
    n, c, h, wd, f, k, stride, pad = shape
    x = te.placeholder((n, c, h, wd), name="x")
    w = te.placeholder((f, c, k, k), name="w")
    assert conv2d_gemm.prefers_implicit_gemm(x, w, stride, pad, 1) is expected


def test_the_template_is_registered_with_matmul_knobs():
    x = te.placeholder((1, 8, 10, 10), name="x")
    w = te.placeholder((16, 8, 3, 3), name="w")
    task = autotvm.task.create(conv2d_gemm.CONV2D_GEMM, (x, w, 1, 1, 1, "float32"), "cuda")
    assert {"tile_y", "tile_x", "tile_k"} <= set(task.config_space.space_map)
