"""simplify_stmt: loops, branches, lets, asserts, stores and functions."""

from __future__ import annotations

from kiln.arith import Analyzer, simplify, simplify_stmt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.expr import IntImm, IterVar, Range, Var
from kiln.ir.op import emin, floordiv, floormod
from kiln.ir.printer import to_text

i, j, n, m, x = (Var(s) for s in ("i", "j", "n", "m", "x"))
A = Var("A", "handle")
B = Var("B", "handle")


def c(v: int) -> IntImm:
    return IntImm("int32", v)


def store(index, value=None) -> S.Store:
    return S.Store(A, value if value is not None else E.FloatImm("float32", 1.0), index)


def loop(var, extent, body, kind=S.ForKind.SERIAL, lo=0) -> S.For:
    return S.For(var, lo, extent, kind, body)


def text(s) -> str:
    return to_text(simplify_stmt(s))


def test_loop_var_bounds_simplify_body():
    body = store(floordiv(i * 8 + j, 8) + floormod(i * 8 + j, 8))
    s = loop(i, 4, loop(j, 8, body))
    assert text(s) == "for (i, 0, 4) {\n  for (j, 0, 8) {\n    A[(i + j)] = 1f\n  }\n}"


def test_symbolic_loops_and_if():
    cond = S.IfThenElse(i * m + j < n * m, store(i * m + j))
    s = loop(i, n, loop(j, m, cond))
    assert text(s) == ("for (i, 0, n) {\n  for (j, 0, m) {\n    A[((i*m) + j)] = 1f\n"
                       "  }\n}")


def test_zero_and_one_extent_loops():
    assert text(loop(i, 0, store(i))) == "0"
    assert text(S.seq(loop(i, 0, store(i)), store(c(3)))) == "A[3] = 1f"
    assert text(loop(i, 1, store(i * 4 + 2), lo=5)) == "A[22] = 1f"
    # non-serial extent-1 loops are kept
    assert text(loop(i, 1, store(i), kind=S.ForKind.PARALLEL)) == \
        "parallel (i, 0, 1) {\n  A[0] = 1f\n}"
    # a loop whose bounds make its body's index constant
    assert text(loop(i, c(3), store(emin(i, c(7))))) == "for (i, 0, 3) {\n  A[i] = 1f\n}"


def test_if_then_else():
    t = store(c(1))
    e = store(c(2))
    assert text(loop(i, 8, S.IfThenElse(i < 8, t, e))) == "for (i, 0, 8) {\n  A[1] = 1f\n}"
    assert text(loop(i, 8, S.IfThenElse(i >= 8, t, e))) == "for (i, 0, 8) {\n  A[2] = 1f\n}"
    assert text(loop(i, 8, S.IfThenElse(i >= 8, t))) == "0"
    # the condition holds inside the then-branch, its negation in the else-branch
    inner = S.IfThenElse(x < 10, store(emin(x, c(20))), store(emin(x, c(5))))
    assert text(inner) == ("if ((x < 10)) {\n  A[x] = 1f\n}\nelse {\n  A[5] = 1f\n}")
    likely = E.Call("bool", "likely", [i < n])
    s = loop(i, n, S.IfThenElse(likely, t))
    assert text(s) == "for (i, 0, n) {\n  A[1] = 1f\n}"


def test_empty_then_branch_negates_condition():
    s = S.IfThenElse(x < 10, S.Evaluate(0), store(c(2)))
    assert text(s) == "if ((x >= 10)) {\n  A[2] = 1f\n}"


def test_let_stmt():
    s = S.LetStmt(x, c(4), store(x * 2))
    assert text(s) == "A[8] = 1f"
    s = S.LetStmt(x, i * 2, store(x + 1))
    assert text(loop(i, 4, s)) == "for (i, 0, 4) {\n  x = (i*2)\n  A[(x + 1)] = 1f\n}"
    s = S.LetStmt(x, i * 2, store(c(1)))
    assert text(s) == "A[1] = 1f"
    # the let value's bounds are known in the body
    s = S.LetStmt(x, floormod(i, 4), store(emin(x, c(3))))
    assert text(s) == "x = floormod(i, 4)\nA[x] = 1f"


def test_assert_stmt():
    body = store(c(0))
    assert text(loop(i, 4, S.AssertStmt(i < 4, "oob", body))) == \
        "for (i, 0, 4) {\n  A[0] = 1f\n}"
    kept = S.AssertStmt(n > 2, "small", body)
    assert text(kept) == 'assert((n > 2), "small")\nA[0] = 1f'


def test_store_value_and_load_index():
    value = E.Load("float32", B, (i * 4 + j) - i * 4)
    assert text(S.Store(A, value, i + 0 * j)) == "A[i] = B[j]"


def test_thread_extent_attr_binds_var():
    tx = IterVar(Range(0, 32), Var("threadIdx.x"), IterVar.ThreadIndex, "threadIdx.x")
    body = S.IfThenElse(tx.var < 32, store(tx.var))
    s = S.AttrStmt(tx, "thread_extent", 32, body)
    assert text(s) == "// attr [threadIdx.x] thread_extent = 32\nA[threadIdx.x] = 1f"


def test_allocate_and_unchanged_statements_keep_identity():
    s = S.Allocate(B, "float32", [c(4) * c(2)], E.IntImm("bool", 1), store(i))
    out = simplify_stmt(s)
    assert str(out.extents[0]) == "8"
    s = loop(i, n, store(i))
    assert simplify_stmt(s) is s


def test_prim_func_and_simplify_dispatch():
    f = S.PrimFunc([A, n], {}, loop(i, n, store(i + 0)))
    out = simplify(f)
    assert isinstance(out, S.PrimFunc) and out.body is f.body
    g = S.PrimFunc([A, n], {}, loop(i, n, store((i + 1) - 1)))
    assert to_text(simplify(g)) == "for (i, 0, n) {\n  A[i] = 1f\n}"


def test_analyzer_state_is_restored():
    an = Analyzer()
    simplify_stmt(loop(i, 4, store(i)), an)
    assert not an.can_prove(i < 4)
