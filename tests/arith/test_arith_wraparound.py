"""The simplifier on wrapping integer types (uint8/16/32/64, int8/16): every intermediate has
its dtype and wraps modulo ``2**bits``, so rules that read expressions as unbounded integers
(min/max/compare cancellations, division rules, constant bounds) apply only where nothing
can wrap. Checked against numpy's wrapping arithmetic on random expressions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.arith import Analyzer, IntervalSet, evaluate
from kiln.ir import expr as E
from kiln.ir.expr import Range

DTYPES = ("uint8", "uint16", "int8", "int16")
_NP_BIN = {
    E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.FloorDiv: np.floor_divide,
    E.FloorMod: np.mod, E.Min: np.minimum, E.Max: np.maximum, E.LT: np.less,
    E.LE: np.less_equal, E.GT: np.greater, E.GE: np.greater_equal, E.EQ: np.equal,
    E.NE: np.not_equal,
}


def np_eval(e: E.PrimExpr, env: dict):
    """``e`` evaluated on numpy scalars of each node's dtype (wrapping arithmetic)."""
    t = type(e)
    if t is E.IntImm:
        return np.array(e.value).astype(e.dtype)[()]
    if isinstance(e, E.Var):
        return np.array(env[e]).astype(e.dtype)[()]
    if t in _NP_BIN:
        with np.errstate(over="ignore"):
            return _NP_BIN[t](np_eval(e.a, env), np_eval(e.b, env))
    if t is E.And:
        return bool(np_eval(e.a, env)) and bool(np_eval(e.b, env))
    if t is E.Or:
        return bool(np_eval(e.a, env)) or bool(np_eval(e.b, env))
    if t is E.Not:
        return not np_eval(e.a, env)
    if t is E.Select:
        c = np_eval(e.condition, env)
        return np_eval(e.true_value, env) if c else np_eval(e.false_value, env)
    raise NotImplementedError(f"np_eval: {t.__name__}")


def _range(dtype: str) -> tuple[int, int]:
    return {"uint8": (0, 255), "uint16": (0, 65535), "int8": (-128, 127),
            "int16": (-32768, 32767)}[dtype]


def _exprs(dtype: str, leaves: list[E.Var]):
    lo, hi = _range(dtype)
    const = st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, 1])).map(
        lambda v: E.IntImm(dtype, v))
    divisor = st.integers(1, min(hi, 17)).map(lambda v: E.IntImm(dtype, v))

    def extend(ch):
        cmp = st.builds(lambda op, a, b: op(a, b),
                        st.sampled_from([E.LT, E.LE, E.GT, E.GE, E.EQ, E.NE]), ch, ch)
        return st.one_of(
            st.builds(E.Add, ch, ch), st.builds(E.Sub, ch, ch), st.builds(E.Mul, ch, ch),
            st.builds(E.FloorDiv, ch, divisor), st.builds(E.FloorMod, ch, divisor),
            st.builds(E.Min, ch, ch), st.builds(E.Max, ch, ch),
            st.builds(E.Select, cmp, ch, ch), cmp.map(lambda c: E.Select(c, c.a, c.b)))

    return st.recursive(st.one_of(st.sampled_from(leaves), const), extend, max_leaves=8)


@st.composite
def _case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    xs = [E.Var(n, dtype) for n in "abc"]
    e = draw(_exprs(dtype, xs))
    lo, hi = _range(dtype)
    envs = [{x: draw(st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0])))
             for x in xs} for _ in range(4)]
    return e, envs


@settings(max_examples=80, deadline=None)
@given(_case())
def test_simplify_keeps_wrapping_semantics(case):
    e, envs = case
    s = Analyzer(nonneg_free_vars=False).simplify(e)
    for env in envs:
        want = int(np_eval(e, env))
        assert int(np_eval(s, env)) == want, (str(e), str(s), env)
        assert evaluate(e, env) == want  # the reference evaluator wraps the same way


def test_max_of_wrapping_sum():
    """``max(a + b, b)`` on uint8 is not ``a + b``: 200 + 100 wraps to 44 < 100."""
    a, b = E.Var("a", "uint8"), E.Var("b", "uint8")
    an = Analyzer()
    e = E.Max(a + b, b)
    assert str(an.simplify(e)) == str(e)
    assert an.const_int_bound(a + b) == (0, 255)
    assert str(an.simplify(a + b - b)) == "a"  # a ring: cancellation modulo 256 holds


def test_no_overflow_keeps_rules():
    """Where the ranges prove that nothing wraps, the rules apply as before."""
    a, b = E.Var("a", "uint8"), E.Var("b", "uint8")
    an = Analyzer()
    an.bind(a, Range(0, 100))
    an.bind(b, Range(0, 100))
    assert an.const_int_bound(a + b) == (0, 198)
    assert str(an.simplify(E.Max(a + b, b))) == "(a + b)"
    i = E.Var("i")
    assert str(Analyzer().simplify(E.Max(i + 1, i))) == "(i + 1)"  # int32: no wrap assumed


def test_interval_and_modular_set_wrap():
    """Interval evaluation and modular sets of uint8 arithmetic account for the wrap."""
    a, b = E.Var("a", "uint8"), E.Var("b", "uint8")
    an = Analyzer()

    def iv(hi: int) -> IntervalSet:
        return IntervalSet(E.IntImm("uint8", 0), E.IntImm("uint8", hi))

    assert str(an.eval_interval(a + b, {a: iv(200), b: iv(100)})) == \
        "[(uint8)0, (uint8)255]"
    assert str(an.eval_interval(a + b, {a: iv(100), b: iv(100)})) == \
        "[(uint8)0, (uint8)200]"
    assert an.modular_set(a * E.IntImm("uint8", 3)) == (1, 0)  # 3*a mod 256: any value
    assert an.modular_set(a * E.IntImm("uint8", 4) + E.IntImm("uint8", 1)) == (4, 1)


def test_division_rule_output_must_not_wrap():
    """``floordiv(2 - a, 2)`` with ``a in [0, 1]`` does not wrap, but the split
    ``floordiv(0 - a, 2) + 1`` would (``0 - 1`` is 255 on uint8): it is kept."""
    a = E.Var("a", "uint8")
    an = Analyzer()
    an.bind(a, Range(E.IntImm("uint8", 0), E.IntImm("uint8", 2)))
    e = E.FloorDiv(E.IntImm("uint8", 2) - a, E.IntImm("uint8", 2))
    s = an.simplify(e)
    for v in (0, 1):
        assert int(np_eval(s, {a: v})) == int(np_eval(e, {a: v}))


def test_constraint_on_wrapping_sum_bounds_no_operand():
    """``a + b < 10`` on uint8 holds for ``a = 250, b = 10``: it does not bound ``a``."""
    a, b = E.Var("a", "uint8"), E.Var("b", "uint8")
    an = Analyzer()
    an.add_constraint(a + b < E.IntImm("uint8", 10))
    assert an.const_int_bound(a) == (0, None)
    an = Analyzer()
    an.add_constraint(a < E.IntImm("uint8", 10))
    assert an.const_int_bound(a) == (0, 9)
