"""Expression nodes (kiln.ir.expr): what the public builders construct, and each node's dtype.

Expressions are built the way users build them: operators on ``Var``s, ``kiln.tir`` helpers and
``kiln.tir.const``; node classes are only named to check what came out.
"""

from __future__ import annotations

import pytest

from kiln import te, tir
from kiln.ir import expr as E

i, j = E.Var("i"), E.Var("j")
f = E.Var("f", "float32")
h = E.Var("h", "float16")
u8 = E.Var("u", "uint8")
i64 = E.Var("l", "int64")


@pytest.mark.parametrize(("build", "cls", "dtype", "text"), [
    (lambda: i + 1, E.Add, "int32", "(i + 1)"),
    (lambda: i - j, E.Sub, "int32", "(i - j)"),
    (lambda: i * 2 + 3, E.Add, "int32", "((i*2) + 3)"),
    (lambda: i // 4, E.FloorDiv, "int32", "floordiv(i, 4)"),
    (lambda: i % 4, E.FloorMod, "int32", "floormod(i, 4)"),
    (lambda: f / 2.0, E.Div, "float32", "(f/2f)"),
    (lambda: f + 1, E.Add, "float32", "(f + 1f)"),
    (lambda: i + 1.5, E.Add, "float32", "(float32(i) + 1.5f)"),
    (lambda: f + i, E.Add, "float32", "(f + float32(i))"),
    (lambda: h + f, E.Add, "float32", "(float32(h) + f)"),
    (lambda: u8 + i, E.Add, "int32", "(int32(u) + i)"),
    (lambda: i64 + i, E.Add, "int64", "(l + int64(i))"),
    (lambda: -i, E.Sub, "int32", "(0 - i)"),
    (lambda: i < 3, E.LT, "bool", "(i < 3)"),
    (lambda: i != j, E.NE, "bool", "(i != j)"),
    (lambda: (i < 3) & (j > 1), E.And, "bool", "((i < 3) && (j > 1))"),
    (lambda: (i < 3) | (j > 1), E.Or, "bool", "((i < 3) || (j > 1))"),
    (lambda: ~(i < 3), E.Not, "bool", "!(i < 3)"),
    (lambda: i.astype("float32"), E.Cast, "float32", "float32(i)"),
    (lambda: tir.max(i, 3), E.Max, "int32", "max(i, 3)"),
    (lambda: tir.min(i, j), E.Min, "int32", "min(i, j)"),
    (lambda: tir.Select(i < 3, f, f + 1), E.Select, "float32", "select((i < 3), f, (f + 1f))"),
    (lambda: tir.if_then_else(i < 3, 1.0, 2.0), E.Call, "float32",
     "tvm_if_then_else((i < 3), 1f, 2f)"),
    (lambda: tir.likely(i < 3), E.Call, "bool", "likely((i < 3))"),
    (lambda: tir.exp(f), E.Call, "float32", "exp(f)"),
    (lambda: tir.all(i < 3, j > 1, i != 2), E.And, "bool",
     "(((i < 3) && (j > 1)) && (i != 2))"),
])
def test_builders_make_typed_nodes(build, cls, dtype, text):
    e = build()
    assert type(e) is cls
    assert e.dtype == dtype
    assert repr(e) == text


def test_vector_nodes_carry_lanes_in_their_dtype():
    r = E.Ramp(i, tir.const(2), 4)
    assert r.dtype == "int32x4" and repr(r) == "ramp(i, 2, 4)"
    b = E.Broadcast(f, 8)
    assert b.dtype == "float32x8" and repr(b) == "x8(f)"
    added = r + 1  # the scalar is broadcast to the ramp's lanes
    assert added.dtype == "int32x4" and repr(added) == "(ramp(i, 2, 4) + x4(1))"
    assert (r < E.Broadcast(i, 4)).dtype == "boolx4"
    assert repr(tir.const(2, "float32x4")) == "x4(2f)"


@pytest.mark.parametrize(("value", "dtype", "cls"), [
    (1, "int32", E.IntImm),
    (2**40, "int64", E.IntImm),
    (True, "bool", E.IntImm),
    (1.0, "float32", E.FloatImm),
])
def test_const_infers_dtype_from_the_python_value(value, dtype, cls):
    c = tir.const(value)
    assert type(c) is cls and c.dtype == dtype


def test_trivial_arithmetic_is_folded_at_construction():
    assert i * 1 is i and i + 0 is i and i // 1 is i
    assert (i % 1).value == 0
    assert (tir.const(2) * 3).value == 6
    assert (tir.const(5) // tir.const(-2)).value == -3  # floor semantics
    assert (tir.const(-5) % 3).value == 1
    assert tir.truncdiv(tir.const(-5), 2).value == -2  # C semantics
    assert type(tir.const(3).astype("float32")) is E.FloatImm
    assert (tir.const(2) < 3).dtype == "bool"


def test_equality_operators():
    assert tir.const(3) == 3  # constants compare by value
    eq = i == j
    assert isinstance(eq, E.EQ) and eq.dtype == "bool"
    assert bool(i == i) and not bool(i == E.Var("i"))  # variables are compared by identity


def test_integer_true_division_is_rejected():
    with pytest.raises(TypeError, match="use '//'"):
        i / 2


def test_symbolic_truth_value_is_rejected():
    with pytest.raises(ValueError, match="tvm.tir.all / tvm.tir.any"):
        bool(i < 3)


def test_nodes_are_immutable():
    with pytest.raises(AttributeError, match="immutable"):
        i.name = "k"


def test_te_vars_and_iter_vars():
    n = te.size_var("n")
    assert isinstance(n, E.SizeVar) and n.dtype == "int32"
    tx = te.thread_axis("threadIdx.x")
    assert isinstance(tx, E.IterVar) and tx.thread_tag == "threadIdx.x"
    assert repr(tx + 1) == "(threadIdx.x + 1)"  # an IterVar stands for its variable


def test_range_from_begin_end_and_min_extent():
    r = E.Range(2, 10)
    assert r.min.value == 2 and r.extent.value == 8
    assert repr(E.Range(5)) == "range(min=0, ext=5)"
    n = te.var("n")
    assert repr(E.Range.from_min_extent(1, n)) == "range(min=1, ext=n)"
