"""IntervalSet and eval_interval, with constant and symbolic domains."""

from __future__ import annotations

import pytest

from kiln.arith import Analyzer, IntervalSet, eval_interval, neg_inf, pos_inf
from kiln.arith import intersect as iv_intersect
from kiln.arith import union as iv_union
from kiln.ir import expr as E
from kiln.ir.expr import IntImm, Range, Var
from kiln.ir.op import emax, emin, floordiv, floormod

i, j, n, m, x, y = (Var(s) for s in ("i", "j", "n", "m", "x", "y"))


def c(v: int) -> IntImm:
    return IntImm("int32", v)


def ev(e, **dom) -> str:
    return str(eval_interval(e, {globals()[k]: v for k, v in dom.items()}))


# ---- IntervalSet ---------------------------------------------------------------------------
def test_interval_set_basics():
    s = IntervalSet(0, 9)
    assert str(s) == "[0, 9]"
    assert not s.is_single_point() and s.is_finite()
    p = IntervalSet.single_point(x)
    assert p.is_single_point() and p.min_value is x and p.max_value is x
    e = IntervalSet.everything()
    assert e.is_everything() and e.min_value is neg_inf and e.max_value is pos_inf
    assert str(e) == "[neg_inf, pos_inf]"
    assert str(IntervalSet(None, 3)) == "[neg_inf, 3]"
    assert not IntervalSet(0, None).has_upper_bound()
    with pytest.raises(AttributeError):
        s.min_value = c(1)


def test_range_conversions():
    s = IntervalSet.from_range(Range(2, n))
    assert str(s) == "[2, (n - 1)]"
    r = s.to_range()
    assert str(r.min) == "2" and str(r.extent) == "(n - 2)"
    r = IntervalSet.from_range(Range.from_min_extent(i * 4, 4)).to_range()
    assert str(r.min) == "(i*4)" and str(r.extent) == "4"
    with pytest.raises(ValueError):
        IntervalSet(0, None).to_range()


def test_union_and_intersect():
    assert str(iv_union(IntervalSet(0, 5), IntervalSet(3, 9))) == "[0, 9]"
    assert str(iv_intersect(IntervalSet(0, 5), IntervalSet(3, 9))) == "[3, 5]"
    assert str(iv_union(IntervalSet(0, n), IntervalSet(1, n + 1))) == "[0, (n + 1)]"
    assert str(IntervalSet(0, n).union(IntervalSet.everything())) == "[neg_inf, pos_inf]"
    assert str(IntervalSet(0, None).intersect(IntervalSet(None, 7))) == "[0, 7]"


# ---- eval_interval: constant domains ---------------------------------------------------------
@pytest.mark.parametrize("expr, want", [
    (x * 2 + 1, "[1, 19]"),
    (x * -2 + 1, "[-17, 1]"),
    (x - x, "[0, 0]"),            # simplified before evaluation
    (emin(x, 4), "[0, 4]"),
    (emax(x, 4), "[4, 9]"),
    (floordiv(x, 4), "[0, 2]"),
    (floordiv(x - 5, 4), "[-2, 1]"),
    (floormod(x, 4), "[0, 3]"),
    (floormod(x + 4, 16), "[4, 13]"),
    (E.Div(x - 5, c(2)), "[-2, 2]"),
    (E.Mod(x - 5, c(3)), "[-2, 2]"),
    (E.Select(x < 3, x, x * 2), "[0, 18]"),
    (x < 3, "[False, True]"),
    (x < 10, "[True, True]"),
    (E.Cast("int64", x), "[(int64)0, (int64)9]"),
])
def test_eval_interval_constant(expr, want):
    assert ev(expr, x=IntervalSet(0, 9)) == want


def test_eval_interval_products_of_intervals():
    assert ev(x * y, x=IntervalSet(0, 9), y=IntervalSet(-3, 2)) == "[-27, 18]"
    assert ev(x * y, x=IntervalSet(-2, 9), y=IntervalSet(-3, 2)) == "[-27, 18]"


