"""topi.fast_exp / fast_erf / fast_tanh (kiln.topi.fast_math) against scipy over a dense
grid with the tails, their NaN and infinity values, the vector code the C compiler gets, and
``tir.reinterpret``; fast_softmax and GELU on the x86 schedules against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

import kiln
from kiln import te, tir, topi
from kiln.target import Target
from kiln.topi.x86._common import lanes

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda
from .common import check

#: the float32 grid: 2**18 points on [-12, 12] (erf and tanh saturate from 4 and 9 on)
GRID = np.linspace(-12.0, 12.0, 1 << 18, dtype=np.float32)
SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-30, 3e38, -3e38],
                   np.float32)


def _run_vectorized(f, x: np.ndarray) -> tuple[np.ndarray, str]:
    """``f`` over ``x`` with its loop vectorized by the target's lanes; (result, C source)."""
    A = te.placeholder(x.shape, name="A")
    B = f(A)
    s = te.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=lanes("float32"))
    s[B].vectorize(xi)
    mod = kiln.build(s, [A, B], "llvm")
    b = kiln.nd.array(np.zeros_like(x))
    mod(kiln.nd.array(x), b)
    return b.numpy(), mod.get_source()


@pytest.mark.parametrize("f, ref", [(topi.fast_erf, special.erf), (topi.fast_tanh, np.tanh)])
def test_erf_and_tanh_within_1e6_on_the_real_line(f, ref):
    y, src = _run_vectorized(f, GRID)
    assert np.abs(y - ref(GRID.astype(np.float64))).max() <= 1e-6
    # the whole loop is vector code: no libm call, no scalar loop left for the C compiler
    assert "erff(" not in src and "tanhf(" not in src and "#pragma GCC ivdep" not in src
    special_y, _ = _run_vectorized(f, SPECIAL)
    np.testing.assert_array_equal(special_y[:2], [1.0, -1.0])  # +-inf -> +-1
    assert np.isnan(special_y[2])
    np.testing.assert_allclose(special_y[3:], ref(SPECIAL[3:].astype(np.float64)), rtol=1e-6)
    assert np.signbit(special_y[4]) and not np.signbit(special_y[3])  # -0 stays -0


def test_erf_against_math_erf_near_zero_and_in_the_tails():
    x = np.concatenate([np.geomspace(1e-8, 6, 20001, dtype=np.float32),
                        -np.geomspace(1e-8, 6, 20001, dtype=np.float32)])
    y, _ = _run_vectorized(topi.fast_erf, x)
    ref = np.array([math.erf(float(v)) for v in x])
    assert np.abs(y - ref).max() <= 1e-6


def test_exp_relative_error_and_its_range_ends():
    x = np.linspace(-87.3, 88.0, 1 << 18, dtype=np.float32)
    y, src = _run_vectorized(topi.fast_exp, x)
    ref = np.exp(x.astype(np.float64))
    assert (np.abs(y - ref) / ref).max() < 2e-7
    assert "expf(" not in src and "#pragma GCC ivdep" not in src
    ends, _ = _run_vectorized(topi.fast_exp, np.array([-np.inf, -100, 100, np.inf, np.nan],
                                                      np.float32))
    np.testing.assert_array_equal(ends[:2], [0.0, 0.0])  # flushed below about -87.68
    np.testing.assert_allclose(ends[2:4], np.exp(np.float64(88.0)), rtol=1e-6)  # saturates
    assert np.isnan(ends[4])


def test_float64_keeps_the_exact_functions():
    x = te.placeholder((4,), "float64", name="x")
    assert "erf" in str(topi.fast_erf(x).op.body[0]) and topi.fast_exp(x).dtype == "float64"


def test_reinterpret_reads_the_bits():
    k = te.placeholder((8,), "int32", name="k")
    two_k = te.compute((8,), lambda i: tir.reinterpret("float32", (k[i] + 127) * (1 << 23)),
                       name="two_k")
    for vector in (False, True):
        s = te.create_schedule(two_k.op)
        if vector:
            s[two_k].vectorize(two_k.op.axis[0])
        mod = kiln.build(s, [k, two_k], "llvm")
        out = kiln.nd.array(np.zeros(8, np.float32))
        mod(kiln.nd.array(np.arange(-3, 5, dtype=np.int32)), out)
        np.testing.assert_array_equal(out.numpy(), 2.0 ** np.arange(-3, 5))
    with pytest.raises(TypeError, match="differ in width"):
        tir.reinterpret("float64", tir.const(1, "int32"))


@pytest.mark.slow
@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_cuda_kernel_of_fast_exp_and_erf():
    """NVRTC compiles the bit cast (where installed); the kernel's values on the emulator."""
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: topi.fast_math.fast_exp_expr(A[i])
                   + topi.fast_math.fast_erf_expr(A[i]), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    x = np.linspace(-5, 5, 256, dtype=np.float32)
    b = np.zeros(256, np.float32)
    cuda_emulator.Emulated(build_cuda(s, [A, B]))(x.copy(), b)
    np.testing.assert_allclose(b, np.exp(x) + special.erf(x), rtol=2e-7, atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 128), (2, 3, 40, 64), (5, 37), (4, 8)])
def test_fast_softmax_against_numpy(shape):
    x = (np.random.default_rng(0).standard_normal(shape) * 4).astype(np.float32)
    x[(0,) * len(shape)] = -np.inf  # a masked position
    X = te.placeholder(shape, name="X")
    check("schedule_softmax", topi.nn.fast_softmax(X, -1), [X], [x],
          special.softmax(x.astype(np.float64), axis=-1), rtol=1e-5, atol=1e-6)


def test_softmax_row_is_vector_code():
    """max, exp, sum and the normalization of a 128-wide row: vector stages, no expf."""
    X = te.placeholder((4, 128), name="X")
    Y = topi.nn.fast_softmax(X, -1)
    with Target("llvm"):
        s = topi.x86.schedule_softmax(Y)
    src = kiln.build(s, [X, Y], "llvm").get_source()
    assert "expf(" not in src
    assert "T_softmax_maxelem_rf" in src and "T_softmax_expsum_rf" in src


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_within_1e6(approximate):
    x = np.linspace(-10, 10, 4096, dtype=np.float32).reshape(64, 64)
    xd = x.astype(np.float64)
    if approximate == "none":
        ref = 0.5 * xd * (1 + special.erf(xd / math.sqrt(2)))
    else:
        ref = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
    X = te.placeholder(x.shape, name="X")
    check("schedule_injective", topi.nn.gelu(X, approximate), [X], [x], ref, rtol=0,
          atol=1e-5)
