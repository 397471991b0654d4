"""``floordiv(x*c1 + r, c2) -> floordiv(x, c2/c1)`` and ``floormod(x*c1 + r, c2) ->
floormod(x, c2/c1)*c1 + r`` when ``c1`` divides ``c2`` and the remainder ``r`` stays in one
block of ``c1`` (TVM's rewrite simplifier has the same pair): the index of a split of a
fused or reshaped axis, which otherwise gathers lane by lane in a vectorized loop."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.arith import Analyzer, evaluate, simplify
from kiln.ir import expr as E
from kiln.ir.expr import Range, Var
from kiln.ir.functor import collect_vars, post_order_visit
from kiln.ir.op import floordiv, floormod
from kiln.topi.x86.bf16_intrin import round_to_bf16
from kiln.topi.x86.injective import schedule_injective

x, y, z = Var("x"), Var("y"), Var("z")


def _bound(**ranges: tuple[int, int]) -> Analyzer:
    """An analyzer with each named variable in ``[lo, hi]``."""
    an = Analyzer()
    for name, (lo, hi) in ranges.items():
        an.bind(globals()[name], Range(lo, hi + 1))
    return an


def _text(e, an: Analyzer) -> str:
    return str(simplify(e, an))


def test_transpose_index_of_a_split_axis():
    """The brief's case: ``j = jo*16 + ji`` over a row of 64."""
    jo, ji = Var("jo"), Var("ji")
    an = Analyzer()
    an.bind(ji, Range(0, 16))
    assert str(simplify(floordiv(jo * 16 + ji, 64), an)) == "floordiv(jo, 4)"
    assert str(simplify(floormod(jo * 16 + ji, 64), an)) == "((floormod(jo, 4)*16) + ji)"


def test_remainder_of_several_terms_and_offsets():
    an = _bound(y=(0, 3), z=(0, 3))
    assert _text(floordiv(x * 16 + y * 4 + z, 64), an) == "floordiv(x, 4)"
    assert _text(floormod(x * 16 + y * 4 + z, 64), an) == \
        "(((floormod(x, 4)*16) + (y*4)) + z)"
    an = _bound(y=(16, 31))  # one block above: floordiv(x*16 + y, 64) == floordiv(x + 1, 4)
    assert _text(floordiv(x * 16 + y, 64), an) == "floordiv((x + 1), 4)"
    assert _text(floormod(x * 16 + y, 64), an) == "(((floormod((x + 1), 4)*16) + y) - 16)"


def test_kept_when_the_remainder_spans_two_blocks():
    an = _bound(y=(0, 16))
    assert _text(floordiv(x * 16 + y, 64), an) == "floordiv(((x*16) + y), 64)"
    assert _text(floordiv(x * 16 + y, 64), Analyzer()) == "floordiv(((x*16) + y), 64)"


def test_common_factor_is_the_constant_remainder_case():
    assert _text(floordiv(x * 4 + 5, 8), Analyzer()) == "floordiv((x + 1), 2)"
    assert _text(floormod(x * 6 + 4, 4), Analyzer()) == "(floormod(x, 2)*2)"


def test_truncating_division_of_a_nonnegative_numerator():
    an = _bound(x=(0, 100), y=(0, 15))
    assert _text(E.Div(x * 16 + y, E.IntImm("int32", 64)), an) == "(x/4)"
    assert _text(E.Mod(x * 16 + y, E.IntImm("int32", 64)), an) == "(((x % 4)*16) + y)"


def _divides_y(e) -> bool:
    """Whether ``y`` occurs inside a division or modulo of ``e``."""
    found = []

    def visit(n):
        if isinstance(n, E.FloorDiv | E.FloorMod) and y in collect_vars(n):
            found.append(n)

    post_order_visit(e, visit)
    return bool(found)


@given(c1=st.integers(2, 16), m=st.integers(1, 8), p=st.integers(-3, 3).filter(bool),
       block=st.integers(-2, 2), off=st.integers(0, 15), width=st.integers(0, 15),
       x_lo=st.integers(-20, 5), z_coef=st.integers(0, 3))
def test_block_rules_property(c1, m, p, block, off, width, x_lo, z_coef):
    """``floordiv``/``floormod`` of ``x*c1*p + z*c1*z_coef + y`` by ``c1*m``, with ``y`` in
    ``[block*c1 + off, block*c1 + off + width]``: equal to the original at every point, and
    free of a division of ``y`` whenever ``y``'s range lies in one block of ``c1``."""
    off, width = off % c1, width % c1
    y_lo = block * c1 + off
    ranges = {x: (x_lo, x_lo + 6), y: (y_lo, y_lo + width), z: (0, 2)}
    an = Analyzer()
    for v, (lo, hi) in ranges.items():
        an.bind(v, Range(lo, hi + 1))
    num = x * (c1 * p) + z * (c1 * z_coef) + y
    for op in (floordiv, floormod):
        orig = op(num, c1 * m)
        simp = an.simplify(orig)
        if off + width < c1:
            assert not _divides_y(simp), (str(orig), str(simp))
        rng = np.random.default_rng(c1 * 1000 + m)
        for _ in range(40):
            env = {v: int(rng.integers(lo, hi + 1)) for v, (lo, hi) in ranges.items()}
            assert evaluate(simp, env) == evaluate(orig, env), (str(orig), str(simp), env)


def test_transpose_bf16_rounding_loads_contiguous_vectors():
    """The attention context transpose with its bf16 rounding (docs/precision.md): the
    vectorized loop reads ``A`` as whole vectors, no longer element by element."""
    a = te.placeholder((1, 12, 128, 64), name="A")
    t = te.compute((1, 128, 12, 64), lambda n, i, h, d: a[n, h, i, d], name="T")
    r = te.compute((1, 128, 768), lambda n, i, j: t[n, i, j // 64, j % 64], name="R")
    b = te.compute(r.shape, lambda *i: round_to_bf16(r(*i)), name="B", tag="elemwise")
    s = schedule_injective([b])
    f = kiln.build(s, [a, b], target="llvm")
    src = f.get_source()
    assert re.search(r"\*\(float32x\d+_u\*\)\(A \+", src)
    assert "A[" not in src.split("default_function_compute(")[1]
    av = np.random.default_rng(0).standard_normal((1, 12, 128, 64)).astype("float32")
    bv = kiln.nd.array(np.zeros((1, 128, 768), "uint16"))
    f(kiln.nd.array(av), bv)
    want = av.transpose(0, 2, 1, 3).reshape(1, 128, 768).view("uint32")
    got = bv.numpy().astype("uint32") << 16
    # round to nearest even: the rounded value is within half a bf16 unit of the input
    diff = np.abs(got.view("float32") - want.view("float32"))
    assert np.all(diff <= np.abs(want.view("float32")) * 2.0 ** -8)
