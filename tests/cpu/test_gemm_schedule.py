"""Correctness of examples/cpu/gemm.py (``gemm_schedule``): packed, register-tiled fp32 GEMM.

Small sizes only, including sizes that are not multiples of the tiles; no timings here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kiln

GEMM = Path(__file__).resolve().parents[2] / "examples" / "cpu" / "gemm.py"


def _example():
    spec = importlib.util.spec_from_file_location("kiln_example_cpu_gemm", GEMM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ex = _example()


def _check(N, M=None, K=None, **kw):
    M = N if M is None else M
    K = N if K is None else K
    s, (A, B, C) = ex.gemm_schedule(N, M=M, K=K, **kw)
    mod = kiln.build(s, [A, B, C], "llvm")
    rng = np.random.default_rng(N * 131 + M * 7 + K)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    c = kiln.nd.array(np.full((M, N), np.nan, "float32"))
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4 * K)
    return mod


@pytest.mark.parametrize("n", [1, 7, 16, 33, 64, 100, 130])
def test_square_default_schedule(n):
    _check(n)


@pytest.mark.parametrize("kw", [
    dict(mr=8, bn=32),
    dict(mr=6, bn=48, pack_a=True, pack_b_in_panel=False),
    dict(mr=5, bn=32, pack_a=True),
    dict(mr=4, bn=48, ku=8),
    dict(mr=6, bn=64, pack_a=False),
    dict(mr=3, bn=16, ku=3),
])
def test_other_tiles(kw):
    _check(70, **kw)


@pytest.mark.parametrize("mnk", [(17, 45, 9), (96, 64, 128), (5, 200, 31)])
def test_rectangular(mnk):
    m, n, k = mnk
    _check(n, M=m, K=k)


def test_structure_of_lowered_program():
    s, args = ex.gemm_schedule(128)
    text = " ".join(str(kiln.lower(s, args, simple_mode=True)).split())
    assert "produce PB" in text and "produce PA" not in text
    assert "C.local" in text
    # B is packed inside the parallel panel loop: one OpenMP region per call
    assert text.index("parallel (j.outer") < text.index("produce PB")
    assert text.count("parallel (") == 1
    s, args = ex.gemm_schedule(128, pack_a=True, pack_b_in_panel=False)
    text = " ".join(str(kiln.lower(s, args, simple_mode=True)).split())
    assert "produce PA" in text and text.index("produce PB") < text.index("produce C")
    assert "parallel (j.outer" in text
    # the register tile works on machine vectors of 16 lanes
    assert "ramp(" in text and ", 1, 16)" in text


def test_padded_columns_use_copy_stage():
    # N not a multiple of bn: the kernel runs on a zero-padded product, no lane guards
    s, args = ex.gemm_schedule(40, bn=32)
    text = " ".join(str(kiln.lower(s, args, simple_mode=True)).split())
    assert "produce Cpad" in text
    _check(40, bn=32)


def test_source_has_omp_and_vectors():
    s, args = ex.gemm_schedule(128)
    src = kiln.build(s, args, "llvm").get_source()
    assert "#pragma omp parallel for" in src
    assert "float32x16" in src
