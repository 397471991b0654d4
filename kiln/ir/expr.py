"""Expression nodes of kiln's IR: immutable, typed, with TVM's operator overloading.

Every node has a ``dtype`` string. Python operators on expressions build IR, as in TVM:
``a + 1`` is an ``Add``, ``a == b`` an ``EQ``, ``i // m`` a ``FloorDiv``. Identity is object
identity (a ``Var`` is one variable however it is named); structural comparison lives in
``kiln.ir.structural``.
"""

from __future__ import annotations

from typing import Any

from . import dtype as dt


class Node:
    """Base of all IR nodes. Subclasses list their fields in ``_fields``."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __setattr__(self, key, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _init(self, **kw):
        for k, v in kw.items():
            object.__setattr__(self, k, v)

    def __repr__(self) -> str:
        from .printer import to_text

        return to_text(self)

    __str__ = __repr__

    def same_as(self, other) -> bool:
        return self is other

    def __reduce__(self):
        raise TypeError(f"{type(self).__name__} nodes cannot be pickled")


class PrimExpr(Node):
    """A scalar (or vector) expression."""

    __slots__ = ("dtype",)

    # ---- arithmetic -------------------------------------------------------------------
    def __add__(self, other):
        return add(self, other)

    def __radd__(self, other):
        return add(other, self)

    def __sub__(self, other):
        return sub(self, other)

    def __rsub__(self, other):
        return sub(other, self)

    def __mul__(self, other):
        return mul(self, other)

    def __rmul__(self, other):
        return mul(other, self)

    def __truediv__(self, other):
        return _true_div(self, other)

    def __rtruediv__(self, other):
        return _true_div(other, self)

    def __floordiv__(self, other):
        return floordiv(self, other)

    def __rfloordiv__(self, other):
        return floordiv(other, self)

    def __mod__(self, other):
        return floormod(self, other)

    def __rmod__(self, other):
        return floormod(other, self)

    def __neg__(self):
        return sub(make_const(0, self.dtype), self)

    def __lshift__(self, other):
        return call_intrin(self.dtype, "shift_left", self, other)

    def __rshift__(self, other):
        return call_intrin(self.dtype, "shift_right", self, other)

    # ---- comparison and logic -----------------------------------------------------------
    def __lt__(self, other):
        return _cmp(LT, self, other)

    def __le__(self, other):
        return _cmp(LE, self, other)

    def __gt__(self, other):
        return _cmp(GT, self, other)

    def __ge__(self, other):
        return _cmp(GE, self, other)

    def __eq__(self, other):
        return EqualOp(self, other)

    def __ne__(self, other):
        return NotEqualOp(self, other)

    def __and__(self, other):
        return logical_and(self, other)

    def __rand__(self, other):
        return logical_and(other, self)

    def __or__(self, other):
        return logical_or(self, other)

    def __ror__(self, other):
        return logical_or(other, self)

    def __invert__(self):
        return logical_not(self)

    def __hash__(self):
        return id(self)

    def __bool__(self):
        raise ValueError(
            "Cannot use and / or / not operator to Expr, hint: use tvm.tir.all / tvm.tir.any "
            "instead (the truth value of a symbolic expression is not known in Python)"
        )

    def __nonzero__(self):
        return self.__bool__()

    def astype(self, dtype: str) -> PrimExpr:
        """Cast this expression to ``dtype``."""
        return cast(self, dtype)

    def equal(self, other) -> PrimExpr:
        return _cmp(EQ, self, other)


# ---------------------------------------------------------------------------------------
# Leaves
# ---------------------------------------------------------------------------------------
class IntImm(PrimExpr):
    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, dtype: str, value: int):
        self._init(dtype=dt.normalize(dtype), value=int(value))

    def __int__(self):
        return self.value

    def __index__(self):
        return self.value

    def __bool__(self):
        return self.value != 0

    def __eq__(self, other):
        if isinstance(other, int | IntImm) and not isinstance(other, bool):
            return self.value == int(other)
        return EqualOp(self, other)

    def __ne__(self, other):
        if isinstance(other, int | IntImm) and not isinstance(other, bool):
            return self.value != int(other)
        return NotEqualOp(self, other)

    def __hash__(self):
        return hash(self.value)


class FloatImm(PrimExpr):
    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, dtype: str, value: float):
        self._init(dtype=dt.normalize(dtype), value=float(value))

    def __float__(self):
        return self.value


class StringImm(PrimExpr):
    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, value: str):
        self._init(dtype="handle", value=str(value))


class Var(PrimExpr):
    """A named scalar variable (a loop index, a symbolic shape, a buffer's data pointer)."""

    __slots__ = ("name",)
    _fields = ("name",)

    def __init__(self, name: str = "v", dtype: str = "int32"):
        self._init(name=name, dtype=dt.normalize(dtype))

    @property
    def name_hint(self) -> str:
        return self.name


class SizeVar(Var):
    """A variable known to be non-negative (a shape dimension)."""

    __slots__ = ()


# ---------------------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------------------
class BinaryOp(PrimExpr):
    __slots__ = ("a", "b")
    _fields = ("a", "b")

    def __init__(self, a: PrimExpr, b: PrimExpr, dtype: str | None = None):
        self._init(a=a, b=b, dtype=dtype or a.dtype)


class Add(BinaryOp):
    __slots__ = ()


class Sub(BinaryOp):
    __slots__ = ()


class Mul(BinaryOp):
    __slots__ = ()


class Div(BinaryOp):
    """Division: exact for floats, truncating toward zero for integers (C semantics)."""

    __slots__ = ()


class Mod(BinaryOp):
    """Remainder with C (truncating) semantics."""

    __slots__ = ()


class FloorDiv(BinaryOp):
    __slots__ = ()


class FloorMod(BinaryOp):
    __slots__ = ()


class Min(BinaryOp):
    __slots__ = ()


class Max(BinaryOp):
    __slots__ = ()


class CmpOp(BinaryOp):
    __slots__ = ()

    def __init__(self, a, b, dtype=None):
        n = dt.lanes(a.dtype)
        self._init(a=a, b=b, dtype=dtype or ("bool" if n == 1 else f"boolx{n}"))


class EQ(CmpOp):
    __slots__ = ()


class NE(CmpOp):
    __slots__ = ()


class LT(CmpOp):
    __slots__ = ()


class LE(CmpOp):
    __slots__ = ()


class GT(CmpOp):
    __slots__ = ()


class GE(CmpOp):
    __slots__ = ()


class And(CmpOp):
    __slots__ = ()


class Or(CmpOp):
    __slots__ = ()


class Not(PrimExpr):
    __slots__ = ("a",)
    _fields = ("a",)

    def __init__(self, a: PrimExpr):
        self._init(a=a, dtype=a.dtype)


class Select(PrimExpr):
    """``cond ? true_value : false_value`` evaluating both sides (use if_then_else to guard)."""

    __slots__ = ("condition", "true_value", "false_value")
    _fields = ("condition", "true_value", "false_value")

    def __init__(self, condition, true_value, false_value):
        self._init(condition=condition, true_value=true_value, false_value=false_value,
                   dtype=true_value.dtype)


class Cast(PrimExpr):
    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, dtype: str, value: PrimExpr):
        self._init(dtype=dt.normalize(dtype), value=value)


