"""Randomized differential tests: simplification must not change any value, and every
analysis (interval, constant bound, modular set) must contain every value. The example budget
is the Hypothesis profile's (tests/conftest.py; KILN_HYPOTHESIS_PROFILE=thorough for a long
fuzzing run)."""

from __future__ import annotations

import itertools
import random

from hypothesis import given

from kiln.arith import Analyzer, evaluate
from kiln.arith.interval import _Infinity
from kiln.ir import expr as E
from kiln.ir.printer import expr_text

from .arith_exprgen import bool_exprs, int_exprs

# ---- scenario 1: constant ranges, exhaustive ------------------------------------------------
X, Y, Z = E.Var("x"), E.Var("y"), E.Var("z")
RANGES = {X: (-3, 4), Y: (0, 5), Z: (1, 3)}
POINTS = [dict(zip(RANGES, vals, strict=True)) for vals in
          itertools.product(*(range(lo, hi + 1) for lo, hi in RANGES.values()))]


def _bound_analyzer():
    an = Analyzer()
    for v, (lo, hi) in RANGES.items():
        an.bind(v, E.Range(lo, hi + 1))
    return an


def _value(e, env):
    try:
        return evaluate(e, env)
    except ZeroDivisionError:
        return "div0"


def _end_value(x, env):
    if isinstance(x, _Infinity):
        return x.sign * float("inf")
    return evaluate(x, env)


def _check_equal(orig, simp, points):
    for env in points:
        want = _value(orig, env)
        if want == "div0":
            continue
        got = _value(simp, env)
        assert got == want, (f"{expr_text(orig)}\n  simplified to {expr_text(simp)}\n"
                             f"  at {({v.name: k for v, k in env.items()})}: {got} != {want}")


@given(int_exprs([X, Y, Z], [Z, E.Add(Z, E.IntImm("int32", 1))]))
def test_simplify_preserves_values_bound_vars(e):
    an = _bound_analyzer()
    s = an.simplify(e)
    _check_equal(e, s, POINTS)
    again = an.simplify(s)
    _check_equal(e, again, POINTS)


@given(bool_exprs(int_exprs([X, Y, Z], [Z], max_leaves=6)))
def test_simplify_preserves_conditions(e):
    an = _bound_analyzer()
    _check_equal(e, an.simplify(e), POINTS)
    if an.can_prove(e):
        assert all(_value(e, env) in (1, "div0") for env in POINTS), expr_text(e)


@given(int_exprs([X, Y, Z], [Z]))
def test_analyses_contain_every_value(e):
    an = _bound_analyzer()
    iv = an.eval_interval(e, {v: E.Range(lo, hi + 1) for v, (lo, hi) in RANGES.items()})
    lo_b, hi_b = an.const_int_bound(e)
    coeff, base = an.modular_set(e)
    # the interval is evaluated without bindings for its ends (they are constants here)
    for env in POINTS:
        v = _value(e, env)
        if v == "div0":
            continue
        assert _end_value(iv.min_value, env) <= v <= _end_value(iv.max_value, env), \
            f"{expr_text(e)}: {v} not in {iv} at {env}"
        assert (lo_b is None or lo_b <= v) and (hi_b is None or v <= hi_b), \
            f"{expr_text(e)}: {v} not in const bound {(lo_b, hi_b)}"
        assert (v - base) % coeff == 0 if coeff else v == base, \
            f"{expr_text(e)}: {v} not in modular set {(coeff, base)}"


# ---- scenario 2: symbolic ranges (i in [0, n-1], n in [1, 5]) ------------------------------
N, I, W = E.Var("n"), E.Var("i"), E.Var("w")
SYM_POINTS = [{N: n, I: i, W: w} for n in range(1, 6) for i in range(n) for w in range(-2, 4)]


def _sym_analyzer():
    an = Analyzer()
    an.bind(N, E.Range(1, 6))
    an.bind(I, E.Range(0, N))
    an.bind(W, E.Range(-2, 4))
    return an


@given(int_exprs([N, I, W], [N, E.Add(N, E.IntImm("int32", 2))]))
def test_simplify_preserves_values_symbolic_ranges(e):
    an = _sym_analyzer()
    _check_equal(e, an.simplify(e), SYM_POINTS)


@given(int_exprs([N, I, W], [N]))
def test_symbolic_interval_contains_values(e):
    an = Analyzer()
    an.bind(N, E.Range(1, 6))
    iv = an.eval_interval(e, {I: E.Range(0, N), W: E.Range(-2, 4)})
    for env in SYM_POINTS:
        v = _value(e, env)
        if v == "div0":
            continue
        lo, hi = _end_value(iv.min_value, env), _end_value(iv.max_value, env)
        assert lo <= v <= hi, f"{expr_text(e)}: {v} not in {iv} at {env}"


# ---- scenario 3: free variables (assumed non-negative) ----------------------------------------
A, Bv, C = E.Var("a"), E.Var("b"), E.Var("c")
_rng = random.Random(7)
FREE_POINTS = [{A: a, Bv: b, C: c} for a, b, c in itertools.product((0, 1, 2, 7), repeat=3)]
FREE_POINTS += [{A: _rng.randint(0, 40), Bv: _rng.randint(0, 40), C: _rng.randint(0, 40)}
                for _ in range(40)]
ANY_POINTS = FREE_POINTS + [{A: -a, Bv: b - 20, C: -c} for a, b, c in
                            ((p[A], p[Bv], p[C]) for p in FREE_POINTS)]


@given(int_exprs([A, Bv, C], [E.Add(C, E.IntImm("int32", 1))]))
def test_simplify_free_vars_nonneg(e):
    _check_equal(e, Analyzer().simplify(e), FREE_POINTS)


@given(int_exprs([A, Bv, C], []))
def test_simplify_free_vars_any_sign(e):
    an = Analyzer(nonneg_free_vars=False)
    _check_equal(e, an.simplify(e), ANY_POINTS)


@given(bool_exprs(int_exprs([X, Y], [], max_leaves=3)), int_exprs([X, Y, Z], [Z], max_leaves=8))
def test_constraints_are_respected(cond, e):
    """Inside ``constraint(cond)`` simplification must agree wherever cond holds."""
    an = _bound_analyzer()
    with an.constraint(cond):
        s = an.simplify(e)
    pts = [env for env in POINTS if _value(cond, env) == 1]
    _check_equal(e, s, pts)
