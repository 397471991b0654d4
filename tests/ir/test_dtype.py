"""Data types (kiln.ir.dtype): parsing TVM's dtype strings and the promotion rule."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.ir import dtype as dt


@pytest.mark.parametrize(("text", "code", "bits", "lanes"), [
    ("float32", "float", 32, 1),
    ("int8", "int", 8, 1),
    ("uint64", "uint", 64, 1),
    ("bool", "bool", 1, 1),
    ("float16x8", "float", 16, 8),
    ("int32x4", "int", 32, 4),
    ("handle", "handle", 64, 1),
])
def test_parse(text, code, bits, lanes):
    d = dt.parse(text)
    assert (d.code, d.bits, d.lanes) == (code, bits, lanes)
    assert str(d) == text


@pytest.mark.parametrize("bad", ["float8", "int7", "complex64", "float32x", "f32"])
def test_parse_rejects_unknown_dtypes(bad):
    with pytest.raises(ValueError, match="dtype"):
        dt.parse(bad)


def test_normalize_accepts_aliases_and_numpy_dtypes():
    assert dt.normalize("float") == "float32"
    assert dt.normalize("int") == "int32"
    assert dt.normalize(np.dtype("float64")) == "float64"
    assert dt.normalize(dt.parse("int8x16")) == "int8x16"


def test_lane_and_size_helpers():
    assert dt.lanes("float32x8") == 8
    assert dt.element_of("float32x8") == "float32"
    assert dt.with_lanes("int8", 16) == "int8x16"
    assert dt.bits("uint16") == 16
    assert dt.itemsize("bool") == 1 and dt.itemsize("float32x4") == 16
    assert dt.is_float("float16") and not dt.is_float("int32")
    assert dt.is_int("int8") and not dt.is_int("uint8") and dt.is_uint("uint8")
    assert dt.is_integer("bool") and dt.is_integer("uint8") and not dt.is_integer("float32")
    assert dt.is_bool("boolx4")


@pytest.mark.parametrize(("a", "b", "result"), [
    ("int32", "int32", "int32"),
    ("int8", "int32", "int32"),
    ("int8", "uint8", "int8"),  # signed wins a tie in width
    ("int32", "uint8", "int32"),  # the wider wins
    ("uint32", "int8", "uint32"),
    ("float32", "int64", "float32"),  # a float operand wins over any integer
    ("float16", "float64", "float64"),
    ("bool", "int8", "int8"),
    ("float32x4", "float32", "float32x4"),  # a scalar meets a vector: the vector's lanes
    ("int32", "float16x8", "float16x8"),
])
def test_promote(a, b, result):
    assert dt.promote(a, b) == result
    assert dt.promote(b, a) == result


def test_promote_rejects_different_vector_widths():
    with pytest.raises(TypeError, match="float32x4 and float32x8"):
        dt.promote("float32x4", "float32x8")
