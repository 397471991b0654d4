"""The simplifier's cast round-trip rule: ``wide(narrow(x))`` with ``x`` of the wide integer
type is ``x`` when ``x``'s const-int bound fits the narrow type (an 8-bit consumer reading
a requantized value it just saturated), and keeps both casts otherwise."""

from __future__ import annotations

import pytest

from kiln import tir
from kiln.arith import Analyzer, simplify
from kiln.ir.expr import Range, Var

x = Var("x")
f = Var("f", "float32")


def clamped(lo: int, hi: int):
    """An int32 of unknown value (from a float) saturated to ``[lo, hi]``."""
    return tir.min(tir.max(f.astype("int32") + 3, lo), hi)


@pytest.mark.parametrize("narrow,lo,hi", [("uint8", 0, 255), ("int8", -128, 127),
                                          ("uint8", 4, 200), ("int16", -300, 300)])
def test_round_trip_of_a_value_that_fits_is_dropped(narrow, lo, hi):
    v = clamped(lo, hi)
    assert str(simplify(v.astype(narrow).astype("int32"))) == str(simplify(v))


@pytest.mark.parametrize("narrow,lo,hi", [("uint8", -1, 255), ("uint8", 0, 256),
                                          ("int8", 0, 255), ("int8", -129, 0)])
def test_round_trip_of_a_value_that_may_not_fit_keeps_its_casts(narrow, lo, hi):
    out = str(simplify(clamped(lo, hi).astype(narrow).astype("int32")))
    assert out.startswith(f"int32({narrow}(")


def test_unbounded_value_keeps_its_casts():
    assert str(simplify(x.astype("uint8").astype("int32"))) == "int32(uint8(x))"


def test_bound_from_the_analyzer_context():
    an = Analyzer()
    an.bind(x, Range(0, 256))
    assert str(simplify(x.astype("uint8").astype("int32"), an)) == "x"
    an = Analyzer()
    an.bind(x, Range(0, 257))
    assert str(simplify(x.astype("uint8").astype("int32"), an)) == "int32(uint8(x))"


def test_float_round_trip_is_not_touched():
    """Only integer round trips: ``float32(uint8(x))`` and ``int32(float16(x))`` keep
    their casts (another type in between, or a float one)."""
    v = clamped(0, 255)
    assert "uint8" in str(simplify(v.astype("uint8").astype("float32")))
    assert "float16" in str(simplify(v.astype("float16").astype("int32")))
