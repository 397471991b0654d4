"""topi.x86's injective schedule over a symbolic innermost axis (a transpose over a dynamic
sequence length, docs/dynamic.md): one build run at every edge size of the vector width
against numpy, whole vectors guard-free and one parallel loop."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.target import Target
from kiln.topi.x86._common import lanes

from .common import randn


def _edge_sizes() -> list[int]:
    """0, 1, one less than, equal to and one more than the vector width, and a large size
    with a tail."""
    w = lanes("float32")
    return sorted({0, 1, w - 1, w, w + 1, 31 * w + 3})


@pytest.fixture(scope="module")
def transpose_kt():
    """``(lowered text, module)`` of attention's ``kᵀ``: ``[n, 64] -> [64, n]`` (one build)."""
    n = te.var("n")
    K = te.placeholder((n, 64), name="K")
    T = topi.transpose(K, (1, 0))
    with Target("llvm"):
        s = topi.x86.schedule_injective(T)
        return str(kiln.lower(s, [K, T], simple_mode=True)), kiln.build(s, [K, T], "llvm")


def test_symbolic_transpose_matches_numpy_at_every_edge_size(transpose_kt):
    mod = transpose_kt[1]
    for size in _edge_sizes():
        k = randn((size, 64), size)
        out = kiln.nd.array(np.zeros((64, size), np.float32))
        mod(kiln.nd.array(k), out)
        np.testing.assert_array_equal(out.numpy(), k.T, err_msg=f"n = {size}")


def test_symbolic_transpose_is_vector_code_in_one_parallel_loop(transpose_kt):
    """The symbolic row is whole vectors (a ``ramp`` store, no guard) and a remainder loop
    bounded by ``n``, inside one parallel loop over the 64 static rows."""
    text = transpose_kt[0]
    assert text.count("parallel (") == 1
    assert "T_transpose[ramp(" in text
    assert "likely" not in text


def test_symbolic_elementwise_matches_numpy_at_every_edge_size():
    """An elementwise stage whose every axis is symbolic: the same split of the innermost."""
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    B = topi.add(topi.multiply(A, 2.0), 1.0)
    with Target("llvm"):
        s = topi.x86.schedule_injective(B)
        mod = kiln.build(s, [A, B], "llvm")
    for size in _edge_sizes():
        a = randn((3, size), size)
        out = kiln.nd.array(np.zeros((3, size), np.float32))
        mod(kiln.nd.array(a), out)
        np.testing.assert_allclose(out.numpy(), a * 2 + 1, rtol=1e-6, err_msg=f"n = {size}")
