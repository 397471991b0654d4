"""partition_conditions: loops split at padding borders so the interior is a plain copy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir, topi
from kiln.arith import simplify_stmt as simplify
from kiln.ir import expr as E
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import For
from kiln.tir.partition_conditions import partition_conditions


def _selects(stmt):
    found = []

    def visit(n):
        if isinstance(n, E.Call) and n.op == "tvm_if_then_else" or isinstance(n, E.Select):
            found.append(n)

    post_order_visit(stmt, visit)
    return found


def _loops(stmt):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, For) else None)
    return found


def _pad2d(h, w, before, after):
    A = te.placeholder((h, w), name="A")
    P = topi.nn.pad(A, before, after)
    return A, P, te.create_schedule(P.op)


def test_padding_interior_is_condition_free():
    A, P, s = _pad2d(6, 7, [1, 2], [1, 2])
    body = kiln.lower(s, [A, P])["main"].body
    assert len(_selects(body)) == 1
    out = simplify(partition_conditions(body))
    # rows: top border, interior, bottom border; the interior rows split again by columns
    assert not _selects(out)
    copies = []

    def visit(n):
        if isinstance(n, E.Load):
            copies.append(n)

    post_order_visit(out, visit)
    assert len(copies) == 1  # the single interior copy loop


def test_printed_lowering_is_unchanged_and_c_source_is_partitioned():
    A, P, s = _pad2d(6, 7, [1, 2], [1, 2])
    assert "tvm_if_then_else" in str(kiln.lower(s, [A, P]))
    mod = kiln.build(s, [A, P])
    src = mod.get_source()
    assert " ? " not in src[src.index("_compute("):src.index("KILN_DLL int32_t")]


@pytest.mark.parametrize("shape, before, after", [
    ((6, 7), [1, 2], [1, 2]),
    ((5, 9), [0, 3], [2, 0]),
    ((1, 1), [2, 2], [2, 2]),
    ((4, 13), [1, 1], [1, 1]),
])
def test_padding_results_match_numpy(shape, before, after):
    A, P, s = _pad2d(*shape, before, after)
    # split the column loop so that the conditions involve an inner loop too
    xo, xi = s[P].split(P.op.axis[1], factor=4)
    mod = kiln.build(s, [A, P])
    a = np.random.default_rng(0).standard_normal(shape).astype("float32")
    p = kiln.nd.empty([int(x) for x in P.shape])
    mod(kiln.nd.array(a), p)
    np.testing.assert_array_equal(p.numpy(), np.pad(a, list(zip(before, after, strict=True))))


def test_condition_on_two_loops_and_symbolic_extent():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n, 8), lambda i, j: tir.if_then_else(
        tir.all(i + j >= 3, i + j < n), A[i + j - 3 + 3 * 0], 0.0), name="B")
    s = te.create_schedule(B.op)
    body = kiln.lower(s, [A, B])["main"].body
    out = simplify(partition_conditions(body))
    assert len(_loops(out)) > len(_loops(body))
    mod = kiln.build(s, [A, B])
    for size in (1, 5, 20):
        a = np.arange(size, dtype="float32") + 1
        b = kiln.nd.empty((size, 8))
        mod(kiln.nd.array(a), b)
        i, j = np.meshgrid(np.arange(size), np.arange(8), indexing="ij")
        k = i + j
        expect = np.where((k >= 3) & (k < size), a[np.clip(k - 3, 0, size - 1)], 0)
        np.testing.assert_array_equal(b.numpy(), expect)


def test_parallel_loops_are_not_split():
    A, P, s = _pad2d(6, 7, [1, 1], [1, 1])
    s[P].parallel(P.op.axis[0])
    body = kiln.lower(s, [A, P])["main"].body
    out = partition_conditions(body)
    par = [x for x in _loops(out) if x.kind.value == "parallel"]
    assert len(par) == 1


def test_nonlinear_conditions_are_left_alone():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: tir.if_then_else(i * i < 50, A[i], 0.0), name="B")
    s = te.create_schedule(B.op)
    body = kiln.lower(s, [A, B])["main"].body
    assert partition_conditions(body) is body
    mod = kiln.build(s, [A, B])
    a = np.arange(16, dtype="float32")
    b = kiln.nd.empty((16,))
    mod(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), np.where(np.arange(16) ** 2 < 50, a, 0))


def test_points_at_a_symbolic_size_are_not_used():
    """``i < n - 2`` would cut at a symbolic size: the simplifier can rarely order such points
    against the loop's bounds, so the loop is left whole (issue 19); results stay right."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: tir.if_then_else(i < n - 2, A[i], 0.0), name="B")
    s = te.create_schedule(B.op)
    body = kiln.lower(s, [A, B])["main"].body
    assert partition_conditions(body) is body
    mod = kiln.build(s, [A, B])
    for size in (1, 2, 3, 9):
        a = np.arange(size, dtype="float32") + 1
        b = kiln.nd.empty((size,))
        mod(kiln.nd.array(a), b)
        np.testing.assert_array_equal(b.numpy(), np.where(np.arange(size) < size - 2, a, 0))


def test_padding_partition_golden(golden):
    # top row, then per interior row: left border, copy, right border; then the bottom row
    A, P, s = _pad2d(6, 7, [1, 2], [1, 2])
    body = kiln.lower(s, [A, P])["main"].body
    golden("tir/partition_conditions_pad2d", str(partition_conditions(body)))


def test_each_copy_is_not_split_again_on_its_own_bounds():
    """The book's blocked convolution at a 13 x 13 output without padding (8 x 8 tiles, partial
    at the border): each loop is split once, then only its inner loops. Splitting the copies
    again nested one more min/max per split up to the 64-split limit (a 636 KB C file that
    took GCC minutes); results must stay those of the unsplit loops."""
    from tests.book._shared import conv_reference, load_example

    sch, (X, K, Y) = load_example("book", "ch4_7_conv").cached_block(5, 3, 15, 3, 0, 1)
    func = kiln.lower(sch, [X, K, Y])["main"]
    out = partition_conditions(func.body)
    assert len(_loops(out)) <= 4 * len(_loops(func.body))
    mod = kiln.build(sch, [X, K, Y])
    assert len(mod.get_source()) < 100_000
    x = np.random.rand(1, 3, 15, 15).astype("float32")[0]
    w = np.random.rand(5, 3, 3, 3).astype("float32")
    y = kiln.nd.empty((5, 13, 13))
    mod(kiln.nd.array(x), kiln.nd.array(w), y)
    np.testing.assert_allclose(y.numpy(), conv_reference(x, w, 0, 1), rtol=1e-4, atol=1e-4)
