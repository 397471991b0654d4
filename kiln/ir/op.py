"""Expression builders: constants, arithmetic, comparisons, logic and casts (TVM's ``op.h``).

Every builder takes expressions or Python numbers and returns a well-typed ``PrimExpr``:

* **conversion** — :func:`convert` turns a Python number (or IterVar, numpy scalar) into an
  expression (``int`` -> ``int32``, or ``int64`` when it does not fit; ``float`` ->
  ``float32``; ``bool`` -> ``bool``);
* **type rules** — :func:`match_types` brings the two operands of a binary operator to one
  dtype, as TVM does: a Python number takes the dtype of the expression it meets
  (``i8 + 1`` stays ``int8``, ``f16 * 2.0`` stays ``float16``); two expressions of different
  dtypes are cast to :func:`kiln.ir.dtype.promote` of the two, a scalar meeting a vector is
  broadcast to its lanes;
* **folding** — the trivial cases fold as in TVM's operators: two constants give a constant
  (``2 + 3`` is ``IntImm 5``), ``x + 0``, ``x * 1``, ``x // 1`` give ``x``; nothing else is
  simplified here (that is :mod:`kiln.arith`'s job).

Python operators on expressions (``a + b``, ``a < b``, ``~c``) call these builders
(:mod:`kiln.ir.expr` holds the node classes and installs this module as their builders);
``tvm.tir.*`` (:mod:`kiln.tir.op`) re-exports them under TVM's names.
"""

from __future__ import annotations

import sys
from typing import Any

from . import dtype as dt
from . import expr
from .expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Broadcast,
    Call,
    Cast,
    CmpOp,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    IterVar,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    PrimExpr,
    Sub,
)

__all__ = [
    "make_const", "const", "convert", "match_types", "add", "sub", "mul", "true_div", "div",
    "truncmod", "floordiv", "floormod", "min_value", "max_value", "emin", "emax", "compare",
    "logical_and", "logical_or", "logical_not", "cast", "call_intrin",
]


# ---------------------------------------------------------------------------------------
# Constants and conversion
# ---------------------------------------------------------------------------------------
def make_const(value, dtype: str) -> PrimExpr:
    """A constant of ``dtype`` (vector dtypes give a Broadcast)."""
    d = dt.parse(dtype)
    if d.lanes > 1:
        return Broadcast(make_const(value, d.element), d.lanes)
    if d.code == "float":
        return FloatImm(dtype, float(value))
    if d.code == "bool":
        return IntImm("bool", 1 if value else 0)
    return IntImm(dtype, int(value))


def const(value, dtype: str | None = None) -> PrimExpr:
    """``tvm.tir.const``: a constant; dtype inferred from the Python value when omitted."""
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if _fits_int32(value) else "int64"
        else:
            dtype = "float32"
    return make_const(value, dtype)


def _fits_int32(value: int) -> bool:
    return -(2**31) <= value < 2**31


def index_dtype(*extents) -> str:
    """The dtype of loop counters and indices that range over the product of ``extents``
    (TVM's int64 rule): ``int64`` when one extent is a non-constant int64 expression (a
    ``te.var("n", "int64")``) or when the product of the constant ones does not fit in
    int32; otherwise ``int32``. A constant counts by its value, not its dtype: a small int64
    constant (a numpy shape) keeps int32 indices."""
    size = 1
    for e in extents:
        e = convert(e)
        if isinstance(e, IntImm):
            size *= abs(e.value)
        elif dt.bits(e.dtype) > 32:
            return "int64"
    return "int32" if _fits_int32(size) else "int64"


def widen(value, dtype: str) -> PrimExpr:
    """``value`` cast to the integer ``dtype`` where that is wider, else unchanged: an int32
    index term of an int64 index, never a narrowing."""
    value = convert(value)
    return cast(value, dtype) if dt.bits(value.dtype) < dt.bits(dtype) else value