class Ramp(PrimExpr):
    """The vector ``[base, base + stride, ..., base + (lanes-1)*stride]``."""

    __slots__ = ("base", "stride", "lanes")
    _fields = ("base", "stride", "lanes")

    def __init__(self, base: PrimExpr, stride: PrimExpr, lanes: int):
        self._init(base=base, stride=stride, lanes=int(lanes),
                   dtype=dt.with_lanes(base.dtype, int(lanes)))


class Broadcast(PrimExpr):
    """A scalar repeated over ``lanes`` vector lanes (printed ``x32(v)``)."""

    __slots__ = ("value", "lanes")
    _fields = ("value", "lanes")

    def __init__(self, value: PrimExpr, lanes: int):
        self._init(value=value, lanes=int(lanes), dtype=dt.with_lanes(value.dtype, int(lanes)))


class Let(PrimExpr):
    __slots__ = ("var", "value", "body")
    _fields = ("var", "value", "body")

    def __init__(self, var: Var, value: PrimExpr, body: PrimExpr):
        self._init(var=var, value=value, body=body, dtype=body.dtype)


class Call(PrimExpr):
    """An intrinsic call by name: math functions, ``tvm_if_then_else``, ``likely``..."""

    __slots__ = ("op", "args")
    _fields = ("op", "args")

    def __init__(self, dtype: str, op: str, args):
        self._init(dtype=dt.normalize(dtype), op=op, args=tuple(args))


class Load(PrimExpr):
    """Read element ``index`` (scalar or Ramp) of the flat buffer whose data is ``buffer_var``."""

    __slots__ = ("buffer_var", "index", "predicate")
    _fields = ("buffer_var", "index", "predicate")

    def __init__(self, dtype: str, buffer_var: Var, index: PrimExpr, predicate=None):
        self._init(dtype=dt.normalize(dtype), buffer_var=buffer_var, index=index,
                   predicate=predicate)


