"""lower_divmod: floordiv/floormod of provably non-negative operands become C's / and %."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir.functor import post_order_visit
from kiln.tir.lower_divmod import lower_divmod


def _nodes(stmt, cls):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found


def _fused_copy(shape=(6, 7, 9)):
    # the bias read needs the channel back from the fused loop: floordiv(fused, 7)
    A = te.placeholder(shape, name="A")
    C = te.placeholder((shape[0],), name="C")
    B = te.compute(shape, lambda c, h, w: A[c, h, w] * C[c] + h, name="B")
    s = te.create_schedule(B.op)
    c, h, _ = B.op.axis
    s[B].parallel(s[B].fuse(c, h))
    return s, [A, C, B]


def test_fused_loop_indices_become_truncating_division():
    s, args = _fused_copy()
    body = kiln.lower(s, args)["main"].body
    assert _nodes(body, E.FloorDiv) and _nodes(body, E.FloorMod)
    low = lower_divmod(body)
    assert not _nodes(low, E.FloorDiv) and not _nodes(low, E.FloorMod)
    assert _nodes(low, E.Div) and _nodes(low, E.Mod)


def test_printed_lowering_keeps_floordiv_and_c_source_uses_division():
    s, args = _fused_copy()
    assert "floordiv" in str(kiln.lower(s, args))  # the printout is TVM's
    mod = kiln.build(s, args)
    src = mod.get_source()
    body = src[src.index("_compute("):]
    assert "kiln_floordiv" not in body and "kiln_floormod" not in body
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 7, 9)).astype("float32")
    c = rng.standard_normal(6).astype("float32")
    b = kiln.nd.empty((6, 7, 9))
    mod(kiln.nd.array(a), kiln.nd.array(c), b)
    expect = a * c[:, None, None] + np.arange(7)[None, :, None]
    np.testing.assert_allclose(b.numpy(), expect, rtol=1e-5, atol=1e-6)


def test_possibly_negative_numerator_keeps_floor_semantics():
    # index i - 3 is negative for i < 3: floordiv must round toward minus infinity
    n = 10
    A = te.placeholder((n,), name="A", dtype="int32")
    B = te.compute((n,), lambda i: tir.floordiv(A[i] + i - 3, 4) * 10
                   + tir.floormod(i - 3, 4), name="B")
    s = te.create_schedule(B.op)
    body = kiln.lower(s, [A, B])["main"].body
    low = lower_divmod(body)
    assert len(_nodes(low, E.FloorDiv)) == 1 and len(_nodes(low, E.FloorMod)) == 1
    mod = kiln.build(s, [A, B])
    a = np.arange(-5, 5, dtype="int32")
    b = kiln.nd.empty((n,), dtype="int32")
    mod(kiln.nd.array(a), b)
    i = np.arange(n)
    np.testing.assert_array_equal(b.numpy(), (a + i - 3) // 4 * 10 + (i - 3) % 4)


def test_floor_helpers_match_python_for_every_sign():
    n = 41
    A = te.placeholder((n,), name="A", dtype="int32")
    D = te.placeholder((n,), name="D", dtype="int32")
    Q = te.compute((n,), lambda i: tir.floordiv(A[i], D[i]), name="Q")
    R = te.compute((n,), lambda i: tir.floormod(A[i], D[i]), name="R")
    s = te.create_schedule([Q.op, R.op])
    mod = kiln.build(s, [A, D, Q, R])
    rng = np.random.default_rng(1)
    a = rng.integers(-100, 100, n).astype("int32")
    d = rng.choice([-7, -3, -1, 1, 2, 5], n).astype("int32")
    q, r = kiln.nd.empty((n,), "int32"), kiln.nd.empty((n,), "int32")
    mod(kiln.nd.array(a), kiln.nd.array(d), q, r)
    np.testing.assert_array_equal(q.numpy(), a // d)
    np.testing.assert_array_equal(r.numpy(), a % d)


def test_fused_copy_golden(golden):
    s, args = _fused_copy()
    low = lower_divmod(kiln.lower(s, args)["main"].body)
    golden("tir/lower_divmod_fused", str(low))
