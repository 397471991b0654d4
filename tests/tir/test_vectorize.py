"""vectorize: a ``vectorized`` loop becomes ramp / broadcast vector code, or stays a loop.

Conditions under a vectorized loop are covered in test_vectorize_conditions.py.
"""

from __future__ import annotations

import numpy as np

from kiln import tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.printer import to_text
from kiln.tir.vectorize import vectorize

from .handbuilt import find, function, loop, run

VEC = S.ForKind.VECTORIZED
o, i, j = E.Var("i.outer"), E.Var("i.inner"), E.Var("j")
A = tir.decl_buffer((4, 8), name="A")
B = tir.decl_buffer((4, 8), name="B")
C = tir.decl_buffer((8, 4), name="C")
s = E.Var("s", "float32")


def _load(buf: S.Buffer, index) -> E.Load:
    return E.Load(buf.dtype, buf.data, index)


def test_affine_accesses_become_ramps(golden):
    row = o * 8 + i
    body = S.seq(
        # contiguous read, scalar operands broadcast: B[row] = A[row]*2 + s
        S.Store(B.data, _load(A, row) * 2.0 + s, row),
        # strided read (a transpose): C[i, o] = A[o, i]
        S.Store(C.data, _load(A, row), i * 4 + o))
    before = loop(o, 4, loop(i, 8, body, VEC))
    after = vectorize(before)
    golden("tir/vectorize", to_text(after))
    assert not [f for f in find(after, S.For) if f.kind == VEC]
    func = function(S.LetStmt(s, tir.const(0.5), after), A, B, C)
    a = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    _, b, c = run(func, a, np.zeros((4, 8), "float32"), np.zeros((8, 4), "float32"))
    np.testing.assert_allclose(b, a * 2 + 0.5)
    np.testing.assert_array_equal(c, a.T)


def test_what_cannot_be_vectorized_stays_a_loop():
    inner_loop = loop(i, 8, loop(j, 2, S.Store(B.data, _load(A, i) + j.astype("float32"), i)),
                      VEC)
    odd_lanes = loop(i, 6, S.Store(B.data, _load(A, i), i), VEC)  # not a power of two
    math_call = loop(i, 8, S.Store(B.data, tir.exp(_load(A, i)), i), VEC)
    for stmt in (inner_loop, odd_lanes, math_call):
        assert to_text(vectorize(stmt)) == to_text(stmt)
