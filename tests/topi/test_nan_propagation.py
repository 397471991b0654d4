"""Relu and Clip keep a NaN input NaN, as numpy, onnxruntime and PyTorch do (issue 25).

``tir.max``/``tir.min`` return their second operand on a NaN, so ``max(x, 0)`` would map a
NaN to 0; ``topi.nn.relu`` is ``max(0, x)`` and ``topi.clip`` ``min(hi, max(lo, x))``, ``x``
second. Checked on the vectorized x86 schedule (the generated C must stay vector code) and on
the CUDA schedule, its kernel run by the CPU emulator of tests/codegen/cuda_emulator.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi.x86._common import lanes
from tests.codegen import cuda_emulator
from tests.codegen.cuda_workloads import build_cuda

N = 96  # six AVX-512 float32 vectors; the NaNs sit in every lane position


def _input() -> np.ndarray:
    x = np.linspace(-8, 8, N, dtype="float32")
    x[1::7] = np.inf
    x[2::11] = -np.inf
    x[::5] = np.nan
    return x


def _cases():
    X = te.placeholder((N,), name="X")
    return X, [
        ("relu", topi.nn.relu(X), lambda x: np.maximum(x, 0)),
        ("clip", topi.clip(X, -0.5, 6.0), lambda x: np.clip(x, -0.5, 6.0)),
    ]


@pytest.mark.parametrize("which", ["relu", "clip"])
def test_x86_keeps_nan_and_stays_vectorized(which):
    X, cases = _cases()
    _, Y, ref = next(c for c in cases if c[0] == which)
    mod = kiln.build(topi.x86.schedule_injective([Y]), [X, Y], target="llvm")
    src = mod.get_source()
    assert f"float32x{lanes('float32')}" in src[:src.index("KILN_DLL int32_t")]
    x = _input()
    y = kiln.nd.empty((N,))
    mod(kiln.nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), ref(x))
    assert np.isnan(y.numpy()[::5]).all()


def test_clip_bounds_as_numpy():
    """``a_max`` wins where ``a_min > a_max`` (constant or run-time bounds), and a NaN bound
    is no bound, the input NaN still kept."""
    X = te.placeholder((N,), name="X")
    lo, hi = te.var("lo", "float32"), te.var("hi", "float32")
    Y = topi.clip(X, lo, hi)
    f = kiln.build(topi.x86.schedule_injective([Y]), [X, Y, lo, hi], target="llvm")
    x = _input()
    for a, b, want in ((5.0, 1.0, np.clip(x, 5.0, 1.0)), (np.nan, 1.0, np.minimum(x, 1.0)),
                       (-1.0, np.nan, np.maximum(x, -1.0))):
        y = kiln.nd.empty((N,))
        f(kiln.nd.array(x), y, a, b)
        np.testing.assert_array_equal(y.numpy(), want)
    Z = topi.clip(X, 5.0, 1.0)
    g = kiln.build(topi.x86.schedule_injective([Z]), [X, Z], target="llvm")
    z = kiln.nd.empty((N,))
    g(kiln.nd.array(x), z)
    np.testing.assert_array_equal(z.numpy(), np.clip(x, 5.0, 1.0))


def test_integer_relu_and_clip():
    X = te.placeholder((N,), name="X", dtype="int32")
    x = np.arange(-N // 2, N // 2, dtype="int32")
    for Y, want in ((topi.nn.relu(X), np.maximum(x, 0)), (topi.clip(X, -3, 7), np.clip(x, -3, 7))):
        mod = kiln.build(topi.x86.schedule_injective([Y]), [X, Y], target="llvm")
        y = kiln.nd.empty((N,), "int32")
        mod(kiln.nd.array(x), y)
        np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
@pytest.mark.parametrize("which", ["relu", "clip"])
def test_cuda_keeps_nan(which):
    X, cases = _cases()
    _, Y, ref = next(c for c in cases if c[0] == which)
    with kiln.target.Target("cuda -max_num_threads=32"):
        s = topi.cuda.schedule_injective([Y])
    mod = build_cuda(s, [X, Y], name=f"nan_{which}")
    x = _input()
    y = np.zeros(N, "float32")
    cuda_emulator.Emulated(mod)(x.copy(), y)
    np.testing.assert_array_equal(y, ref(x))
