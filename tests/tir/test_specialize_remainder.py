"""The specialize_remainder pass alone (kiln/tir/specialize_remainder.py): the tail tile of a
loop marked with the pragma is compiled once per number of iterations left, outside the
reduction, each copy's loops constant; every iteration runs once and in order."""

from __future__ import annotations

import pytest

from kiln.arith import evaluate
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.op import floordiv
from kiln.tir.specialize_remainder import PRAGMA, specialize_remainder

F = 4  # the split's factor: a tile of 4 rows


def _tiles(extent_of_tail=None, pragma: bool = True):
    """``n`` and the loops ``loop_partition`` leaves for rows of ``n`` split by 4: the full
    tiles, then the tail tile, each accumulating over ``k`` (rows inside ``k``) and then
    storing its rows; ``extent_of_tail`` replaces the tail's row count ``n - o*4``."""
    n, o, k, i = (E.Var(x, "int32") for x in ("n", "o", "k", "i"))
    buf = E.Var("B", "handle")

    def tile(rows):
        acc = S.For(k, 0, 2, S.ForKind.SERIAL, S.For(
            i, 0, rows, S.ForKind.UNROLLED,
            S.Store(buf, E.FloatImm("float32", 1.0), (o * F + i) * 2 + k)))
        store = S.For(i, 0, rows, S.ForKind.SERIAL,
                      S.Store(buf, E.FloatImm("float32", 2.0), o * F + i + 1000))
        return S.SeqStmt([acc, store])

    full = S.For(o, 0, floordiv(n, F), S.ForKind.SERIAL, tile(E.IntImm("int32", F)))
    tail_start = floordiv(n, F)
    tail = S.For(o, tail_start, floordiv(n + F - 1, F) - tail_start, S.ForKind.SERIAL,
                 tile(n - o * F if extent_of_tail is None else extent_of_tail(n)))
    body = S.SeqStmt([full, tail])
    return n, S.AttrStmt(o, "pragma_" + PRAGMA, F, body) if pragma else body


def _stored(stmt: S.Stmt, env: dict) -> list[tuple[int, float]]:
    """``(index, value)`` of every store of ``stmt``, in order (loops, ifs, pragmas)."""
    if isinstance(stmt, S.For):
        lo, ext = int(evaluate(stmt.min, env)), int(evaluate(stmt.extent, env))
        return [x for v in range(lo, lo + ext)
                for x in _stored(stmt.body, {**env, stmt.loop_var: v})]
    if isinstance(stmt, S.IfThenElse):
        if evaluate(stmt.condition, env):
            return _stored(stmt.then_case, env)
        return _stored(stmt.else_case, env) if stmt.else_case is not None else []
    if isinstance(stmt, S.SeqStmt):
        return [x for s in stmt.seq for x in _stored(s, env)]
    if isinstance(stmt, S.AttrStmt):
        return _stored(stmt.body, env)
    assert isinstance(stmt, S.Store)
    return [(int(evaluate(stmt.index, env)), stmt.value.value)]


def test_the_tail_tile_is_one_copy_per_rows_left_outside_the_reduction():
    _, stmt = _tiles()
    text = str(specialize_remainder(stmt))
    assert "pragma_" + PRAGMA not in text  # consumed
    # the tail has 1, 2 or 3 rows (never 0: the tail loop runs only when F does not divide n)
    for rows in (1, 2):
        assert f"if (((n - (o*4)) == {rows}))" in text
    assert "== 3)" not in text and "== 0)" not in text  # the last case is the else
    assert text.count("for (k, 0, 2)") == 1 + 3  # the full tile's and one per case
    for rows in (1, 2, 3, 4):
        assert f"unrolled (i, 0, {rows})" in text
    assert "0, (n - (o*4)))" not in text  # no loop over a run-time count


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 13])
def test_every_iteration_runs_once_in_order(n):
    var, stmt = _tiles()
    assert _stored(specialize_remainder(stmt), {var: n}) == _stored(stmt, {var: n})


def test_an_extent_not_provably_below_the_factor_is_left_alone():
    _, stmt = _tiles(extent_of_tail=lambda n: n)  # n rows: not known below 4
    assert "if (" not in str(specialize_remainder(stmt))


def test_a_program_without_the_pragma_is_returned_as_it_is():
    _, stmt = _tiles(pragma=False)
    assert specialize_remainder(stmt) is stmt
