"""Binary operators with numpy broadcasting (tag ``"broadcast"``; ``"elemwise"`` when one
side is a scalar or both shapes are equal).

Shapes are aligned from the right; a dimension of size 1 stretches to the other side's size.
Either operand may be a Python number or a scalar expression; two scalars give a scalar
expression.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import dtype as dt
from kiln.ir import op as _op
from kiln.ir.expr import PrimExpr
from kiln.ir.op import convert, div, floordiv, floormod, match_types, truncmod
from kiln.ir.op import logical_and as _land
from kiln.ir.op import logical_not as _lnot
from kiln.ir.op import logical_or as _lor
from kiln.ir.structural import structural_equal
from kiln.te.tensor import Tensor

from . import tag
from .utils import get_const_int, is_const_int


def _is_one(x) -> bool:
    return is_const_int(x) and get_const_int(x) == 1


def broadcast_shape(shape1, shape2) -> list:
    """The numpy broadcast of two shapes (lists of ints or expressions)."""
    s1, s2 = list(shape1), list(shape2)
    n = max(len(s1), len(s2))
    s1 = [1] * (n - len(s1)) + s1
    s2 = [1] * (n - len(s2)) + s2
    out = []
    for a, b in zip(s1, s2, strict=True):
        if _is_one(a):
            out.append(b)
        elif _is_one(b):
            out.append(a)
        elif is_const_int(a) and is_const_int(b):
            if get_const_int(a) != get_const_int(b):
                raise ValueError(
                    f"shapes {list(shape1)} and {list(shape2)} cannot be broadcast together")
            out.append(a)
        elif structural_equal(convert(a), convert(b)):
            out.append(a)
        else:
            raise ValueError(
                f"shapes {list(shape1)} and {list(shape2)} cannot be broadcast: dimensions "
                f"{a} and {b} are not provably equal")
    return out


def _broadcast_indices(t: Tensor, out_shape: list, idx: tuple) -> list:
    """Indices into ``t`` for output index ``idx`` (size-1 dimensions read index 0)."""
    off = len(out_shape) - t.ndim
    res = []
    for k, s in enumerate(t.shape):
        res.append(0 if _is_one(s) and not _is_one(out_shape[off + k]) else idx[off + k])
    return res


def broadcast_to(x: Tensor, shape):
    """``x`` broadcast to ``shape`` (numpy rules)."""
    out_shape = broadcast_shape(x.shape, shape)
    if len(out_shape) != len(shape):
        raise ValueError(f"cannot broadcast {list(x.shape)} to {list(shape)}")
    return te.compute(out_shape, lambda *i: x(*_broadcast_indices(x, out_shape, i)),
                      name="T_broadcast_to", tag=tag.BROADCAST)


def _binary(name: str, fexpr, doc: str):
    def op(lhs, rhs):
        lt, rt = isinstance(lhs, Tensor), isinstance(rhs, Tensor)
        if not lt and not rt:
            a, b = match_types(lhs, rhs)
            return fexpr(a, b)
        if lt and not rt:
            return te.compute(lhs.shape, lambda *i: fexpr(*match_types(lhs(*i), rhs)),
                              name=f"T_{name}", tag=tag.ELEMWISE)
        if rt and not lt:
            return te.compute(rhs.shape, lambda *i: fexpr(*match_types(lhs, rhs(*i))),
                              name=f"T_{name}", tag=tag.ELEMWISE)
        out_shape = broadcast_shape(lhs.shape, rhs.shape)
        same = (lhs.ndim == rhs.ndim == len(out_shape)
                and not any(_is_one(a) != _is_one(b) for a, b in zip(lhs.shape, rhs.shape,
                                                                       strict=True)))

        def f(*i):
            a = lhs(*_broadcast_indices(lhs, out_shape, i))
            b = rhs(*_broadcast_indices(rhs, out_shape, i))
            return fexpr(*match_types(a, b))

        return te.compute(out_shape, f, name=f"T_{name}",
                          tag=tag.ELEMWISE if same else tag.BROADCAST)

    op.__name__ = name
    op.__qualname__ = name
    op.__doc__ = doc + " Numpy broadcasting; either side may be a scalar."
    return op


def _shift(name: str, fexpr):
    """``fexpr`` (``<<`` or ``>>``) of integer operands; bools and floats have no shift."""
    def shift(a: PrimExpr, b: PrimExpr) -> PrimExpr:
        if not (dt.is_int(a.dtype) or dt.is_uint(a.dtype)):
            raise TypeError(f"topi.{name} needs integer operands, got {a.dtype}")
        return fexpr(a, b)

    return shift


def _power(a, b):
    if dt.is_float(a.dtype):
        return tir.power(a, b)
    raise TypeError(f"topi.power needs float operands, got {a.dtype}")


add = _binary("add", lambda a, b: a + b, "``lhs + rhs``.")
subtract = _binary("subtract", lambda a, b: a - b, "``lhs - rhs``.")
multiply = _binary("multiply", lambda a, b: a * b, "``lhs * rhs``.")
divide = _binary("divide", div, "``lhs / rhs`` (truncating for integers, as tvm.tir.div).")
floor_divide = _binary("floor_divide", floordiv, "``floor(lhs / rhs)``.")
mod = _binary("mod", truncmod, "truncated remainder (C's ``%``).")
floor_mod = _binary("floor_mod", floormod, "floored remainder (Python's ``%``).")
maximum = _binary("maximum", tir.max, "elementwise maximum.")
minimum = _binary("minimum", tir.min, "elementwise minimum.")
power = _binary("power", _power, "``lhs ** rhs`` (floats).")
equal = _binary("equal", lambda a, b: a == b, "``lhs == rhs`` as bool.")
not_equal = _binary("not_equal", lambda a, b: a != b, "``lhs != rhs`` as bool.")
greater = _binary("greater", lambda a, b: a > b, "``lhs > rhs`` as bool.")
greater_equal = _binary("greater_equal", lambda a, b: a >= b, "``lhs >= rhs`` as bool.")
less = _binary("less", lambda a, b: a < b, "``lhs < rhs`` as bool.")
less_equal = _binary("less_equal", lambda a, b: a <= b, "``lhs <= rhs`` as bool.")
logical_and = _binary("logical_and", _land, "logical and.")
logical_or = _binary("logical_or", _lor, "logical or.")
bitwise_and = _binary("bitwise_and", _op.bitwise_and, "``lhs & rhs``, bit by bit.")
bitwise_or = _binary("bitwise_or", _op.bitwise_or, "``lhs | rhs``, bit by bit.")
bitwise_xor = _binary("bitwise_xor", _op.bitwise_xor, "``lhs ^ rhs``, bit by bit.")
left_shift = _binary("left_shift", _shift("left_shift", lambda a, b: a << b),
                     "``lhs << rhs`` of integers (C's: a shift by the type's width or more is "
                     "undefined).")
right_shift = _binary("right_shift", _shift("right_shift", lambda a, b: a >> b),
                      "``lhs >> rhs`` of integers, arithmetic for signed types (C's: a shift by "
                      "the type's width or more is undefined).")


def bitwise_not(x):
    """``~x`` bit by bit of an integer (or bool) tensor or expression."""
    if isinstance(x, Tensor):
        return te.compute(x.shape, lambda *i: _op.bitwise_not(x(*i)), name="T_bitwise_not",
                          tag=tag.ELEMWISE)
    return _op.bitwise_not(convert(x))


def logical_not(x):
    """Logical not of a bool tensor (or expression)."""
    if isinstance(x, Tensor):
        return te.compute(x.shape, lambda *i: _not(x(*i)), name="T_logical_not",
                          tag=tag.ELEMWISE)
    return _not(convert(x))


def _not(v: PrimExpr) -> PrimExpr:
    return _lnot(v) if dt.is_bool(v.dtype) else v == 0


__all__ = [
    "broadcast_shape", "broadcast_to", "add", "subtract", "multiply", "divide",
    "floor_divide", "mod", "floor_mod", "maximum", "minimum", "power", "equal", "not_equal",
    "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or",
    "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "left_shift",
    "right_shift",
]
