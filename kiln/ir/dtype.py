"""Data types: parsed from TVM's strings ("float32", "int8", "bool", "float32x4", "handle").

Nodes carry their dtype as a plain string; this module answers questions about it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

_PATTERN = re.compile(r"^(int|uint|float|bfloat|bool|handle)(\d*)(?:x(\d+))?$")


@dataclass(frozen=True)
class DataType:
    """A parsed dtype: code ('int', 'uint', 'float', 'bool', 'handle'), bits and lanes."""

    code: str
    bits: int
    lanes: int = 1

    def __str__(self) -> str:
        base = "bool" if self.code == "bool" else f"{self.code}{self.bits}"
        if self.code == "handle":
            base = "handle"
        return base if self.lanes == 1 else f"{base}x{self.lanes}"

    def with_lanes(self, lanes: int) -> str:
        return str(DataType(self.code, self.bits, lanes))

    @property
    def element(self) -> str:
        return self.with_lanes(1)

    @property
    def bytes(self) -> int:
        return max(self.bits, 8) // 8


@cache
def parse(dtype: str) -> DataType:
    """Parse a dtype string; raises ValueError on anything TVM would not accept."""
    if not isinstance(dtype, str):
        dtype = str(dtype)
    m = _PATTERN.match(dtype)
    if not m:
        raise ValueError(f"unknown dtype {dtype!r}; expected e.g. 'float32', 'int8', 'bool'")
    code, bits, lanes = m.group(1), m.group(2), m.group(3)
    if code == "bool":
        return DataType("bool", 1, int(lanes or 1))
    if code == "handle":
        return DataType("handle", 64, 1)
    nbits = int(bits) if bits else 32
    if code in ("int", "uint") and nbits not in (1, 8, 16, 32, 64):
        raise ValueError(f"unsupported integer width in dtype {dtype!r}")
    if code == "float" and nbits not in (16, 32, 64):
        raise ValueError(f"unsupported float width in dtype {dtype!r}")
    return DataType(code, nbits, int(lanes or 1))


def normalize(dtype) -> str:
    """Canonical string of a dtype given as str, numpy dtype or DataType."""
    if isinstance(dtype, DataType):
        return str(dtype)
    s = str(dtype)
    if s == "float":
        s = "float32"
    elif s == "int":
        s = "int32"
    return str(parse(s))


def is_float(dtype: str) -> bool:
    return parse(dtype).code in ("float", "bfloat")


def is_int(dtype: str) -> bool:
    return parse(dtype).code == "int"


def is_uint(dtype: str) -> bool:
    return parse(dtype).code == "uint"


def is_integer(dtype: str) -> bool:
    """int, uint or bool: anything with exact integer arithmetic."""
    return parse(dtype).code in ("int", "uint", "bool")


def is_bool(dtype: str) -> bool:
    return parse(dtype).code == "bool"


def lanes(dtype: str) -> int:
    return parse(dtype).lanes


def element_of(dtype: str) -> str:
    return parse(dtype).element


def with_lanes(dtype: str, n: int) -> str:
    return parse(dtype).with_lanes(n)


def bits(dtype: str) -> int:
    return parse(dtype).bits


def itemsize(dtype: str) -> int:
    """Bytes one element of this dtype occupies in memory (bool takes one byte)."""
    return parse(dtype).bytes * parse(dtype).lanes


def promote(a: str, b: str) -> str:
    """The dtype of a binary arithmetic result, following TVM's rules for mixed operands."""
    if a == b:
        return a
    da, db = parse(a), parse(b)
    if da.lanes != db.lanes and 1 not in (da.lanes, db.lanes):
        raise TypeError(f"cannot combine vector types {a} and {b}")
    n = max(da.lanes, db.lanes)
    fa, fb = da.code == "float", db.code == "float"
    if fa and fb:
        return DataType("float", max(da.bits, db.bits), n).__str__()
    if fa:
        return da.with_lanes(n)
    if fb:
        return db.with_lanes(n)
    if da.code == "bool":
        return db.with_lanes(n)
    if db.code == "bool":
        return da.with_lanes(n)
    if da.code == db.code:
        return DataType(da.code, max(da.bits, db.bits), n).__str__()
    # signed with unsigned: the wider wins, signed on a tie
    if da.bits > db.bits:
        return da.with_lanes(n)
    if db.bits > da.bits:
        return db.with_lanes(n)
    return (da if da.code == "int" else db).with_lanes(n)


def wrap_int(value: int, dtype: str) -> int:
    """``value`` converted to integer ``dtype`` with two's-complement wrap-around."""
    d = parse(dtype)
    if d.code == "bool":
        return int(value != 0)
    if d.code not in ("int", "uint"):
        return int(value)
    m = 1 << d.bits
    v = int(value) % m
    if d.code == "int" and v >= m // 2:
        v -= m
    return v


def wrap_modulus(dtype: str) -> int | None:
    """``2**bits`` for an integer dtype whose arithmetic wraps around, else None.

    As in TVM, every intermediate has its dtype: unsigned types (all widths) and signed
    types narrower than 32 bits wrap modulo ``2**bits`` when a result leaves their range
    (C code cuts narrow results back to their type). int32/int64 overflow is undefined and
    assumed not to happen, so index arithmetic keeps its unbounded rules."""
    d = parse(dtype)
    if d.code == "uint" or (d.code == "int" and d.bits < 32):
        return 1 << d.bits
    return None
