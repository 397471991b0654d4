"""simplify (kiln.arith.simplify_stmt): index arithmetic folded, knowing every loop's range.

The rules themselves are tested in tests/arith; here the pass runs on a program shaped like
what storage flattening, loop partitioning and vectorization leave behind.
"""

from __future__ import annotations

import numpy as np

from kiln import tir
from kiln.arith import simplify_stmt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.printer import to_text

from .handbuilt import function, loop, run

f, o, i, t = E.Var("i.j.fused"), E.Var("i.outer"), E.Var("i.inner"), E.Var("t")
A = tir.decl_buffer((32,), name="A")
B = tir.decl_buffer((32,), name="B")


def _load(index) -> E.Load:
    return E.Load("float32", A.data, index)


def _program() -> S.Stmt:
    # a fused loop reading through floordiv/floormod of the fused index
    index = tir.floordiv(f, 8) * 8 + tir.floormod(f, 8)
    fused = loop(f, 32, S.Store(B.data, _load(index) + 1.0, index))
    # a split by a dividing factor: the guard always holds
    k = o * 8 + i
    guarded = loop(o, 4, loop(i, 8, S.IfThenElse(
        tir.likely(k < 32), S.Store(B.data, E.Load("float32", B.data, k) * 2.0, k))))
    # vector code straight from vectorize
    ramp = E.Ramp(o * 8 + 0, tir.const(1) * 1, 8)
    vector = loop(o, 4, S.Store(B.data, E.Load("float32x8", B.data, ramp)
                                - E.Broadcast(tir.const(1.0), 8), ramp))
    # a loop of one iteration
    single = loop(t, 1, S.Store(B.data, E.Load("float32", B.data, t * 4 + 3), t + 31))
    return S.seq(fused, guarded, vector, single)


def test_simplify(golden):
    before = _program()
    after = simplify_stmt(before)
    golden("tir/simplify", to_text(after))
    assert to_text(simplify_stmt(after)) == to_text(after)  # a fixed point
    a = np.random.default_rng(0).standard_normal(32).astype("float32")
    zeros = np.zeros(32, "float32")
    _, expected = run(function(before, A, B), a, zeros)
    _, b = run(function(after, A, B), a, zeros)
    np.testing.assert_array_equal(b, expected)
    np.testing.assert_allclose(b[:31], (a[:31] + 1) * 2 - 1)
    assert b[31] == b[3]
