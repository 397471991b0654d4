"""topi.cuda's own schedules (depthwise convolution, reductions, pooling, softmax) and the
candidates of benchmarks/gpu_sweep.py.

Every schedule is built for ``cuda -arch=sm_90`` (compiled with NVRTC where cuda-bindings are
installed) and run on the CPU emulator of tests/codegen/cuda_emulator.py against numpy at
small sizes; the ``gpu``-marked tests run the same on ``cuda(0)`` (skipped without one). The
GEMM candidates (examples/assignment/gemm_gpu.py's VARIANTS) are checked the same way in
tests/book/test_assignment_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi.cuda import depthwise as cuda_depthwise

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu
from . import ref
from .common import randn

needs_emulator = pytest.mark.skipif(not cuda_emulator.available(),
                                    reason="g++ is needed to emulate kernels")


def _emulate(s, inputs: list[te.Tensor], out: te.Tensor, arrays: list[np.ndarray]
             ) -> np.ndarray:
    mod = build_cuda(s, [*inputs, out], target="cuda -arch=sm_90")
    result = np.zeros([int(d) for d in out.shape], dtype=out.dtype)
    cuda_emulator.Emulated(mod)(*[a.copy() for a in arrays], result)
    return result


def _kernels(s, args) -> int:
    mod = build_cuda(s, args, target="cuda -arch=sm_90")
    return mod.imported_modules[0].get_source().count("__global__")


# ---- depthwise convolution ------------------------------------------------------------------
# (batch, channels, multiplier, size, kernel, stride, padding, dilation)
DEPTHWISE_CASES = [
    (1, 3, 1, 14, 3, 1, 1, 1),
    (1, 4, 1, 20, 3, 1, 1, 1),
    (2, 3, 1, 17, 3, 2, 1, 1),
    (1, 6, 2, 13, 3, 2, 1, 1),
    (2, 4, 1, 9, 3, 1, 0, 2),
    (1, 3, 1, 7, 5, 1, 2, 1),
]


def _depthwise(n, c, m, h, k, stride, pad, dil, epilogue=False):
    X = te.placeholder((n, c, h, h), name="X")
    W = te.placeholder((c, m, k, k), name="W")
    Y = topi.nn.depthwise_conv2d_nchw(X, W, stride, pad, dil)
    x, w = randn((n, c, h, h), 1), randn((c, m, k, k), 2)
    expected = ref.depthwise_conv2d_nchw(x, w, stride, pad, dil)
    if not epilogue:
        return Y, [X, W], [x, w], expected
    B = te.placeholder((c * m,), name="B")
    out = te.compute(Y.shape, lambda b, ch, i, j: te.max(Y[b, ch, i, j] + B[ch], 0.0),
                     name="relu", tag="elemwise")
    bias = randn((c * m,), 3)
    return out, [X, W, B], [x, w, bias], np.maximum(expected + bias[:, None, None], 0)


@needs_emulator
@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=str)
def test_depthwise_emulated(case):
    out, inputs, arrays, expected = _depthwise(*case)
    s = topi.cuda.schedule_depthwise_conv2d_nchw(out)
    np.testing.assert_allclose(_emulate(s, inputs, out, arrays), expected, rtol=1e-4,
                               atol=1e-4)


@needs_emulator
def test_depthwise_fuses_an_epilogue_into_one_kernel():
    out, inputs, arrays, expected = _depthwise(1, 4, 1, 12, 3, 1, 1, 1, epilogue=True)
    s = topi.cuda.schedule_depthwise_conv2d_nchw(out)
    assert _kernels(s, [*inputs, out]) == 1
    np.testing.assert_allclose(_emulate(s, inputs, out, arrays), expected, rtol=1e-4,
                               atol=1e-4)


def _sweep_configs():
    from benchmarks import gpu_sweep

    return [(hw, name, cfg) for hw, configs in gpu_sweep.DEPTHWISE_CONFIGS.items()
            for name, cfg in configs.items()]


@pytest.mark.slow
@needs_emulator
@pytest.mark.parametrize("hw, name, config", _sweep_configs(), ids=lambda v: str(v)[:20])
def test_depthwise_sweep_configs_emulated(hw, name, config):
    out, inputs, arrays, expected = _depthwise(1, 3, 1, hw, 3, 1, 1, 1)
    s = topi.cuda.schedule_depthwise_conv2d_nchw(out, config)
    np.testing.assert_allclose(_emulate(s, inputs, out, arrays), expected, rtol=1e-4,
                               atol=1e-4, err_msg=name)


def test_depthwise_default_tiles_divide_mobilenet_maps():
    assert cuda_depthwise.default_config(56, 56) == {"tile_h": 8, "tile_w": 56, "per_h": 2,
                                                     "per_w": 2, "channels": 1}
    assert cuda_depthwise.default_config(14, 14) == {"tile_h": 14, "tile_w": 14, "per_h": 2,
                                                     "per_w": 2, "channels": 2}
    for size in (112, 56, 28, 14, 7):
        cfg = cuda_depthwise.default_config(size, size)
        assert size % cfg["tile_h"] == 0 and size % cfg["tile_w"] == 0
        assert cfg["tile_h"] % cfg["per_h"] == 0 and cfg["tile_w"] % cfg["per_w"] == 0


def test_depthwise_reads_a_padded_window_from_shared_memory():
    out, inputs, _, _ = _depthwise(1, 256, 1, 56, 3, 1, 1, 1)
    s = topi.cuda.schedule_depthwise_conv2d_nchw(out)
    text = str(kiln.lower(s, [*inputs, out], simple_mode=True))
    assert "PaddedInput.shared[float32 * 580]" in text  # (8 + 2) x (56 + 2)
    assert "DepthwiseConv2d.local[float32 * 4]" in text  # 2 x 2 outputs per thread


# ---- reductions, pooling, softmax -----------------------------------------------------------
REDUCE_CASES = {
    "sum-last-block": ((3, 1000), lambda x: topi.sum(x, axis=1), lambda a: a.sum(1)),
    "max-axes-keepdims-block": ((2, 5, 300), lambda x: topi.max(x, axis=(0, 2), keepdims=True),
                                lambda a: a.max((0, 2), keepdims=True)),
    "mean-block": ((4, 700), lambda x: topi.mean(x, axis=1), lambda a: a.mean(1)),
    "sum-short-per-thread": ((6, 20), lambda x: topi.sum(x, axis=1), lambda a: a.sum(1)),
    "global-avg-pool-block": ((2, 6, 20, 20), lambda x: topi.nn.global_pool(x, "avg"),
                              lambda a: a.mean((2, 3), keepdims=True)),
    "global-max-pool-7x7": ((2, 6, 7, 7), lambda x: topi.nn.global_pool(x, "max"),
                            lambda a: a.max((2, 3), keepdims=True)),
    "adaptive-avg-pool": ((1, 4, 30, 30), lambda x: topi.nn.adaptive_pool(x, (1, 1), "avg"),
                          lambda a: ref.adaptive_pool_nchw(a, (1, 1), "avg")),
}


@needs_emulator
@pytest.mark.parametrize("name", list(REDUCE_CASES))
def test_reduce_emulated(name):
    shape, op, expected = REDUCE_CASES[name]
    x = te.placeholder(shape, name="x")
    out = op(x)
    schedule = (topi.cuda.schedule_adaptive_pool if "pool" in name
                else topi.cuda.schedule_reduce)
    a = randn(shape, 4)
    got = _emulate(schedule(out), [x], out, [a])
    np.testing.assert_allclose(got, expected(a), rtol=1e-4, atol=1e-4)


@needs_emulator
def test_argmax_stays_one_thread_per_output():
    x = te.placeholder((4, 300), name="x")
    out = topi.argmax(x, axis=1)
    a = randn((4, 300), 5)
    np.testing.assert_array_equal(_emulate(topi.cuda.schedule_reduce(out), [x], out, [a]),
                                  a.argmax(1))


@needs_emulator
@pytest.mark.parametrize("shape, pool_type", [((1, 4, 15, 15), "max"), ((2, 3, 8, 8), "avg")])
def test_pool_emulated(shape, pool_type):
    x = te.placeholder(shape, name="x")
    out = topi.nn.pool2d(x, 3, 2, 1, (1, 1, 1, 1), pool_type)
    a = randn(shape, 6)
    expected = ref.pool2d_nchw(a, 3, 2, 1, (1, 1, 1, 1), pool_type)
    np.testing.assert_allclose(_emulate(topi.cuda.schedule_pool(out, "NCHW"), [x], out, [a]),
                               expected, rtol=1e-4, atol=1e-4)


def _softmax_ref(a, axis=-1):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


SOFTMAX_CASES = {
    "rows-block": ((3, 1000), topi.nn.softmax, _softmax_ref, 1),
    "vector-block": ((1000,), topi.nn.softmax, _softmax_ref, 1),
    "log-3d-block": ((2, 3, 200), topi.nn.log_softmax, lambda a: np.log(_softmax_ref(a)), 1),
    "short-per-thread": ((2, 10), topi.nn.softmax, _softmax_ref, 4),
    "inner-axis-per-thread": ((4, 200, 3), lambda x: topi.nn.softmax(x, axis=1),
                              lambda a: _softmax_ref(a, 1), 4),
}


@needs_emulator
@pytest.mark.parametrize("name", list(SOFTMAX_CASES))
def test_softmax_emulated(name):
    shape, op, expected, kernels = SOFTMAX_CASES[name]
    x = te.placeholder(shape, name="x")
    out = op(x)
    s = topi.cuda.schedule_softmax(out)
    assert _kernels(s, [x, out]) == kernels
    a = randn(shape, 7)
    np.testing.assert_allclose(_emulate(s, [x], out, [a]), expected(a), rtol=1e-5, atol=1e-6)


def test_gpu_sweep_candidates_exist():
    from benchmarks import gpu_sweep
    from benchmarks.common import load_example

    variants = load_example("assignment", "gemm_gpu").VARIANTS
    assert set(gpu_sweep.POINTWISE_GEMMS) | set(gpu_sweep.SGEMM_VARIANTS) <= set(variants)
    for _, hw, stride in gpu_sweep.DEPTHWISE_CASES:
        assert hw // stride in gpu_sweep.DEPTHWISE_CONFIGS


# ---- on a GPU -------------------------------------------------------------------------------
GPU_CASES = {
    "depthwise-256x56": lambda: _depthwise(1, 256, 1, 56, 3, 1, 1, 1),
    "depthwise-512x14-s2": lambda: _depthwise(1, 512, 1, 14, 3, 2, 1, 1),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GPU_CASES))
def test_gpu_depthwise(name):
    out, inputs, arrays, expected = GPU_CASES[name]()
    s = topi.cuda.schedule_depthwise_conv2d_nchw(out)
    zeros = np.zeros(expected.shape, "float32")
    got = run_on_gpu(s, [*inputs, out], [*arrays, zeros])[-1]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_softmax_and_reduce():
    x = te.placeholder((16, 1000), name="x")
    a = randn((16, 1000), 8)
    for out, schedule, expected in ((topi.nn.softmax(x), topi.cuda.schedule_softmax,
                                     _softmax_ref(a)),
                                    (topi.sum(x, axis=1), topi.cuda.schedule_reduce,
                                     a.sum(1))):
        zeros = np.zeros(expected.shape, "float32")
        got = run_on_gpu(schedule(out), [x, out], [a, zeros])[-1]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
