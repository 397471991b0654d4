"""Book §4.6 "Improve Cache Efficiency by Blocking": blocked matmul (``block``) and blocked
matmul with a local write cache (``cached_block``) from examples/book/ch4_6_blocking.py.

Besides the numbers and the pinned lowered code, the structure the book points out in
``cached_block(512)`` is asserted: a parallel loop over the 256 fused blocks, the 32 x 32
local cache allocated inside it, the tk = 4 inner reduction loop unrolled, and ramp vector
accesses of width 32 inside that.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm
from tests.book._shared import load_example


ex = load_example("book", "ch4_6_blocking")
TARGET = "llvm"


def block_of(text: str, header: str) -> str:
    """The lines of the loop/allocation block whose first line contains ``header`` (that
    line included), found by indentation in the printed IR."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if header in line:
            indent = len(line) - len(line.lstrip())
            body = [line]
            for nxt in lines[i + 1:]:
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                body.append(nxt)
            return "\n".join(body)
    raise AssertionError(f"no line containing {header!r} in:\n{text}")


def check_matmul(func, n, **tiles):
    s, (A, B, C) = func(n, **tiles)
    mod = tvm.build(s, [A, B, C], TARGET)
    a, b, c = d2ltvm.get_abc((n, n), tvm.nd.array)
    mod(a, b, c)
    expected = a.asnumpy().astype(np.float64) @ b.asnumpy().astype(np.float64)
    np.testing.assert_allclose(c.asnumpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [64, 127])
def test_block_runs(n):
    check_matmul(ex.block, n)


@pytest.mark.parametrize("n", [512, 127])
def test_cached_block_runs(n):
    check_matmul(ex.cached_block, n)


def test_cached_block_other_tiles():
    """Exercise 1 of §4.6: other tile sizes, none dividing n = 100."""
    check_matmul(ex.cached_block, 100, tx=16, ty=8, tk=3)


def test_block_lowered(golden):
    s, args = ex.block(64)
    text = str(tvm.lower(s, args, simple_mode=True))
    par = block_of(text, "parallel (x.outer.y.outer.fused, 0, 4)")
    assert "for (k.outer, 0, 16)" in par
    unrolled = block_of(par, "unrolled (k.inner, 0, 4)")
    assert "ramp(" in unrolled and "x32(A[" in unrolled
    golden("ch4_6_block", text)


def test_cached_block_512_structure(golden):
    s, args = ex.cached_block(512)
    text = str(tvm.lower(s, args, simple_mode=True))
    par = block_of(text, "parallel (x.outer.y.outer.fused, 0, 256)")
    # the write cache: one tx * ty = 1024 element local buffer per block, inside the loop
    assert "allocate C.local[float32 * 1024]" in par
    cache = block_of(par, "produce C.local")
    assert "for (k.outer, 0, 128)" in cache
    # the inner reduction axis ki is unrolled; inside it the yc axis is vectorized (ramp)
    unrolled = block_of(cache, "unrolled (k.inner, 0, 4)")
    assert "C.local[ramp(" in unrolled
    assert "B[ramp(" in unrolled and ", 1, 32)]" in unrolled
    # the block is copied back to C after the cache is computed, still inside the loop
    assert "C[" in par.split("produce C.local")[1] and "= C.local[" in par
    golden("ch4_6_cached_block", text)
