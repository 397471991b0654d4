"""Visitors and mutators (kiln.ir.functor): traversal order, dispatch, and sharing."""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import Mutator, Visitor, post_order_visit, substitute
from kiln.ir.printer import to_text

i, j = E.Var("i"), E.Var("j")
A, B, C = (E.Var(n, "handle") for n in "ABC")


def _copy(dst: E.Var, src: E.Var, var: E.Var, extent: int) -> S.For:
    body = S.Store(dst, E.Load("float32", src, var) * 2.0, var)
    return S.For(var, 0, extent, S.ForKind.SERIAL, body)


def test_post_order_visit_lists_children_first():
    seen: list[str] = []
    post_order_visit((i + 1) * j, lambda n: seen.append(repr(n)))
    assert seen == ["i", "1", "(i + 1)", "j", "((i + 1)*j)"]


def test_post_order_visit_walks_statements():
    kinds: list[str] = []
    post_order_visit(_copy(B, A, i, 4), lambda n: kinds.append(type(n).__name__))
    assert kinds[-1] == "For" and kinds[-2] == "Store"
    assert kinds.index("Load") < kinds.index("Mul") < kinds.index("Store")


def test_visitor_dispatches_on_the_node_class():
    class Accesses(Visitor):
        def __init__(self):
            super().__init__()
            self.stores: list[str] = []
            self.loads: list[str] = []

        def visit_Store(self, s):
            self.stores.append(s.buffer_var.name)
            self.generic_visit(s)

        def visit_Load(self, e):
            self.loads.append(e.buffer_var.name)

    v = Accesses()
    v.visit(S.seq(_copy(B, A, i, 4), _copy(C, B, j, 4)))
    assert v.stores == ["B", "C"] and v.loads == ["A", "B"]


class _Redirect(Mutator):
    """Reads of ``old`` become reads of ``new``."""

    def __init__(self, old: E.Var, new: E.Var):
        super().__init__()
        self.old, self.new = old, new

    def visit_Load(self, e):
        if e.buffer_var is self.old:
            return E.Load(e.dtype, self.new, e.index)
        return self.generic_visit(e)


def test_mutator_rebuilds_only_the_changed_path():
    first, second = _copy(B, A, i, 4), _copy(C, B, j, 4)
    prog = S.seq(first, second)
    out = _Redirect(A, C).visit(prog)
    assert out is not prog
    assert out.seq[1] is second  # untouched subtree: the same object
    new_first = out.seq[0]
    assert new_first is not first
    assert new_first.loop_var is i and new_first.extent is first.extent
    assert new_first.body.index is first.body.index  # siblings of the change are shared
    assert to_text(new_first) == "for (i, 0, 4) {\n  B[i] = (C[i]*2f)\n}"


def test_mutator_without_changes_returns_the_same_tree():
    prog = S.seq(_copy(B, A, i, 4), _copy(C, B, j, 4))
    assert _Redirect(E.Var("X", "handle"), C).visit(prog) is prog


def test_mutator_does_not_enter_iter_vars():
    bx = te.thread_axis("blockIdx.x")
    stmt = S.AttrStmt(bx, "thread_extent", 4, S.Store(A, tir.const(0.0), bx.var))
    out = substitute(stmt, {bx.var: j})
    assert out.node is bx  # the binding names the axis; only uses are rewritten
    assert out.body.index is j


def test_substitute_replaces_variables_everywhere():
    prog = _copy(B, A, i, 4).body
    out = substitute(prog, {i: j * 2 + 1})
    assert to_text(out) == "B[((j*2) + 1)] = (A[((j*2) + 1)]*2f)"
    assert substitute(prog, {}) is prog
