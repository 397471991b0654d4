"""unify_thread_extents: one variable and one launch extent per thread tag in each kernel."""

from __future__ import annotations

import pytest

from kiln import ScheduleError, te, tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import collect_vars
from kiln.ir.printer import to_text
from kiln.tir.thread_binding import has_thread_binding, unify_thread_extents

from .handbuilt import find, loop

A, B, SH = (E.Var(n, "handle") for n in ("A", "B", "A.shared"))


def _bind(axis: E.IterVar, extent: int, body: S.Stmt) -> S.AttrStmt:
    return S.AttrStmt(axis, "thread_extent", extent, body)


def _kernel():
    """A block of 8 threads fetches 8 elements into shared memory; then 4 threads (bound
    through another ``threadIdx.x`` axis object) each add a pair of them."""
    bx, tx, tx4 = (te.thread_axis(t) for t in ("blockIdx.x", "threadIdx.x", "threadIdx.x"))
    fetch = _bind(tx, 8, S.Store(SH, E.Load("float32", A, bx.var * 8 + tx.var), tx.var))
    pair = E.Load("float32", SH, tx4.var * 2) + E.Load("float32", SH, tx4.var * 2 + 1)
    add = _bind(tx4, 4, S.Store(B, pair, bx.var * 4 + tx4.var))
    body = S.Allocate(SH, "float32", [8], tir.const(True), S.seq(fetch, add), scope="shared")
    return _bind(bx, 16, body), tx, tx4


def test_bindings_of_one_tag_share_variable_and_extent(golden):
    kernel, tx, tx4 = _kernel()
    out = unify_thread_extents(kernel)
    golden("tir/thread_binding", to_text(out))
    bindings = [a for a in find(out, S.AttrStmt) if a.node.thread_tag == "threadIdx.x"]
    assert [a.value.value for a in bindings] == [8, 8]
    (axis,) = {a.node for a in bindings}
    assert axis in (tx, tx4)
    assert {v for v in collect_vars(out) if v.name == "threadIdx.x"} == {axis.var}
    assert to_text(unify_thread_extents(out)) == to_text(out)  # idempotent


def test_program_without_bindings_is_returned_unchanged():
    i = E.Var("i")
    stmt = loop(i, 4, S.Store(B, E.Load("float32", A, i), i))
    assert unify_thread_extents(stmt) is stmt


def test_binding_found_under_any_statement():
    i = E.Var("i")
    store = S.Store(B, E.Load("float32", A, i), i)
    tx = te.thread_axis("threadIdx.x")
    deep = S.IfThenElse(i < 2, S.seq(store, loop(i, 2, _bind(tx, 4, store))))
    assert has_thread_binding(loop(i, 4, S.seq(store, deep)))
    assert not has_thread_binding(loop(i, 4, S.seq(store, S.IfThenElse(i < 2, store))))
    assert not has_thread_binding(S.AttrStmt(tx, "pragma_x", 1, store))


def test_wider_binding_nested_in_narrower_one_is_rejected():
    tx, inner = te.thread_axis("threadIdx.x"), te.thread_axis("threadIdx.x")
    stmt = _bind(tx, 4, _bind(inner, 8, S.Store(B, tir.const(0.0), inner.var)))
    with pytest.raises(ScheduleError, match="nested inside a loop bound to threadIdx.x"):
        unify_thread_extents(stmt)