def test_unknown_values():
    a = Var("A", "handle")
    assert ev(E.Load("float32", a, x), x=IntervalSet(0, 9)) == "[neg_inf, pos_inf]"
    assert ev(E.Load("int32", a, y), x=IntervalSet(0, 9)) == "[A[y], A[y]]"
    assert ev(E.Call("float32", "exp", [E.Cast("float32", x)]), x=IntervalSet(0, 9)) == \
        "[neg_inf, pos_inf]"


def test_free_variables_stay_symbolic():
    assert ev(x + y, x=IntervalSet(0, 9)) == "[y, (y + 9)]"
    assert ev(x * n, x=Range(0, 4)) == "[0, (n*3)]"  # n >= 0 (free, non-negative)
    strict = Analyzer(nonneg_free_vars=False)
    assert str(strict.eval_interval(x * n, {x: Range(0, 4)})) == "[neg_inf, pos_inf]"


# ---- eval_interval: symbolic domains -------------------------------------------------------------
def test_eval_interval_symbolic():
    assert ev(i * m + j, i=Range(0, n), j=Range(0, m)) == "[0, ((n*m) - 1)]"
    assert ev(floordiv(i, m), i=Range(0, n)) == "[0, floordiv((n - 1), m)]"
    assert ev(floormod(i, 8), i=Range(0, n)) == "[0, min((n - 1), 7)]"
    assert ev(floormod(i, 8), i=Range(0, 5)) == "[0, 4]"
    assert ev(floormod(j, m), j=Range(0, m)) == "[0, (m - 1)]"
    assert ev(i * 4 + 3, i=Range(0, n)) == "[3, ((n*4) - 1)]"
    assert ev(floordiv(i * 8 + j, 8), i=Range(0, n), j=Range(0, 8)) == "[0, (n - 1)]"
    assert ev(emin(i, 31), i=Range(0, n)) == "[0, min((n - 1), 31)]"
    assert ev(x * y, x=Range(0, n), y=Range(0, m)) == "[0, ((((n*m) - n) - m) + 1)]"


def test_eval_interval_split_loops():
    """The index of a split loop covers exactly the original range."""
    iv = eval_interval(i * 32 + j, {i: Range(0, floordiv(n + 31, 32)), j: Range(0, 32)})
    assert str(iv) == "[0, ((floordiv((n + 31), 32)*32) - 1)]"


def test_eval_interval_with_bound_analyzer():
    an = Analyzer()
    an.bind(n, Range(1, 17))
    iv = an.eval_interval(i * 2, {i: Range(0, n)})
    assert str(iv) == "[0, ((n*2) - 2)]"
    assert an.const_int_bound(iv.max_value) == (0, 30)


def test_eval_interval_binds_only_the_variables_it_needs():
    """Variables of the domain unconnected to the expression's (bound inference passes
    every loop seen so far) do not change the interval; those connected through the
    variables of their sets are bound as before."""
    unrelated = {Var(f"u{k}"): Range(0, k + 2) for k in range(5)}
    chain = {i: IntervalSet(0, j), j: IntervalSet(0, x), x: Range(0, 4)}
    for e, dom, want in [(i * 2 + 1, {i: Range(0, 8)}, "[1, 15]"),
                         (i + 1, chain, "[1, (j + 1)]"),
                         (i * j, chain, "[0, (j*x)]"),
                         (j * 4, {j: IntervalSet(0, n)}, "[0, (n*4)]"),
                         (i - j, {i: IntervalSet(j, j + 3), j: Range(0, 4)},
                          "[(j - 3), (j + 3)]"),
                         # y's range is not empty: n >= 4, so min(n, 2) is 2
                         (emin(n, 2) + i, {y: Range(0, n - 3), i: Range(0, 4)}, "[2, 5]")]:
        assert str(eval_interval(e, dom)) == want
        assert str(eval_interval(e, {**unrelated, **dom})) == want
        assert str(eval_interval(e, {**dom, **unrelated})) == want
