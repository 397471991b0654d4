"""Book chapter 5: every GPU schedule of the chapter (examples/book/ch5_gpu.py).

Each schedule is lowered (the printed program checked against the book's: launch extents,
scopes, the vthread and cooperative-fetch structure), built for CUDA, compiled with NVRTC for
sm_80 and sm_90 where cuda-bindings are installed, run on the CPU emulator of
tests/codegen/cuda_emulator.py against numpy at reduced sizes, and run on ``cuda(0)`` when a
GPU is present (marker ``gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln.contrib import d2ltvm

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu
from ._shared import conv_reference, load_example

ch5 = load_example("book", "ch5_gpu")


def _windows(x, k, p, pad):
    padded = np.pad(x, ((0, 0), (p, p), (p, p)), constant_values=pad)
    return np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))


def _case_vector_add():
    a, b, c = d2ltvm.get_abc(300)
    return ch5.vector_add_parallel(300), [a, b, c], {2: a + b}


def _case_bcast(func):
    def case():
        a, b, c = d2ltvm.get_bcast_data((160, 1), (160, 160))
        return func(160), [a, b, c], {2: a + b}

    case.__name__ = f"_case_{func.__name__}"
    return case


def _case_matmul():
    a, b, c = d2ltvm.get_abc((128, 128))
    return ch5.matmul_gpu(128), [a, b, c], {2: a @ b}


def _case_conv(func, oc, ic, n):
    def case():
        x, w, y = d2ltvm.get_conv_data(oc, ic, n, 3, 1, 1)
        return func(oc, ic, n, 3, 1, 1), [x, w, y], {2: conv_reference(x, w, 1, 1)}

    case.__name__ = f"_case_{func.__name__}"
    return case


def _case_depthwise(func, c, n):
    def case():
        x, w, y = d2ltvm.get_conv_data(c, c, n, 3, 1, 1, conv_type="depthwise")
        ref = np.einsum("chwij,cij->chw", _windows(x, 3, 1, 0.0), w[:, 0])
        return func(c, n, 3, 1, 1), [x, w, y], {2: ref}

    case.__name__ = f"_case_{func.__name__}"
    return case


def _case_pool(kind):
    def case():
        x = np.random.default_rng(0).normal(size=(3, 20, 20)).astype("float32")
        y = np.empty_like(x)
        if kind == "max":
            ref = _windows(x, 3, 1, -np.inf).max(axis=(-2, -1))
            return ch5.pool_max((3, 20, 3)), [x, y], {1: ref}
        ref = _windows(x, 3, 1, 0.0).sum(axis=(-2, -1)) / 9
        return ch5.pool_avg((3, 20, 3)), [x, y], {1: ref}

    case.__name__ = f"_case_pool_{kind}"
    return case


def _case_bn(func):
    def case():
        x, mean, var, gamma, beta, y = d2ltvm.get_bn_data(4, 12)
        ref = (x - mean) / np.sqrt(var + 1e-5) * gamma + beta
        return func((4, 12)), [x, mean, var, gamma, beta, y], {5: ref}

    case.__name__ = f"_case_{func.__name__}"
    return case


CASES = [
    _case_vector_add, _case_bcast(ch5.bcast_continuous), _case_bcast(ch5.bcast_alternate),
    _case_matmul,
    _case_conv(ch5.conv_default, 8, 4, 16), _case_conv(ch5.conv_tiling, 32, 4, 64),
    _case_conv(ch5.conv_vthread, 32, 4, 64),
    _case_depthwise(ch5.depthwise_default, 3, 16), _case_depthwise(ch5.depthwise_schedule, 2, 64),
    _case_pool("max"), _case_pool("avg"), _case_bn(ch5.bn_default), _case_bn(ch5.bn_optimized),
]
IDS = [c.__name__[len("_case_"):] for c in CASES]


def _check(expected, arrays):
    for i, ref in expected.items():
        np.testing.assert_allclose(arrays[i], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_emulated(case):
    (sch, args), inputs, expected = case()
    mod = build_cuda(sch, list(args))
    arrays = [a.copy() for a in inputs]
    cuda_emulator.Emulated(mod)(*arrays)
    _check(expected, arrays)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gpu(case):
    (sch, args), inputs, expected = case()
    _check(expected, run_on_gpu(sch, args, inputs))


def _lowered(func, *size):
    sch, args = func(*size)
    return " ".join(str(tvm.lower(sch, args, simple_mode=True)).split())


def test_max_num_threads_read_the_books_way():
    assert ch5.nt == 1024
    with tvm.target.create("cuda"):
        assert tvm.target.Target.current(allow_none=False).thread_warp_size == 32
    assert tvm.target.Target.current() is None
    with pytest.raises(tvm.TVMError, match="no target is in scope"):
        tvm.target.Target.current(allow_none=False)


def test_lowered_programs_match_the_book():
    text = _lowered(ch5.vector_add_parallel, 256)
    assert "thread_extent = 4" in text and "thread_extent = 64" in text
    text = _lowered(ch5.bcast_alternate, 256)
    assert "thread_extent = 256" in text and "for (x.y.fused.outer, 0, 4)" in text
    text = _lowered(ch5.matmul_gpu, 2048)
    for alloc in ("allocate C.local[float32 * 32]", "allocate A.shared[float32 * 4096]",
                  "allocate B.shared[float32 * 2048]", "allocate A.shared.local[float32 * 8]",
                  "allocate B.shared.local[float32 * 4]"):
        assert alloc in text
    assert "for (k.outer, 0, 64)" in text
    text = _lowered(ch5.pool_max, (64, 64, 3))
    assert "thread_extent = 256" in text and "thread_extent = 1024" in text
    text = _lowered(ch5.pool_avg, (64, 64, 3))
    assert "allocate PoolSum[float32 * 1]" in text
    text = _lowered(ch5.bn_optimized, (32, 112))
    assert "thread_extent = 392" in text and "floordiv" in text
    text = _lowered(ch5.conv_vthread, 64, 64, 64, 3, 1, 1)
    assert "vthread" not in text  # injected: 2 virtual threads along ow share one CUDA thread
    assert "allocate Y.local[float32 * 64]" in text  # 32 accumulators per virtual thread
    assert "allocate PaddedX.shared" in text and "allocate K.shared" in text


def test_book_sizes_build_for_cuda():
    """The chapter's own sizes lower and generate CUDA (compiled where NVRTC is installed)."""
    for func, size in ch5.BOOK_SIZES.items():
        sch, args = func(*size)
        mod = build_cuda(sch, list(args), name=func.__name__)
        assert f"{func.__name__}_kernel0" in mod.imported_modules[0].get_source()