def convert(value: Any) -> PrimExpr:
    """Turn a Python number (or IterVar, numpy scalar) into an expression."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, bool):
        return IntImm("bool", int(value))
    if isinstance(value, int):
        return const(value)
    if isinstance(value, float):
        return FloatImm("float32", value)
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return make_const(value.item(), str(value.dtype))
    except ImportError:  # pragma: no cover
        pass
    if hasattr(value, "_expr"):
        return value._expr()
    raise TypeError(f"cannot convert {value!r} of type {type(value).__name__} to an expression")


# ---------------------------------------------------------------------------------------
# Type rules of binary operators
# ---------------------------------------------------------------------------------------
def _convert_like(value, other: PrimExpr) -> PrimExpr:
    """Convert a Python scalar to the dtype of the expression it meets, as TVM does."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, bool):
        return IntImm("bool", int(value))
    if isinstance(value, int) and not isinstance(other, IterVar):
        if dt.is_float(other.dtype):
            return make_const(value, dt.element_of(other.dtype))
        if dt.is_integer(other.dtype) and not dt.is_bool(other.dtype):
            return make_const(value, dt.element_of(other.dtype))
        return const(value)
    if isinstance(value, float):
        if dt.is_float(other.dtype):
            return make_const(value, dt.element_of(other.dtype))
        return FloatImm("float32", value)
    return convert(value)


def match_types(a, b) -> tuple[PrimExpr, PrimExpr]:
    """The operands of a binary operator as two expressions of one dtype (TVM's
    ``BinaryOpMatchTypes``): Python numbers take the other operand's dtype, different dtypes
    are cast to their promotion, a scalar meeting a vector is broadcast."""
    if isinstance(a, IterVar):
        a = a.var
    if isinstance(b, IterVar):
        b = b.var
    if not isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
        a, b = convert(a), convert(b)
    elif not isinstance(a, PrimExpr):
        a = _convert_like(a, b)
    elif not isinstance(b, PrimExpr):
        b = _convert_like(b, a)
    if a.dtype != b.dtype:
        t = dt.promote(a.dtype, b.dtype)
        la, lb = dt.lanes(a.dtype), dt.lanes(b.dtype)
        if la == 1 and lb > 1:
            a = Broadcast(cast(a, dt.element_of(t)), lb)
        if lb == 1 and la > 1:
            b = Broadcast(cast(b, dt.element_of(t)), la)
        a, b = cast(a, t), cast(b, t)
    return a, b


# ---------------------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------------------
def _is_const(e, v=None) -> bool:
    if isinstance(e, IntImm | FloatImm):
        return v is None or e.value == v
    return False


def _int_imm(dtype: str, value: int) -> IntImm:
    """A folded integer constant; in a dtype whose arithmetic wraps around (unsigned, and
    signed narrower than 32 bits: ``dtype.wrap_modulus``) it wraps as the computation would."""
    return IntImm(dtype, dt.wrap_int(value, dtype) if dt.wrap_modulus(dtype) else value)


def add(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return _int_imm(a.dtype, a.value + b.value)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm):
        return FloatImm(a.dtype, a.value + b.value)
    if _is_const(b, 0) and not dt.is_bool(a.dtype):
        return a
    if _is_const(a, 0) and not dt.is_bool(b.dtype):
        return b
    return Add(a, b)


def sub(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return _int_imm(a.dtype, a.value - b.value)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm):
        return FloatImm(a.dtype, a.value - b.value)
    if _is_const(b, 0):
        return a
    return Sub(a, b)


def mul(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return _int_imm(a.dtype, a.value * b.value)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm):
        return FloatImm(a.dtype, a.value * b.value)
    if dt.is_integer(a.dtype):
        if _is_const(b, 1):
            return a
        if _is_const(a, 1):
            return b
        if _is_const(a, 0) or _is_const(b, 0):
            return make_const(0, a.dtype)
    return Mul(a, b)


def true_div(a, b) -> PrimExpr:
    """``a / b`` on expressions: float division; integer operands are refused, as in TVM."""
    a, b = match_types(a, b)
    if dt.is_integer(a.dtype) and dt.is_integer(b.dtype):
        raise TypeError(
            "integer division with '/' is ambiguous: use '//' (floordiv), tvm.tir.floordiv / "
            "floormod, or tvm.tir.truncdiv / truncmod explicitly")
    return div(a, b)


