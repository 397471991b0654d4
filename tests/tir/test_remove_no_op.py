"""remove_no_op: statements without effect disappear; everything else is kept as it is."""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.printer import to_text
from kiln.tir.remove_no_op import remove_no_op

from .handbuilt import loop

i, j, n = E.Var("i"), E.Var("j"), E.Var("n")
A = E.Var("A", "handle")


def _store(index) -> S.Store:
    return S.Store(A, tir.const(1.0), tir.const(index) if isinstance(index, int) else index)


def test_no_ops_are_removed(golden):
    nothing = S.Evaluate(0)
    T = te.placeholder((4,), name="T")
    stmt = S.seq(
        loop(i, 4, nothing),  # a loop over nothing
        loop(i, 0, _store(i)),  # a loop that runs zero times
        S.IfThenElse(i < n, nothing, nothing),  # a branch with empty arms
        S.AttrStmt(i, "pragma_unroll_explicit", 1, nothing),  # an attribute on nothing
        S.IfThenElse(tir.const(True), _store(0), _store(1)),  # a constant condition
        S.IfThenElse(j < n, _store(j), loop(i, 4, nothing)),  # an empty else arm
        S.AttrStmt(T, "produce", 0, loop(i, 4, nothing)),  # produce markers stay
        loop(i, n, loop(j, 4, _store(i * 4 + j))),  # real work stays
    )
    out = remove_no_op(stmt)
    golden("tir/remove_no_op", to_text(out))
    assert to_text(remove_no_op(out)) == to_text(out)  # idempotent


def test_program_with_effects_is_returned_unchanged():
    stmt = loop(i, n, S.IfThenElse(i < 3, _store(i), _store(i + 1)))
    assert remove_no_op(stmt) is stmt
