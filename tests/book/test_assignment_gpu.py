"""The assignment's GPU operators (examples/assignment/*_gpu.py): conv1d, GEMM, depthwise conv2d.

Every variant is built for CUDA (compiled with NVRTC for sm_80 and sm_90 where cuda-bindings
are installed), run on the CPU emulator of tests/codegen/cuda_emulator.py against numpy over
sizes that divide no tile, and run on ``cuda(0)`` when a GPU is present (marker ``gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu
from ._shared import load_example

conv1d = load_example("assignment", "conv1d_gpu")
gemm = load_example("assignment", "gemm_gpu")
dwsp = load_example("assignment", "dwsp_conv2d_gpu")
RNG = np.random.default_rng(0)


def _rand(*shape):
    return RNG.normal(size=shape).astype("float32")


def _conv1d_case(variant, M, N):
    a, w = _rand(M), _rand(N)
    s, A, W, B = conv1d.VARIANTS[variant](M, N)
    return s, [A, W, B], [a, w, np.zeros(M + N - 1, "float32")], {2: np.convolve(a, w)}


def _gemm_case(variant, M, K, N):
    a, b = _rand(M, K), _rand(K, N)
    s, A, B, C = gemm.VARIANTS[variant](M, K, N)
    return s, [A, B, C], [a, b, np.zeros((M, N), "float32")], {2: a @ b}


def _dwsp_reference(x, w):
    k = w.shape[-1]
    p = k // 2
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    win = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
    return np.einsum("bchwij,cij->bchw", win, w[:, 0])


def _dwsp_case(variant, B, C, H, W, K):
    x, w = _rand(B, C, H, W), _rand(C, 1, K, K)
    ref = _dwsp_reference(x, w)
    s, inp, ker, out = dwsp.VARIANTS[variant](B, C, H, W, K)
    return s, [inp, ker, out], [x, w, np.zeros(ref.shape, "float32")], {2: ref}


CASES = {
    **{f"conv1d-{v}-{m}x{n}": (_conv1d_case, v, m, n)
       for v in conv1d.VARIANTS for m, n in ((1, 1), (100, 10), (1000, 100), (10, 300))},
    **{f"gemm-{v}-{m}x{k}x{n}": (_gemm_case, v, m, k, n)
       for v in gemm.VARIANTS for m, k, n in ((64, 64, 64), (100, 37, 77))},
    **{f"dwsp-{v}-{b}x{c}x{h}x{w}k{k}": (_dwsp_case, v, b, c, h, w, k)
       for v in dwsp.VARIANTS for b, c, h, w, k in ((1, 3, 16, 16, 3), (2, 2, 40, 33, 5),
                                                    (1, 1, 7, 7, 4))},
}


def _make(name):
    make, *size = CASES[name]
    return make(*size)


def _check(expected, arrays):
    for i, ref in expected.items():
        np.testing.assert_allclose(arrays[i], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
@pytest.mark.parametrize("name", list(CASES))
def test_emulated(name):
    s, args, inputs, expected = _make(name)
    mod = build_cuda(s, args)
    arrays = [a.copy() for a in inputs]
    cuda_emulator.Emulated(mod)(*arrays)
    _check(expected, arrays)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_gpu(name):
    s, args, inputs, expected = _make(name)
    _check(expected, run_on_gpu(s, args, inputs))


def test_optimized_schedules_use_shared_and_local_memory(lower_text):
    s, A, W, B = conv1d.make_conv1d_gpu_scheduler(4096, 128)
    text = lower_text(s, [A, W, B])
    assert "allocate Apad.shared" in text and "allocate W.shared" in text
    assert "allocate B.local[float32 * 8]" in text  # 8 outputs a thread, 128 apart
    s, A, B, C = gemm.make_gemm_gpu_scheduler(1024, 1024, 1024)
    text = lower_text(s, [A, B, C])
    for alloc in ("C.local[float32 * 16]", "A.shared[float32 * 1024]",
                  "B.shared[float32 * 1024]", "A.shared.local[float32 * 4]"):
        assert f"allocate {alloc}" in text
    s, inp, ker, out = dwsp.make_dwsp_conv2d_gpu_scheduler(1, 32, 112, 112, 3)
    text = lower_text(s, [inp, ker, out])
    assert "allocate inp_pad.shared[float32 * 1156]" in text  # (32 + 2) ** 2
    assert "allocate ker.shared[float32 * 9]" in text


def test_baseline_without_binding_is_refused():
    """The student's first conv1d 'errored out due to a lack of binding': kiln says why."""
    A, W, B = conv1d.conv1d_full(100, 10)
    s = tvm.te.create_schedule(B.op)
    with pytest.raises(tvm.TVMError, match="forget to bind"):
        tvm.build(s, [A, W, B], "cuda")