def div(a, b) -> PrimExpr:
    """``tvm.tir.div``: float division, or truncating integer division."""
    a, b = match_types(a, b)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm) and b.value != 0:
        return FloatImm(a.dtype, a.value / b.value)
    if isinstance(a, IntImm) and isinstance(b, IntImm) and b.value != 0:
        q = abs(a.value) // abs(b.value)
        return IntImm(a.dtype, q if (a.value >= 0) == (b.value > 0) else -q)
    if _is_const(b, 1):
        return a
    return Div(a, b)


def truncmod(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm) and b.value != 0:
        r = abs(a.value) % abs(b.value)
        return IntImm(a.dtype, r if a.value >= 0 else -r)
    return Mod(a, b)


def floordiv(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if dt.is_float(a.dtype):
        return call_intrin(a.dtype, "floor", div(a, b))
    if isinstance(a, IntImm) and isinstance(b, IntImm) and b.value != 0:
        return IntImm(a.dtype, a.value // b.value)
    if _is_const(b, 1):
        return a
    return FloorDiv(a, b)


def floormod(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if dt.is_float(a.dtype):
        return sub(a, mul(floordiv(a, b), b))
    if isinstance(a, IntImm) and isinstance(b, IntImm) and b.value != 0:
        return IntImm(a.dtype, a.value % b.value)
    if _is_const(b, 1):
        return make_const(0, a.dtype)
    return FloorMod(a, b)


def min_value(dtype: str) -> PrimExpr:
    d = dt.parse(dtype)
    if d.code == "float":
        return FloatImm(dtype, {16: -65504.0, 32: -3.4028234663852886e38,
                                64: -1.7976931348623157e308}[d.bits])
    if d.code == "uint" or d.code == "bool":
        return IntImm(dtype, 0)
    return IntImm(dtype, -(2 ** (d.bits - 1)))


def max_value(dtype: str) -> PrimExpr:
    d = dt.parse(dtype)
    if d.code == "float":
        return FloatImm(dtype, {16: 65504.0, 32: 3.4028234663852886e38,
                                64: 1.7976931348623157e308}[d.bits])
    if d.code == "bool":
        return IntImm(dtype, 1)
    if d.code == "uint":
        return IntImm(dtype, 2**d.bits - 1)
    return IntImm(dtype, 2 ** (d.bits - 1) - 1)


def emin(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if isinstance(a, IntImm | FloatImm) and isinstance(b, IntImm | FloatImm):
        return a if a.value <= b.value else b
    return Min(a, b)


def emax(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if isinstance(a, IntImm | FloatImm) and isinstance(b, IntImm | FloatImm):
        return a if a.value >= b.value else b
    return Max(a, b)


# ---------------------------------------------------------------------------------------
# Comparison and logic
# ---------------------------------------------------------------------------------------
def compare(cls: type[CmpOp], a, b) -> PrimExpr:
    """The comparison node ``cls`` (``EQ``, ``NE``, ``LT``, ...) of ``a`` and ``b``; two
    constants fold to a ``bool`` constant."""
    a, b = match_types(a, b)
    if isinstance(a, IntImm | FloatImm) and isinstance(b, IntImm | FloatImm):
        ops = {EQ: a.value == b.value, NE: a.value != b.value, LT: a.value < b.value,
               LE: a.value <= b.value, GT: a.value > b.value, GE: a.value >= b.value}
        return IntImm("bool", int(ops[cls]))
    return cls(a, b)


def _to_bool(x) -> PrimExpr:
    x = convert(x)
    if not dt.is_bool(x.dtype):
        x = NE(x, make_const(0, x.dtype))
    return x


def logical_and(a, b) -> PrimExpr:
    a, b = _to_bool(a), _to_bool(b)
    if isinstance(a, IntImm):
        return b if a.value else a
    if isinstance(b, IntImm):
        return a if b.value else b
    return And(a, b)


def logical_or(a, b) -> PrimExpr:
    a, b = _to_bool(a), _to_bool(b)
    if isinstance(a, IntImm):
        return a if a.value else b
    if isinstance(b, IntImm):
        return b if b.value else a
    return Or(a, b)


def logical_not(a) -> PrimExpr:
    a = _to_bool(a)
    if isinstance(a, IntImm):
        return IntImm("bool", 1 - a.value)
    return Not(a)


#: Python's operator of each bitwise intrinsic (constant folding, error messages)
_BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}


def _bitwise(op: str, a, b) -> PrimExpr:
    """``a op b`` bit by bit (TVM's ``bitwise_and``/``or``/``xor``): on two conditions the
    logical operator (a bool is one bit, as in TVM), on integers the intrinsic ``op``
    (folded when both are constants); floats have no bits to combine."""
    a, b = match_types(a, b)
    if dt.is_float(a.dtype):
        raise TypeError(f"float type does not support {_BITWISE[op]} operation "
                        f"({op} of {a.dtype})")
    if dt.is_bool(a.dtype):
        return {"bitwise_and": logical_and, "bitwise_or": logical_or}.get(
            op, lambda x, y: compare(NE, x, y))(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        folded = {"bitwise_and": a.value & b.value, "bitwise_or": a.value | b.value,
                  "bitwise_xor": a.value ^ b.value}[op]
        return make_const(folded, a.dtype)
    return Call(a.dtype, op, [a, b])


def bitwise_and(a, b) -> PrimExpr:
    """``a & b`` bit by bit (``tvm.tir.bitwise_and``; on conditions, logical and)."""
    return _bitwise("bitwise_and", a, b)


def bitwise_or(a, b) -> PrimExpr:
    """``a | b`` bit by bit (``tvm.tir.bitwise_or``; on conditions, logical or)."""
    return _bitwise("bitwise_or", a, b)


def bitwise_xor(a, b) -> PrimExpr:
    """``a ^ b`` bit by bit (``tvm.tir.bitwise_xor``; on conditions, inequality)."""
    return _bitwise("bitwise_xor", a, b)


def bitwise_not(a) -> PrimExpr:
    """``~a`` bit by bit (``tvm.tir.bitwise_not``; on a condition, logical not)."""
    a = convert(a)
    if dt.is_float(a.dtype):
        raise TypeError(f"float type does not support ~ operation (bitwise_not of {a.dtype})")
    if dt.is_bool(a.dtype):
        return logical_not(a)
    if isinstance(a, IntImm):
        return make_const(~a.value, a.dtype)
    return Call(a.dtype, "bitwise_not", [a])


# ---------------------------------------------------------------------------------------
# Casts and intrinsic calls
# ---------------------------------------------------------------------------------------
def cast(value, dtype: str) -> PrimExpr:
    """``value`` as ``dtype`` (a scalar dtype applied to a vector keeps its lanes); constants
    fold, a Broadcast casts its scalar."""
    value = convert(value)
    dtype = dt.normalize(dtype)
    if dt.lanes(value.dtype) > 1 and dt.lanes(dtype) == 1:
        dtype = dt.with_lanes(dtype, dt.lanes(value.dtype))
    if value.dtype == dtype:
        return value
    if isinstance(value, IntImm | FloatImm) and dt.lanes(dtype) == 1:
        if dt.is_float(dtype):
            return FloatImm(dtype, float(value.value))
        if dt.is_bool(dtype):
            return IntImm("bool", int(value.value != 0))
        return IntImm(dtype, int(value.value))
    if isinstance(value, Broadcast):
        return Broadcast(cast(value.value, dt.element_of(dtype)), value.lanes)
    return Cast(dtype, value)


def call_intrin(dtype: str, op: str, *args) -> PrimExpr:
    """The intrinsic ``op`` of ``args`` (converted to expressions), of type ``dtype``."""
    return Call(dtype, op, [convert(a) for a in args])


expr.use_builders(sys.modules[__name__])
