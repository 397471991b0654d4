"""The printer (kiln.ir.printer): the book's pseudo-code for every node."""

from __future__ import annotations

import pytest

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.printer import to_text

i, j, k = E.Var("i"), E.Var("j"), E.Var("k")
f = E.Var("f", "float32")


@pytest.mark.parametrize(("expr", "text"), [
    (tir.const(3), "3"),
    (tir.const(3, "int64"), "(int64)3"),
    (tir.const(True), "True"),
    (tir.const(1.5), "1.5f"),
    (tir.const(2.0, "float64"), "2"),
    (tir.const(2.0, "float16"), "2f16"),
    (i * j + k, "((i*j) + k)"),  # products print tight, sums spaced
    (tir.floordiv(i, 8) - tir.floormod(i, 8), "(floordiv(i, 8) - floormod(i, 8))"),
    (E.Ramp(i * 4, tir.const(1), 4), "ramp((i*4), 1, 4)"),
    (E.Broadcast(f, 16), "x16(f)"),
    (f.astype("float16"), "float16(f)"),
    (E.StringImm("shared"), '"shared"'),
    (E.Let(k, i + 1, k * k), "(let k = (i + 1) in (k*k))"),
    (tir.likely(i < 10), "likely((i < 10))"),
])
def test_expression_forms(expr, text):
    assert to_text(expr) == text
    assert repr(expr) == text


def _program() -> S.Stmt:
    """One statement using every statement form (not a meaningful program)."""
    A = tir.decl_buffer((16,), name="A")
    B = tir.decl_buffer((10,), name="B")
    T = te.placeholder((16,), name="T")
    R = te.placeholder((4,), name="R")
    t_data, l_data = E.Var("T", "handle"), E.Var("L", "handle")
    bx = te.thread_axis("blockIdx.x")
    vec = S.Store(t_data, E.Load("float32x4", A.data, E.Ramp(i * 4, tir.const(1), 4))
                  + E.Broadcast(tir.const(1.0), 4), E.Ramp(i * 4, tir.const(1), 4))
    produce_t = S.AttrStmt(T, "produce", 0, S.For(i, 0, 4, S.ForKind.PARALLEL, vec))
    guarded = S.IfThenElse(
        tir.likely(j < 9),
        S.Store(B.data, E.Load("float32", t_data, j), j),
        S.Store(B.data, tir.const(0.0), j))
    local = S.Allocate(l_data, "float32", [4], tir.const(True), S.seq(
        S.For(k, 0, 4, S.ForKind.UNROLLED, S.Store(l_data, tir.const(0.0), k)),
        S.For(k, 0, 4, S.ForKind.VECTORIZED, S.Store(l_data, tir.const(1.0), k))),
        scope="local")
    realize = S.ProducerRealize(R, [E.Range(0, 4)], tir.const(True),
                                S.ProducerStore(R, E.ProducerLoad(T, [k]) * 2.0, [k]))
    body = S.seq(
        produce_t,
        S.AttrStmt(bx, "thread_extent", 10, S.LetStmt(j, bx.var, guarded)),
        S.AttrStmt(i, "pragma_auto_unroll_max_step", 16, local),
        S.AssertStmt(i < 4, "i is in range", realize),
        S.Evaluate(E.Call("int32", "tvm_storage_sync", [E.StringImm("shared")])))
    return S.Allocate(t_data, "float32", [16], tir.const(True), body)


def test_statement_forms(golden):
    golden("ir/printer_statements", to_text(_program()))


def test_function_prints_its_body_and_module_its_functions():
    A = tir.decl_buffer((4,), name="A")
    body = S.For(i, 0, 4, S.ForKind.SERIAL, S.Store(A.data, tir.const(0.0), i))
    func = S.PrimFunc([A.data], {A.data: A}, body, name="zero")
    expected = "for (i, 0, 4) {\n  A[i] = 0f\n}"
    assert to_text(func) == expected
    assert str(S.IRModule({"zero": func})) == expected
    assert to_text(A) == "buffer(A, float32, [4])"
