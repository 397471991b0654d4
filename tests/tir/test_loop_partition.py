"""loop_partition: a loop guarded by ``likely`` splits into guard-free full tiles and a tail."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import substitute
from kiln.ir.printer import to_text
from kiln.tir.loop_partition import loop_partition

from .handbuilt import find, function, loop, run

o, i = E.Var("o"), E.Var("i")


def _guarded_copy(n, A: S.Buffer, B: S.Buffer) -> S.For:
    """``B[k] = A[k] + 1`` for k < n, as a split by 8 leaves it: ceil(n/8) tiles, a guard."""
    k = o * 8 + i
    store = S.Store(B.data, E.Load("float32", A.data, k) + 1.0, k)
    return loop(o, (n + 7) // 8, loop(i, 8, S.IfThenElse(tir.likely(k < n), store)))


def _guards(stmt) -> int:
    return sum(isinstance(s.condition, E.Call) and s.condition.op == "likely"
               for s in find(stmt, S.IfThenElse))


def test_constant_extent(golden):
    A, B = tir.decl_buffer((103,), name="A"), tir.decl_buffer((103,), name="B")
    before = _guarded_copy(103, A, B)
    after = loop_partition(before)
    golden("tir/loop_partition_constant", to_text(after))
    first = after.seq[0]
    assert (first.extent.value, _guards(first)) == (12, 0)  # 12 full tiles without the guard
    assert to_text(loop_partition(after)) == to_text(after)  # idempotent
    a = np.random.default_rng(0).standard_normal(103).astype("float32")
    _, b = run(function(after, A, B), a, np.zeros(103, "float32"))
    np.testing.assert_array_equal(b, a + 1)


def test_symbolic_extent(golden):
    n = te.size_var("n")
    A, B = tir.decl_buffer((n,), name="A"), tir.decl_buffer((n,), name="B")
    after = loop_partition(_guarded_copy(n, A, B))
    golden("tir/loop_partition_symbolic", to_text(after))
    assert _guards(after.seq[0]) == 0
    # run at fixed sizes (n substituted): shorter than a tile, whole tiles, tiles and a tail
    for size in (5, 16, 21):
        fixed = [S.Buffer(buf.data, buf.dtype, (size,), buf.name) for buf in (A, B)]
        a = np.arange(size, dtype="float32")
        _, b = run(function(substitute(after, {n: tir.const(size)}), *fixed), a, 0 * a)
        np.testing.assert_array_equal(b, a + 1)


def test_loop_without_guard_is_kept():
    A, B = tir.decl_buffer((16,), name="A"), tir.decl_buffer((16,), name="B")
    plain = loop(i, 16, S.Store(B.data, E.Load("float32", A.data, i), i))
    assert loop_partition(plain) is plain


def test_several_symbolic_guards_give_one_cut():
    """Four guards at four symbolic points (as a virtual thread or an unrolled stage repeats
    them): one cut below which all hold, not one cut per guard, which nested each bound one
    min/max deeper (issue 19); the bound keeps the smallest point only. Past it the guard
    cut there fails in every iteration: the tail keeps the other three."""
    n = te.size_var("n")
    A, B = tir.decl_buffer((n,), name="A"), tir.decl_buffer((n,), name="B")

    def guarded(c: int) -> S.Stmt:
        k = o * 4 + c
        store = S.Store(B.data, E.Load("float32", A.data, k) + 1.0, k)
        return S.IfThenElse(tir.likely(k < n), store)

    after = loop_partition(loop(o, (n + 3) // 4, S.seq(*(guarded(c) for c in range(4)))))
    assert len(after.seq) == 2
    assert (_guards(after.seq[0]), _guards(after.seq[1])) == (0, 3)
    assert to_text(after.seq[0].extent) == "floordiv(n, 4)"
    for size in (1, 3, 4, 5, 9):
        fixed = [S.Buffer(buf.data, buf.dtype, (size,), buf.name) for buf in (A, B)]
        a = np.arange(size, dtype="float32")
        _, b = run(function(substitute(after, {n: tir.const(size)}), *fixed), a, 0 * a)
        np.testing.assert_array_equal(b, a + 1)


def test_const_loop_kept_without_partition_const_loop():
    """``partition_const_loop=False`` (TVM's default) leaves loops of constant extent alone;
    loops of symbolic extent are split either way, as in TVM."""
    A, B = tir.decl_buffer((103,), name="A"), tir.decl_buffer((103,), name="B")
    before = _guarded_copy(103, A, B)
    assert loop_partition(before, partition_const_loop=False) is before
    n = te.size_var("n")
    An, Bn = tir.decl_buffer((n,), name="A"), tir.decl_buffer((n,), name="B")
    symbolic = loop_partition(_guarded_copy(n, An, Bn), partition_const_loop=False)
    assert _guards(symbolic.seq[0]) == 0


def _split_103():
    A = te.placeholder((103,), name="A")
    B = te.compute((103,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=8)
    return s, [A, B]


def _lowered(config: dict | None) -> str:
    s, args = _split_103()
    with kiln.transform.PassContext(config=config):
        return str(kiln.lower(s, args, simple_mode=True))


KEPT_GUARD = """produce B {
  for (i.outer, 0, 13) {
    for (i.inner, 0, 8) {
      if (likely((((i.outer*8) + i.inner) < 103))) {
        B[((i.outer*8) + i.inner)] = (A[((i.outer*8) + i.inner)] + 1f)
      }
    }
  }
}"""


def test_pass_context_option_both_ways():
    """kiln partitions by default; ``{"partition_const_loop": False}`` keeps TVM's one loop
    and its guard, ``True`` is kiln's default."""
    partitioned = _lowered(None)
    assert "likely" not in partitioned and "for (i.outer, 0, 12)" in partitioned
    assert _lowered({"tir.LoopPartition": {"partition_const_loop": True}}) == partitioned
    off = {"tir.LoopPartition": {"partition_const_loop": False}}
    assert _lowered(off).strip() == KEPT_GUARD
    s, args = _split_103()
    with kiln.transform.PassContext(config=off):
        f = kiln.build(s, args)
    a = kiln.nd.array(np.arange(103, dtype="float32"))
    b = kiln.nd.array(np.zeros(103, "float32"))
    f(a, b)
    np.testing.assert_array_equal(b.numpy(), a.numpy() + 1)


def test_tir_transform_loop_partition_reads_its_context():
    off = kiln.transform.PassContext(config={"tir.LoopPartition":
                                             {"partition_const_loop": False}})
    s, args = _split_103()
    with off:
        guarded = kiln.lower(s, args)
    with off:
        kept = str(tir.transform.LoopPartition()(guarded)["main"].body)
    assert "for (i.outer, 0, 13)" in kept and "for (i.outer, 0, 12)" not in kept
    split = str(tir.transform.LoopPartition()(guarded)["main"].body)
    assert "for (i.outer, 0, 12)" in split  # the full tiles, without the guard


def test_option_must_be_a_dict():
    with pytest.raises(kiln.TVMError, match="'tir.LoopPartition' takes a dict"):
        _lowered({"tir.LoopPartition": True})


def _fused_guard(n, m, divisor):
    """``for (o, 0, ceil(m/5)) { for (f, 0, n*5) { if (likely(o*5 + floordiv(f, divisor)
    < m)) B[f] = 1 } }``: a loop fused from extents 5 and n inside a split by 5."""
    f = E.Var("f")
    B = tir.decl_buffer((n * 5,), name="B")
    guard = tir.likely(o * 5 + E.FloorDiv(f, divisor) < m)
    body = S.IfThenElse(guard, S.Store(B.data, tir.const(1.0, "float32"), f))
    return loop(o, (m + 4) // 5, loop(f, n * 5, body))


def test_cut_assumes_the_inner_loops_run():
    """The guard runs only where the inner loop has an iteration (n >= 1): the cut is
    ``floordiv(m, 5)``, not ``floordiv(m - floordiv(-1, n) - 1, 5)``, which divides by n
    before the loops and so by zero at n = 0 (found by the schedule fuzzer)."""
    n, m = E.Var("n"), E.Var("m")
    after = loop_partition(_fused_guard(n, m, n))
    assert to_text(after.seq[0]).startswith("for (o, 0, floordiv(m, 5))")
    assert "floordiv(-1" not in to_text(after)


def test_cut_that_divides_by_a_value_that_may_be_zero_is_refused():
    """A cut that divides by ``q`` (maybe 0, also where the inner loop is empty) is
    evaluated before the loops: the loop keeps its guard instead."""
    n, m, q = E.Var("n"), E.Var("m"), E.Var("q")
    before = _fused_guard(n, m, q)
    assert to_text(loop_partition(before)) == to_text(before)
