"""The course assignment's (seed 000) CPU conv1d baseline, default schedule, target "llvm".

Full 1-D convolution of A (length M) with W (length N): B has M + N - 1 elements and
B[n] = sum_k A[k] * W[n - k], where the reduce axis k runs over all of 0 .. M + N - 2 and
an if_then_else zeroes the terms whose indices fall outside A or W. The guarded loads A[k]
and W[n - k] are out of bounds exactly when the condition is true, so this also checks that
the generated code evaluates only the branch taken. Reference: np.convolve.
The largest case is (M + N - 1)^2 ~ 1.2e8 guarded multiply-adds, well under a second compiled.
"""

import numpy as np
import pytest

import kiln as tvm
from kiln import te


def make_conv1d_cpu_scheduler(M: int, N: int):
    """The baseline as the course hands it out: returns ``s, A, W, B``."""
    A = te.placeholder((M,), name="A")
    W = te.placeholder((N,), name="W")
    k = te.reduce_axis((0, M + N - 1), "k")
    B = te.compute(
        (M + N - 1,),
        lambda n: te.sum(
            tvm.tir.if_then_else(
                tvm.tir.any(k < 0, k >= M, n - k < 0, n - k >= N),
                tvm.tir.const(0.0, "float32"),
                A[k] * W[n - k],
            ),
            axis=k,
        ),
        name="B",
    )
    s = te.create_schedule(B.op)
    return s, A, W, B


SIZES = (
    [(1, 1)]
    + [(m, 1024) for m in (1, 10, 100, 1000, 10000)]
    + [(1024, n) for n in (1, 10, 100, 1000, 10000)]
)


def check_conv1d(M: int, N: int, func=make_conv1d_cpu_scheduler) -> None:
    s, A, W, B = func(M, N)
    mod = tvm.build(s, [A, W, B], target="llvm", name="conv1d")
    rng = np.random.default_rng(M * 100003 + N)
    a_np = rng.random(M, dtype=np.float32)
    w_np = rng.random(N, dtype=np.float32)
    dev = tvm.cpu(0)
    a = tvm.nd.array(a_np, dev)
    w = tvm.nd.array(w_np, dev)
    b = tvm.nd.array(np.zeros(M + N - 1, dtype="float32"), dev)
    mod(a, w, b)
    expected = np.convolve(a_np.astype(np.float64), w_np.astype(np.float64))
    np.testing.assert_allclose(b.asnumpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("M, N", SIZES, ids=[f"M{m}-N{n}" for m, n in SIZES])
def test_conv1d_baseline(M, N):
    check_conv1d(M, N)


def test_conv1d_baseline_lowered(lower_text):
    s, A, W, B = make_conv1d_cpu_scheduler(10, 7)
    text = lower_text(s, [A, W, B])
    assert "produce B" in text
    assert "for (n, 0, 16)" in text and "for (k, 0, 16)" in text
    assert "if_then_else(" in text


def test_conv1d_te_spelling():
    """The same baseline written with te.if_then_else / te.any and a bare 0.0."""

    def make(M, N):
        A = te.placeholder((M,), name="A")
        W = te.placeholder((N,), name="W")
        k = te.reduce_axis((0, M + N - 1), "k")
        B = te.compute(
            (M + N - 1,),
            lambda n: te.sum(
                te.if_then_else(te.any(k < 0, k >= M, n - k < 0, n - k >= N), 0.0, A[k] * W[n - k]),
                axis=k,
            ),
            name="B",
        )
        return te.create_schedule(B.op), A, W, B

    check_conv1d(37, 5, make)
    check_conv1d(5, 37, make)
