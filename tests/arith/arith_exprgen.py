"""Hypothesis strategies for random integer expressions (shared by the arith tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from kiln.ir import expr as E


def _c(v: int) -> E.IntImm:
    return E.IntImm("int32", v)


def int_exprs(leaves, divisors, max_leaves: int = 12):
    """Integer expressions over ``leaves`` (Vars); ``divisors`` are positive expressions
    usable as symbolic divisors."""
    consts = st.integers(-9, 9).map(_c)
    leaf = st.one_of(st.sampled_from(leaves), consts)
    pos_const = st.integers(1, 9).map(_c)
    divisor = st.one_of(pos_const, st.sampled_from(divisors)) if divisors else pos_const

    def extend(children):
        small = st.integers(-4, 4).map(_c)
        cond = st.builds(
            lambda op, a, b: op(a, b),
            st.sampled_from([E.LT, E.LE, E.GT, E.GE, E.EQ, E.NE]), children, children)
        logic = st.one_of(
            cond,
            st.builds(E.And, cond, cond),
            st.builds(E.Or, cond, cond),
            st.builds(E.Not, cond),
        )
        return st.one_of(
            st.builds(E.Add, children, children),
            st.builds(E.Sub, children, children),
            st.builds(E.Mul, children, small),
            st.builds(E.Mul, small, children),
            st.builds(E.Mul, children, children),
            st.builds(E.FloorDiv, children, divisor),
            st.builds(E.FloorMod, children, divisor),
            st.builds(E.Div, children, pos_const),
            st.builds(E.Mod, children, pos_const),
            st.builds(E.Min, children, children),
            st.builds(E.Max, children, children),
            st.builds(E.Select, logic, children, children),
        )

    return st.recursive(leaf, extend, max_leaves=max_leaves)


def bool_exprs(ints):
    cmp = st.builds(lambda op, a, b: op(a, b),
                    st.sampled_from([E.LT, E.LE, E.GT, E.GE, E.EQ, E.NE]), ints, ints)
    return st.one_of(cmp, st.builds(E.And, cmp, cmp), st.builds(E.Or, cmp, cmp),
                     st.builds(E.Not, cmp))
