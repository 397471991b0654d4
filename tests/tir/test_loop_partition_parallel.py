"""``loop_partition`` on a parallel loop of symbolic extent: one parallel loop whose body
branches between the guard-free iterations and the tail (one fork of the threads per call,
issue 19), exact at every extent; a constant extent keeps TVM's two loops."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te


def _parallel_add(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].parallel(xo)
    s[B].vectorize(xi)
    return s, [A, B]


def test_symbolic_parallel_loop_branches_inside():
    s, args = _parallel_add(te.var("n"))
    text = str(kiln.lower(s, args, simple_mode=True))
    assert text.count("parallel (") == 1
    assert "parallel (i.outer, 0, floordiv((n + 7), 8))" in text
    assert "if (likely((i.outer < floordiv(n, 8))))" in text
    mod = kiln.build(s, args)
    for size in (0, 1, 7, 8, 9, 100):
        a = np.arange(size, dtype=np.float32)
        out = kiln.nd.array(np.zeros(size, np.float32))
        mod(kiln.nd.array(a), out)
        np.testing.assert_array_equal(out.numpy(), a + 1, err_msg=f"n = {size}")


def test_constant_parallel_loop_keeps_two_loops():
    s, args = _parallel_add(127)
    text = str(kiln.lower(s, args, simple_mode=True))
    assert "parallel (i.outer, 0, 15)" in text and text.count("parallel (") == 2


def _parallel_guarded_copy(n):
    """``parallel (o, 0, ceil(n/8)) { for (i, 0, 8) { if (likely(o*8 + i < n)) B[k] = A[k] } }``
    and its buffers."""
    from kiln import tir
    from kiln.ir import expr as E
    from kiln.ir import stmt as S

    o, i = E.Var("o"), E.Var("i")
    A, B = tir.decl_buffer((n,), name="A"), tir.decl_buffer((n,), name="B")
    k = o * 8 + i
    store = S.Store(B.data, E.Load("float32", A.data, k), k)
    inner = S.For(i, 0, 8, S.ForKind.SERIAL, S.IfThenElse(tir.likely(k < n), store))
    return S.For(o, 0, (n + 7) // 8, S.ForKind.PARALLEL, inner), A, B


def test_partitioning_a_branched_parallel_loop_again_changes_nothing():
    """A second ``loop_partition`` finds the branch's guard decided in its else-branch (it
    fails there), so it nests no dead copy of the guard-free body (issue 19)."""
    from kiln.ir.printer import to_text
    from kiln.tir.loop_partition import loop_partition

    once = loop_partition(_parallel_guarded_copy(te.size_var("n"))[0])
    text = to_text(once)
    assert text.count("B[") == 2  # the guard-free body, the tail cut at n (no dead copy)
    assert "likely(((o*8) + i) < n)" not in text
    assert to_text(loop_partition(once)) == text


def test_branched_parallel_loop_is_exact_at_every_extent():
    from kiln.ir.functor import substitute
    from kiln.tir.loop_partition import loop_partition

    from .handbuilt import function, run

    n = te.size_var("n")
    loop, A, B = _parallel_guarded_copy(n)
    after = loop_partition(loop_partition(loop))
    for size in (0, 1, 7, 8, 9, 100):
        fixed = [kiln.ir.stmt.Buffer(b.data, b.dtype, (size,), b.name) for b in (A, B)]
        a = np.arange(size, dtype="float32")
        _, b = run(function(substitute(after, {n: kiln.tir.const(size)}), *fixed), a, 0 * a)
        np.testing.assert_array_equal(b, a, err_msg=f"n = {size}")