class ProducerLoad(PrimExpr):
    """Read ``producer[indices]`` of a tensor, before storage flattening."""

    __slots__ = ("producer", "indices")
    _fields = ("producer", "indices")

    def __init__(self, producer, indices):
        self._init(producer=producer, indices=tuple(indices), dtype=producer.dtype)


class CommReducer(Node):
    """A commutative reducer: ``combiner(lhs, rhs)`` with an ``identity_element``."""

    __slots__ = ("lhs", "rhs", "result", "identity_element")
    _fields = ("lhs", "rhs", "result", "identity_element")

    def __init__(self, lhs, rhs, result, identity_element):
        self._init(lhs=tuple(lhs), rhs=tuple(rhs), result=tuple(result),
                   identity_element=tuple(identity_element))

    def combine(self, a: list[PrimExpr], b: list[PrimExpr]) -> list[PrimExpr]:
        from .functor import substitute

        vmap = dict(zip(self.lhs, a, strict=True))
        vmap.update(zip(self.rhs, b, strict=True))
        return [substitute(r, vmap) for r in self.result]


class Reduce(PrimExpr):
    """``combiner`` applied over ``axis`` (reduce IterVars) to ``source``, where ``condition``."""

    __slots__ = ("combiner", "source", "axis", "condition", "value_index", "init")
    _fields = ("combiner", "source", "axis", "condition", "value_index", "init")

    def __init__(self, combiner, source, axis, condition, value_index=0, init=()):
        self._init(combiner=combiner, source=tuple(source), axis=tuple(axis),
                   condition=condition, value_index=value_index, init=tuple(init),
                   dtype=source[value_index].dtype)


# ---------------------------------------------------------------------------------------
# Ranges and iteration variables
# ---------------------------------------------------------------------------------------
class Range(Node):
    """The half-open range ``[min, min + extent)``."""

    __slots__ = ("min", "extent")
    _fields = ("min", "extent")

    def __init__(self, begin, end=None):
        if end is None:
            begin, end = 0, begin
        b, e = convert(begin), convert(end)
        self._init(min=b, extent=_fold_sub(e, b))

    @staticmethod
    def from_min_extent(min_value, extent) -> Range:
        r = Range.__new__(Range)
        r._init(min=convert(min_value), extent=convert(extent))
        return r


class IterVar(Node):
    """A loop variable with its domain and kind (data parallel, reduce, thread...)."""

    DataPar, ThreadIndex, CommReduce, Ordered, Opaque, Unrolled, Vectorized, Parallelized = (
        0, 1, 2, 3, 4, 5, 6, 7)

    __slots__ = ("dom", "var", "iter_type", "thread_tag")
    _fields = ("dom", "var", "iter_type", "thread_tag")

    def __init__(self, dom: Range | None, var: Var, iter_type: int, thread_tag: str = ""):
        self._init(dom=dom, var=var, iter_type=iter_type, thread_tag=thread_tag)

    # Let IterVars be used directly inside expressions, as in TVM.
    def _expr(self):
        return self.var

    def __add__(self, o):
        return self.var + o

    def __radd__(self, o):
        return o + self.var

    def __sub__(self, o):
        return self.var - o

    def __rsub__(self, o):
        return o - self.var

    def __mul__(self, o):
        return self.var * o

    def __rmul__(self, o):
        return o * self.var

    def __floordiv__(self, o):
        return self.var // o

    def __rfloordiv__(self, o):
        return o // self.var

    def __mod__(self, o):
        return self.var % o

    def __rmod__(self, o):
        return o % self.var

    def __truediv__(self, o):
        return self.var / o

    def __neg__(self):
        return -self.var

    def __lt__(self, o):
        return self.var < o

    def __le__(self, o):
        return self.var <= o

    def __gt__(self, o):
        return self.var > o

    def __ge__(self, o):
        return self.var >= o

    def __eq__(self, o):
        if isinstance(o, IterVar):
            return self is o
        return self.var == o

    def __ne__(self, o):
        if isinstance(o, IterVar):
            return self is not o
        return self.var != o

    def __hash__(self):
        return id(self)

    @property
    def dtype(self) -> str:
        return self.var.dtype

    def astype(self, dtype):
        return cast(self.var, dtype)


# ---------------------------------------------------------------------------------------
# Construction helpers (with constant folding of the trivial cases, like TVM's operators)
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
            dtype = "int32" if -(2**31) <= value < 2**31 else "int64"
        else:
            dtype = "float32"
    return make_const(value, dtype)


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


def _match(a, b) -> tuple[PrimExpr, PrimExpr]:
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


