"""Analyzer: bindings, scopes, constraints and the bound/modular/proof queries."""

from __future__ import annotations

from kiln.arith import Analyzer, ConstIntBound, IntervalSet, const_int_bound
from kiln.ir import expr as E
from kiln.ir.expr import IntImm, Range, SizeVar, Var
from kiln.ir.op import emin, floordiv, floormod

i, j, n, m, x, y = (Var(s) for s in ("i", "j", "n", "m", "x", "y"))


def c(v: int) -> IntImm:
    return IntImm("int32", v)


def test_const_int_bound():
    an = Analyzer()
    an.bind(i, Range(0, 8))
    an.bind(j, Range(-2, 3))
    assert an.const_int_bound(i * 4 + j) == (-2, 30)
    assert an.const_int_bound(i * j) == (-14, 14)
    assert an.const_int_bound(floordiv(i - 3, 2)) == (-2, 2)
    assert an.const_int_bound(floormod(x, 8)) == (0, 7)
    assert an.const_int_bound(E.Mod(j, c(2))) == (-1, 1)
    assert an.const_int_bound(emin(i, j)) == (-2, 2)
    assert an.const_int_bound(E.Select(x < y, i, j)) == (-2, 7)
    assert an.const_int_bound(i < j) == (0, 1)
    b = an.const_int_bound(x)
    assert isinstance(b, ConstIntBound) and b.min_value == 0 and b.max_value is None
    assert an.const_int_bound(E.Cast("int8", x * 1000)) == (-128, 127)
    assert an.const_int_bound(E.Cast("int64", i)) == (0, 7)
    assert an.const_int_bound(E.Load("uint8", Var("A", "handle"), i)) == (0, 255)
    assert const_int_bound(c(5)) == (5, 5)


def test_sign_assumption():
    assert Analyzer().const_int_bound(x) == (0, None)
    assert Analyzer(nonneg_free_vars=False).const_int_bound(x) == (None, None)
    assert Analyzer(nonneg_free_vars=False).const_int_bound(SizeVar("s")) == (0, None)
    assert Analyzer(nonneg_free_vars=False).const_int_bound(Var("u", "uint32")) == (0, None)


def test_bind_forms():
    an = Analyzer()
    an.bind(i, Range(2, 10))  # Range(begin, end)
    assert an.const_int_bound(i) == (2, 9)
    an.bind(j, IntervalSet(-1, 5))
    assert an.const_int_bound(j) == (-1, 5)
    an.bind(x, 7)
    assert str(an.simplify(x + 1)) == "8"
    an.bind(y, i * 2)
    assert an.const_int_bound(y) == (4, 18)
    an.update(m, (3, 4))
    assert an.const_int_bound(m) == (3, 4)


def test_range_binding_implies_nonempty_extent():
    an = Analyzer(nonneg_free_vars=False)
    an.bind(i, Range(0, n))
    assert an.can_prove(n >= 1)
    assert an.const_int_bound(i)[0] == 0


def test_scopes_undo_bindings():
    an = Analyzer()
    with an.scope():
        an.bind(i, Range(0, 4))
        assert an.can_prove(i < 4)
    assert not an.can_prove(i < 4)
    with an.constraint(x < 10):
        assert an.can_prove(x <= 9)
        assert an.const_int_bound(x) == (0, 9)
    assert not an.can_prove(x <= 9)


def test_constraints():
    an = Analyzer()
    an.bind(i, Range(0, 100))
    with an.constraint(E.And(i * 4 + 3 < 40, i >= 2)):
        assert an.const_int_bound(i) == (2, 9)
        assert an.can_prove(i * 4 < 37)
        assert an.can_prove(i * 4 + 3 < 40)
    with an.constraint(i < n):
        assert an.can_prove(i < n)
        assert str(an.simplify(emin(i, n))) == "i"
        assert str(an.simplify(emin(i + 1, n))) == "(i + 1)"
    with an.constraint(E.Call("bool", "likely", [x * 32 + y < n])):
        assert an.can_prove(x * 32 + y < n)
        assert str(an.simplify(x * 32 + y >= n)) == "False"


def test_can_prove():
    an = Analyzer()
    an.bind(i, Range(0, n))
    an.bind(j, Range(0, m))
    assert an.can_prove(i < n)
    assert an.can_prove(i * m + j < n * m)
    assert an.can_prove(E.And(i >= 0, j < m))
    assert an.can_prove(E.Or(i < 0, j < m))
    assert not an.can_prove(i < n - 1)
    assert not an.can_prove(x < y)
    assert an.can_prove_less(i, n)
    assert an.can_prove_greater_equal(i, 0)
    assert an.can_prove_equal(floordiv(x, 8) * 8 + floormod(x, 8), x)
    assert an.can_prove_equal((x + y) * 2, y * 2 + x * 2)
    assert not an.can_prove_equal(x, y)


def test_modular_set():
    an = Analyzer()
    assert an.modular_set(x * 8 + 4) == (8, 4)
    assert an.modular_set(x * 8 + y * 12 + 2) == (4, 2)
    assert an.modular_set(c(5)) == (0, 5)
    assert an.modular_set(floordiv(x * 8 + 4, 2)) == (4, 2)
    assert an.modular_set(floormod(x * 6 + 1, 4)) == (2, 1)
    assert an.modular_set(emin(x * 4, y * 6 + 2)) == (2, 0)
    assert an.modular_set(x) == (1, 0)


def test_caches_follow_facts():
    an = Analyzer()
    e = emin(i, c(16))
    assert str(an.simplify(e)) == "min(i, 16)"
    an.bind(i, Range(0, 8))
    assert str(an.simplify(e)) == "i"
