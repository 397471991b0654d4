"""Expression nodes of kiln's IR: immutable, typed, with TVM's operator overloading.

Every node has a ``dtype`` string. Python operators on expressions build IR, as in TVM:
``a + 1`` is an ``Add``, ``a == b`` an ``EQ``, ``i // m`` a ``FloorDiv``. Identity is object
identity (a ``Var`` is one variable however it is named); structural comparison lives in
``kiln.ir.structural``.

This module holds the node classes only. The operators build their nodes with the
expression builders of :mod:`kiln.ir.op` (type rules, constant folding), which construct
these classes and so cannot be imported here: ``kiln.ir.op`` installs itself with
:func:`use_builders` when it is imported (``kiln.ir`` imports it), and the operators call it
through ``_op``.
"""

from __future__ import annotations

from types import ModuleType

from . import dtype as dt

#: the expression builders (:mod:`kiln.ir.op`) the operators call; set by :func:`use_builders`
_op: ModuleType


def use_builders(builders: ModuleType) -> None:
    """Make Python operators on expressions build with ``builders`` (:mod:`kiln.ir.op`)."""
    global _op
    _op = builders


#: node classes whose TVM type key has no ``tir.`` prefix
_UNPREFIXED_KEYS = frozenset({"IntImm", "FloatImm", "Range"})


class Node:
    """Base of all IR nodes. Subclasses list their fields in ``_fields``."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    @classmethod
    def type_key(cls) -> str:
        """TVM's type key of this node class: ``"tir.For"``, ``"tir.Add"``, ``"IntImm"``."""
        name = cls.__name__
        return name if name in _UNPREFIXED_KEYS else f"tir.{name}"

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
        return _op.add(self, other)

    def __radd__(self, other):
        return _op.add(other, self)

    def __sub__(self, other):
        return _op.sub(self, other)

    def __rsub__(self, other):
        return _op.sub(other, self)

    def __mul__(self, other):
        return _op.mul(self, other)

    def __rmul__(self, other):
        return _op.mul(other, self)

    def __truediv__(self, other):
        return _op.true_div(self, other)

    def __rtruediv__(self, other):
        return _op.true_div(other, self)

    def __floordiv__(self, other):
        return _op.floordiv(self, other)

    def __rfloordiv__(self, other):
        return _op.floordiv(other, self)

    def __mod__(self, other):
        return _op.floormod(self, other)

    def __rmod__(self, other):
        return _op.floormod(other, self)

    def __neg__(self):
        return _op.sub(_op.make_const(0, self.dtype), self)

    def __lshift__(self, other):
        return _op.call_intrin(self.dtype, "shift_left", self, other)

    def __rshift__(self, other):
        return _op.call_intrin(self.dtype, "shift_right", self, other)

    # ---- comparison and logic -----------------------------------------------------------
    def __lt__(self, other):
        return _op.compare(LT, self, other)

    def __le__(self, other):
        return _op.compare(LE, self, other)

    def __gt__(self, other):
        return _op.compare(GT, self, other)

    def __ge__(self, other):
        return _op.compare(GE, self, other)

    def __eq__(self, other):
        return _equality(EQ, self, other)

    def __ne__(self, other):
        return _equality(NE, self, other)

    # ``&``, ``|``, ``^``, ``~`` are bitwise as in TVM: on conditions (bool, one bit) they
    # are the logical operators, on integers the bit operations, on floats an error
    def __and__(self, other):
        return _op.bitwise_and(self, other)

    def __rand__(self, other):
        return _op.bitwise_and(other, self)

    def __or__(self, other):
        return _op.bitwise_or(self, other)

    def __ror__(self, other):
        return _op.bitwise_or(other, self)

    def __xor__(self, other):
        return _op.bitwise_xor(self, other)

    def __rxor__(self, other):
        return _op.bitwise_xor(other, self)

    def __invert__(self):
        return _op.bitwise_not(self)

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
        return _op.cast(self, dtype)

    def equal(self, other) -> PrimExpr:
        return _op.compare(EQ, self, other)


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
        return _equality(EQ, self, other)

    def __ne__(self, other):
        if isinstance(other, int | IntImm) and not isinstance(other, bool):
            return self.value != int(other)
        return _equality(NE, self, other)

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

    def __bool__(self):  # ``if x == y`` compares identity, as in TVM
        return self.a is self.b


class NE(CmpOp):
    __slots__ = ()

    def __bool__(self):
        return self.a is not self.b


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
        b, e = _op.convert(begin), _op.convert(end)
        self._init(min=b, extent=e if isinstance(b, IntImm) and b.value == 0 else _op.sub(e, b))

    @staticmethod
    def from_min_extent(min_value, extent) -> Range:
        r = Range.__new__(Range)
        r._init(min=_op.convert(min_value), extent=_op.convert(extent))
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
        return _op.cast(self.var, dtype)


def _equality(cls: type[EQ | NE], a, b):
    """``a == b`` / ``a != b`` on expressions: an (unfolded) ``EQ``/``NE`` node of the matched
    operands, or NotImplemented for an operand that is no number, so that Python tries the
    other side. Its truth value in Python is identity (``if x == y``), as in TVM."""
    if isinstance(a, IterVar):
        a = a.var
    if isinstance(b, IterVar):
        b = b.var
    if not isinstance(b, PrimExpr | int | float | bool):
        return NotImplemented
    return cls(*_op.match_types(a, b))
