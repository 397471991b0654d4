"""``create_fused_loop`` on CUDA: the fused loop bound to ``blockIdx.x`` is one kernel whose
blocks run the branches side by side (HFuse-style horizontal fusion).

The kernels are compiled with NVRTC where it is installed, run on kiln's CPU emulator of
generated kernels, and (marker ``gpu``) on a real GPU where there is one.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from kiln import te

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu

RNG = np.random.default_rng(18)


def _rand(*shape):
    return RNG.random(shape).astype("float32")


def _case_two_branches(interleave: int | None = None):
    """X (4, 64) and Y (8, 32): unequal extents and inner shapes, one row per block."""
    M = 4
    A = te.placeholder((M, 64), name="A")
    B = te.placeholder((2 * M, 32), name="B")
    X = te.compute(A.shape, lambda x, y: A[x, y] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: B[x, y] * 2, name="Y")
    Z = te.compute((M, 64), lambda x, y: X[x, y] + Y[2 * x + y // 32, y % 32], name="Z")
    s = te.create_schedule(Z.op)
    F, _ = s.create_fused_loop([[X], [Y]], [X, Y], [M, 2 * M], interleave=interleave)
    s[F].bind(F.op.loop_axis, te.thread_axis("blockIdx.x"))
    s[X].bind(X.op.axis[1], te.thread_axis("threadIdx.x"))
    s[Y].bind(Y.op.axis[1], te.thread_axis("threadIdx.x"))
    zo, zi = s[Z].split(s[Z].fuse(*Z.op.axis), factor=64)
    s[Z].bind(zo, te.thread_axis("blockIdx.x"))
    s[Z].bind(zi, te.thread_axis("threadIdx.x"))
    a, b = _rand(M, 64), _rand(2 * M, 32)
    inputs = [a, b, np.zeros((M, 64), "float32")]
    return (s, [A, B, Z]), inputs, {2: a + 1 + (b * 2).reshape(M, 64)}


def _case_two_branches_interleaved():
    """The two branches with their rows interleaved in blocks of 2 (blocks X0 X1 Y0 Y1 X2 X3
    Y2 Y3, then Y4 .. Y7)."""
    return _case_two_branches(interleave=2)


def _case_three_branches_with_a_reduction():
    """A row sum (5, 32) over k, an element-wise (6, 16) and a split fused loop (2 rows per
    block, 11 rows: the last block overruns)."""
    K = 8
    A = te.placeholder((5, 32, K), name="A")
    B = te.placeholder((6, 16), name="B")
    C = te.placeholder((6, 16), name="C")
    k = te.reduce_axis((0, K), name="k")
    R = te.compute((5, 32), lambda x, y: te.sum(A[x, y, k], axis=k), name="R")
    X = te.compute(B.shape, lambda x, y: B[x, y] - 1, name="X")
    Y = te.compute(C.shape, lambda x, y: C[x, y] * 3, name="Y")
    Z = te.compute((5, 16), lambda x, y: R[x, 2 * y] + X[x, y] + Y[x + 1, y], name="Z")
    s = te.create_schedule(Z.op)
    F, _, _ = s.create_fused_loop([[R], [X], [Y]], [R, X, Y], [5, 6, 6])
    bx, vx = s[F].split(F.op.loop_axis, factor=2)
    s[F].bind(bx, te.thread_axis("blockIdx.x"))
    for T in (R, X, Y):
        s[T].bind(T.op.axis[1], te.thread_axis("threadIdx.x"))
    s[Z].bind(Z.op.axis[0], te.thread_axis("blockIdx.x"))
    s[Z].bind(Z.op.axis[1], te.thread_axis("threadIdx.x"))
    a, b, c = _rand(5, 32, K), _rand(6, 16), _rand(6, 16)
    ref = a.sum(-1)[:, ::2] + (b[:5] - 1) + c[1:] * 3
    return (s, [A, B, C, Z]), [a, b, c, np.zeros((5, 16), "float32")], {3: ref}


CASES = [_case_two_branches, _case_two_branches_interleaved,
         _case_three_branches_with_a_reduction]
IDS = [c.__name__[len("_case_"):] for c in CASES]


def _check(expected, arrays):
    for i, ref in expected.items():
        np.testing.assert_allclose(arrays[i], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_branches_share_one_kernel(case):
    (s, args), _, _ = case()
    src = build_cuda(s, args, name="hfuse").imported_modules[0].get_source()
    kernels = re.split(r'extern "C" __global__', src)[1:]
    fused = [k for k in kernels if "fused_v0[" in k and "= (" in k.split("fused_v0[", 1)[1]]
    assert len(kernels) == 2 and len(fused) == 1  # the fused loop, then the consumer
    assert all(f"fused_v{i}[" in fused[0] for i in range(len(args) - 2))


@pytest.mark.slow  # compiling the emulated kernels with g++ takes seconds
@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_emulated(case):
    (s, args), inputs, expected = case()
    arrays = [a.copy() for a in inputs]
    cuda_emulator.Emulated(build_cuda(s, args, name="hfuse"))(*arrays)
    _check(expected, arrays)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gpu(case):
    (s, args), inputs, expected = case()
    _check(expected, run_on_gpu(s, args, inputs))
