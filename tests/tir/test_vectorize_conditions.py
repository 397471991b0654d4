"""Vectorizing if_then_else / select: uniform conditions in kiln.lower, lane conditions
(lane masks, safe reads) in kiln.build's C pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir, topi
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import For, ForKind
from kiln.tir.vectorize import vectorize, vectorize_lane_masks


def _find(stmt, pred):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if pred(n) else None)
    return found


def _vector_ite(stmt):
    return _find(stmt, lambda n: isinstance(n, E.Call) and n.op == "tvm_if_then_else"
                 and dt.lanes(n.dtype) > 1)


def _vector_loops(stmt):
    return _find(stmt, lambda n: isinstance(n, For) and n.kind == ForKind.VECTORIZED)


def _run(s, args, inputs, out_dtype="float32"):
    mod = kiln.build(s, args)
    out = kiln.nd.empty([int(x) for x in args[-1].shape], out_dtype)
    mod(*[kiln.nd.array(x) for x in inputs], out)
    return out.numpy(), mod


def test_uniform_condition_vectorizes_in_lowering():
    # NCHWc padding: the vectorized channel block does not appear in the condition
    A = te.placeholder((2, 5, 6, 16), name="A")
    P = topi.nn.pad(A, [0, 1, 2, 0], [0, 1, 1, 0])
    s = te.create_schedule(P.op)
    s[P].vectorize(P.op.axis[3])
    text = str(kiln.lower(s, [A, P]))
    assert "vectorized" not in text
    assert "tvm_if_then_else" in text and "ramp(" in text and "x16(0f)" in text
    a = np.random.default_rng(0).standard_normal((2, 5, 6, 16)).astype("float32")
    p, _ = _run(s, [A, P], [a])
    np.testing.assert_array_equal(p, np.pad(a, [(0, 0), (1, 1), (2, 1), (0, 0)]))


def test_lane_condition_stays_scalar_in_lowering_and_vectorizes_in_build():
    A = te.placeholder((37,), name="A")
    P = topi.nn.pad(A, [5], [6])
    s = te.create_schedule(P.op)
    _, xi = s[P].split(P.op.axis[0], factor=16)
    s[P].vectorize(xi)
    body = kiln.lower(s, [A, P])["main"].body
    assert _vector_loops(body)  # TVM scalarizes a condition on the lane
    assert _vector_loops(vectorize(body))
    masked = vectorize_lane_masks(body)
    assert _vector_ite(masked) and not _vector_loops(masked)
    a = np.arange(1, 38, dtype="float32")
    p, mod = _run(s, [A, P], [a])
    np.testing.assert_array_equal(p, np.pad(a, (5, 6)))
    assert "kiln_all_int32x16" in mod.get_source()


@pytest.mark.parametrize("n, before, after, factor", [
    (37, 5, 6, 16), (3, 7, 7, 8), (16, 0, 1, 16), (40, 1, 0, 4), (1, 20, 20, 32)])
def test_lane_masked_padding_matches_numpy(n, before, after, factor):
    # the guarded read A[i - before] is out of bounds in border lanes: masked lanes must not
    # read it (a wrong read shows up as a non-zero border, or under a memory checker)
    A = te.placeholder((n,), name="A")
    P = topi.nn.pad(A, [before], [after])
    s = te.create_schedule(P.op)
    _, xi = s[P].split(P.op.axis[0], factor=factor)
    s[P].vectorize(xi)
    a = np.random.default_rng(n).standard_normal(n).astype("float32") + 3
    p, _ = _run(s, [A, P], [a])
    np.testing.assert_array_equal(p, np.pad(a, (before, after)))


def test_guarded_else_branch_is_masked_too():
    # the assignment's conv1d guard: out-of-range lanes take the constant, others read
    n, k = 50, 7
    A = te.placeholder((n,), name="A")
    W = te.placeholder((k,), name="W")
    B = te.compute((n + k - 1, k), lambda i, j: tir.if_then_else(
        tir.any(i < j, i - j >= n), 0.0, A[i - j] * W[j]), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].reorder(io, B.op.axis[1], ii)
    s[B].vectorize(ii)
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal(n).astype("float32"), rng.standard_normal(k).astype("float32")
    b, _ = _run(s, [A, W, B], [a, w])
    i, j = np.meshgrid(np.arange(n + k - 1), np.arange(k), indexing="ij")
    ok = (i >= j) & (i - j < n)
    expect = np.where(ok, a[np.clip(i - j, 0, n - 1)] * w[j], 0)
    np.testing.assert_allclose(b, expect, rtol=1e-6)


def test_lane_select_blends_both_sides():
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: tir.Select(A[i] > 0.5, A[i] * 2.0, A[i] - 1.0), name="B")
    s = te.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)
    body = kiln.lower(s, [A, B])["main"].body
    masked = vectorize_lane_masks(body)
    assert _find(masked, lambda x: isinstance(x, E.Select) and dt.lanes(x.dtype) == 16)
    a = np.random.default_rng(1).random(n).astype("float32")
    b, _ = _run(s, [A, B], [a])
    np.testing.assert_allclose(b, np.where(a > 0.5, a * 2, a - 1), rtol=1e-6)


def test_mixed_width_lane_condition_with_narrow_values():
    # int32 index conditions choosing int8 values: the mask is converted to the value width
    n = 32
    A = te.placeholder((n,), name="A", dtype="int8")
    B = te.compute((n + 8,), lambda i: tir.if_then_else(
        tir.all(i >= 4, i < n + 4), A[i - 4], tir.const(-1, "int8")), name="B", )
    s = te.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(xi)
    a = np.arange(n, dtype="int8")
    b, _ = _run(s, [A, B], [a], out_dtype="int8")
    np.testing.assert_array_equal(b, np.pad(a, (4, 4), constant_values=-1))


def test_integer_division_under_a_lane_condition_is_not_vectorized():
    n = 16
    A = te.placeholder((n,), name="A", dtype="int32")
    B = te.compute((n,), lambda i: tir.if_then_else(i > 0, A[i] // i, 0), name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    body = kiln.lower(s, [A, B])["main"].body
    assert _vector_loops(vectorize_lane_masks(body))
    a = np.arange(n, dtype="int32") * 7
    b, _ = _run(s, [A, B], [a], out_dtype="int32")
    i = np.arange(n)
    np.testing.assert_array_equal(b, np.where(i > 0, a // np.maximum(i, 1), 0))
