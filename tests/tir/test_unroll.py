"""pragma auto_unroll_max_step marks small constant loop nests as unrolled."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.tir.unroll import auto_unroll


def test_auto_unroll_max_step():
    A = te.placeholder((64, 4), name="A")
    B = te.compute((64, 4), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    s[B].pragma(i, "auto_unroll_max_step", 16)
    text = str(kiln.lower(s, [A, B]))
    assert "unrolled (j, 0, 4)" in text
    assert "for (i, 0, 64)" in text
    mod = kiln.build(s, [A, B])
    a = np.random.default_rng(0).standard_normal((64, 4)).astype("float32")
    b = kiln.nd.empty((64, 4))
    mod(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a * 2)


def test_auto_unroll_golden(golden):
    # under the pragma: k (2 steps) and j (4*2 steps) are unrolled; r (32) and i (64*...) not
    i, j, k, r = (E.Var(n) for n in "ijkr")
    B = E.Var("B", "handle")

    def loop(var, extent, body):
        return S.For(var, 0, extent, S.ForKind.SERIAL, body)

    inner = S.seq(loop(j, 4, loop(k, 2, S.Store(B, tir.const(1.0), i * 8 + j * 2 + k))),
                  loop(r, 32, S.Store(B, tir.const(2.0), i * 32 + r)))
    stmt = S.AttrStmt(i, "pragma_auto_unroll_max_step", 16, loop(i, 64, inner))
    golden("tir/auto_unroll", str(auto_unroll(stmt)))
