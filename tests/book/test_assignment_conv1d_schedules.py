"""The course assignment's (seed 000) CPU conv1d optimizations, section B: the schedules of
examples/assignment/conv1d_cpu.py (baseline; split + vectorize; reorder + unroll; padding
stage + cache_read at k_out; all combined), each checked against np.convolve.

Sizes: M (the length of A) in {1, 10, 100, 1000, 10000} with N = 1024, and N (the length of
W) in the same set with M = 1024. Every build and run takes well under a second.
"""

import importlib.util
import platform
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import CompileError
from kiln.runtime.compiler import find_compiler
from tests.book._shared import load_example


ex = load_example("assignment", "conv1d_cpu")
TARGET = "llvm"
LENGTHS = (1, 10, 100, 1000, 10000)
SIZES = [(m, 1024) for m in LENGTHS] + [(1024, n) for n in LENGTHS]

# Cases that once hit kiln bugs (two copies of a peeled allocation in one C scope; a GCC 12
# if-conversion miscompilation of guarded loads), kept as regression tests.
REGRESSIONS = {("padded_cache", 1024, 10), ("optimized", 1024, 10), ("padded_cache", 7, 3),
               ("padded_cache", 3, 7), ("padded_cache", 37, 11), ("optimized", 37, 11)}


def case(variant, M, N):
    return pytest.param(variant, M, N, id=f"{variant}-M{M}-N{N}")


def check_conv1d(make, M, N):
    s, A, W, B = make(M, N)
    mod = tvm.build(s, [A, W, B], target=TARGET, name="conv1d")
    rng = np.random.default_rng(M * 100003 + N)
    a_np = rng.random(M, dtype=np.float32)
    w_np = rng.random(N, dtype=np.float32)
    dev = tvm.cpu(0)
    b = tvm.nd.array(np.zeros(M + N - 1, dtype="float32"), dev)
    mod(tvm.nd.array(a_np, dev), tvm.nd.array(w_np, dev), b)
    expected = np.convolve(a_np.astype(np.float64), w_np.astype(np.float64))
    np.testing.assert_allclose(b.asnumpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant, M, N",
                         [case(v, M, N) for v in ex.VARIANTS for M, N in SIZES])
def test_conv1d_variant(variant, M, N):
    check_conv1d(ex.VARIANTS[variant], M, N)


@pytest.mark.parametrize("variant, M, N", [case(v, M, N) for v in ex.VARIANTS
                                           for M, N in [(1, 1), (7, 3), (3, 7)]])
def test_conv1d_tiny(variant, M, N):
    """Sizes smaller than one split block."""
    check_conv1d(ex.VARIANTS[variant], M, N)


@pytest.mark.parametrize("variant, M, N", [case(v, 37, 11) for v in ex.VARIANTS
                                           if v != "baseline"])
def test_conv1d_other_factor(variant, M, N):
    """The factor is a parameter; 5 divides neither the output (47) nor the taps (11)."""
    make = ex.VARIANTS[variant]
    check_conv1d(lambda M, N: make(M, N, factor=5), M, N)


def lowered(variant, M=64, N=16):
    s, A, W, B = ex.VARIANTS[variant](M, N)
    return str(tvm.lower(s, [A, W, B], simple_mode=True))


def test_baseline_lowered(golden, lower_text):
    text = lowered("baseline")
    assert "for (n, 0, 79)" in text and "for (k, 0, 79)" in text
    assert "tvm_if_then_else(" in text
    golden("assignment_conv1d_baseline", text)


def test_split_vectorize_lowered(golden):
    text = lowered("split_vectorize")
    body = text[text.index("for (k, 0, 79)"):]
    assert "ramp(" in body or "vectorized (n.inner, 0, 8)" in body
    golden("assignment_conv1d_split_vectorize", text)


def test_reorder_unroll_lowered(golden):
    text = lowered("reorder_unroll")
    order = [text.index(h) for h in ("for (n.outer", "for (k.outer", "unrolled (k.inner, 0, 8)",
                                     "for (n.inner, 0, 8)")]
    assert order == sorted(order)
    golden("assignment_conv1d_reorder_unroll", text)


def test_padded_cache_lowered(golden):
    """The padding stage is computed first; the reduction covers the N = 16 taps only, with
    local copies of the A_Pad and W windows made in every k.outer iteration."""
    text = lowered("padded_cache")
    assert "allocate A_Pad[" in text and "produce A_Pad {" in text
    loop = text[text.index("for (k.outer, 0, 2)"):]
    assert "allocate A_Pad.local[" in loop and "allocate W.local[" in loop
    reduction = text[text.index("produce B {"):]
    assert "tvm_if_then_else" not in reduction
    golden("assignment_conv1d_padded_cache", text)


def test_optimized_lowered(golden):
    text = lowered("optimized")
    assert "parallel (n.outer" in text and "parallel (i.outer" in text
    assert "unrolled (k.inner, 0, 8)" in text
    assert "B[ramp(" in text
    golden("assignment_conv1d_optimized", text)