def _is_const(e, v=None) -> bool:
    if isinstance(e, IntImm | FloatImm):
        return v is None or e.value == v
    return False


def _fold_sub(e, b):
    if isinstance(b, IntImm) and b.value == 0:
        return e
    return sub(e, b)


def _int_result(x: int, dtype: str) -> PrimExpr:
    return IntImm(dtype, x)


def add(a, b) -> PrimExpr:
    a, b = _match(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return _int_result(a.value + b.value, a.dtype)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm):
        return FloatImm(a.dtype, a.value + b.value)
    if _is_const(b, 0) and not dt.is_bool(a.dtype):
        return a
    if _is_const(a, 0) and not dt.is_bool(b.dtype):
        return b
    return Add(a, b)


def sub(a, b) -> PrimExpr:
    a, b = _match(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return _int_result(a.value - b.value, a.dtype)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm):
        return FloatImm(a.dtype, a.value - b.value)
    if _is_const(b, 0):
        return a
    return Sub(a, b)


def mul(a, b) -> PrimExpr:
    a, b = _match(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return _int_result(a.value * b.value, a.dtype)
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


def _true_div(a, b) -> PrimExpr:
    a, b = _match(a, b)
    if dt.is_integer(a.dtype) and dt.is_integer(b.dtype):
        raise TypeError(
            "integer division with '/' is ambiguous: use '//' (floordiv), tvm.tir.floordiv / "
            "floormod, or tvm.tir.truncdiv / truncmod explicitly")
    return div(a, b)


def div(a, b) -> PrimExpr:
    """``tvm.tir.div``: float division, or truncating integer division."""
    a, b = _match(a, b)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm) and b.value != 0:
        return FloatImm(a.dtype, a.value / b.value)
    if isinstance(a, IntImm) and isinstance(b, IntImm) and b.value != 0:
        q = abs(a.value) // abs(b.value)
        return IntImm(a.dtype, q if (a.value >= 0) == (b.value > 0) else -q)
    if _is_const(b, 1):
        return a
    return Div(a, b)


def truncmod(a, b) -> PrimExpr:
    a, b = _match(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm) and b.value != 0:
        r = abs(a.value) % abs(b.value)
        return IntImm(a.dtype, r if a.value >= 0 else -r)
    return Mod(a, b)


def floordiv(a, b) -> PrimExpr:
    a, b = _match(a, b)
    if dt.is_float(a.dtype):
        return call_intrin(a.dtype, "floor", div(a, b))
    if isinstance(a, IntImm) and isinstance(b, IntImm) and b.value != 0:
        return IntImm(a.dtype, a.value // b.value)
    if _is_const(b, 1):
        return a
    return FloorDiv(a, b)


def floormod(a, b) -> PrimExpr:
    a, b = _match(a, b)
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
    a, b = _match(a, b)
    if isinstance(a, IntImm | FloatImm) and isinstance(b, IntImm | FloatImm):
        return a if a.value <= b.value else b
    return Min(a, b)


def emax(a, b) -> PrimExpr:
    a, b = _match(a, b)
    if isinstance(a, IntImm | FloatImm) and isinstance(b, IntImm | FloatImm):
        return a if a.value >= b.value else b
    return Max(a, b)


def _cmp(cls, a, b) -> PrimExpr:
    a, b = _match(a, b)
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


def cast(value, dtype: str) -> PrimExpr:
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
    return Call(dtype, op, [convert(a) for a in args])


class EqualOp(EQ):
    """``a == b`` on expressions: an EQ node whose truth value in Python is identity."""

    __slots__ = ()

    def __new__(cls, a, b):
        if isinstance(a, IterVar):
            a = a.var
        if isinstance(b, IterVar):
            b = b.var
        if not isinstance(b, PrimExpr | int | float | bool):
            return NotImplemented
        a, b = _match(a, b)
        node = object.__new__(EQ)
        EQ.__init__(node, a, b)
        return node


class NotEqualOp(NE):
    __slots__ = ()

    def __new__(cls, a, b):
        if isinstance(a, IterVar):
            a = a.var
        if isinstance(b, IterVar):
            b = b.var
        if not isinstance(b, PrimExpr | int | float | bool):
            return NotImplemented
        a, b = _match(a, b)
        node = object.__new__(NE)
        NE.__init__(node, a, b)
        return node


def _eq_bool(self):
    return self.a is self.b


def _ne_bool(self):
    return self.a is not self.b


EQ.__bool__ = _eq_bool  # ``if x == y`` compares identity, as in TVM
NE.__bool__ = _ne_bool
