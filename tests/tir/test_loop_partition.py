"""loop_partition: a loop guarded by ``likely`` splits into guard-free full tiles and a tail."""

from __future__ import annotations

import numpy as np

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
