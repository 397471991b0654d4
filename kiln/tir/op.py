"""Intrinsic operators on expressions: math functions, conditionals, reducers' building blocks.

Names and behaviour follow ``tvm.tir`` (and the ``te`` re-exports): ``if_then_else`` is lazy
(only the taken branch is evaluated, so it may guard an out-of-bounds read), ``all``/``any``
fold a list of conditions, math functions keep their argument's float dtype. ``call_packed``
and ``call_extern`` call, from compiled code, a function registered in the Python runtime and
a C function linked into the module (docs/extern.md); ``call_pure_extern`` is a C function
without side effects, ``call_intrin`` an intrinsic by its TVM or kiln name.
"""

from __future__ import annotations

from kiln.ir import dtype as dt
from kiln.ir.expr import Call, IntImm, PrimExpr, Select, StringImm
from kiln.ir.op import (
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    cast,
    const,
    convert,
    div,
    emax,
    emin,
    floordiv,
    floormod,
    logical_and,
    logical_not,
    logical_or,
    make_const,
    match_types,
    max_value,
    min_value,
    truncmod,
)
from kiln.ir.op import (
    call_intrin as _call_intrin,
)
from kiln.ir.stmt import Buffer

__all__ = [
    "if_then_else", "all", "any", "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt",
    "sigmoid", "tanh", "abs", "floor", "ceil", "round", "trunc", "power", "pow", "erf", "sin",
    "cos", "fmod", "isnan", "likely", "max_value", "min_value", "floordiv", "floormod",
    "truncdiv", "truncmod", "indexdiv", "indexmod", "div", "Select", "cast", "const",
    "call_intrin", "call_pure_extern", "logical_and", "logical_or", "logical_not", "min", "max",
    "make_const", "call_packed", "call_extern", "reinterpret", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not",
]

#: the intrinsic of ``call_packed``: ``tvm_call_packed("name", args...)``
PACKED_CALL = "tvm_call_packed"
#: a buffer passed to ``call_packed``: ``tvm_stack_make_array(data, shape, strides, ndim,
#: dtype carrier, elem_offset)``, as in TVM (strides 0: dense)
STACK_ARRAY = "tvm_stack_make_array"
#: the shape (or strides) array of a ``tvm_stack_make_array``
STACK_SHAPE = "tvm_stack_make_shape"
#: the intrinsic of ``call_extern``: ``call_extern("c_function", args...)``
EXTERN_CALL = "call_extern"
#: the intrinsic of ``call_pure_extern``: a ``call_extern`` of a function without side effects
PURE_EXTERN_CALL = "call_pure_extern"
#: TVM's intrinsic names (after ``tir.``) that kiln spells differently
_TVM_INTRINSICS = {"if_then_else": "tvm_if_then_else"}


def if_then_else(cond, t, f) -> PrimExpr:
    """``cond ? t : f`` where only the chosen branch is evaluated."""
    cond = convert(cond)
    if not dt.is_bool(cond.dtype):
        cond = cond != make_const(0, cond.dtype)
    t, f = match_types(t, f)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Call(t.dtype, "tvm_if_then_else", [cond, t, f])


def all(*args) -> PrimExpr:  # noqa: A001 - TVM's name
    """Logical and of all conditions (``tvm.tir.all``)."""
    args = _flatten(args)
    if not args:
        raise ValueError("tvm.tir.all needs at least one condition")
    out = convert(args[0])
    for a in args[1:]:
        out = logical_and(out, a)
    return logical_and(out, True) if not dt.is_bool(out.dtype) else out


def any(*args) -> PrimExpr:  # noqa: A001 - TVM's name
    """Logical or of all conditions (``tvm.tir.any``)."""
    args = _flatten(args)
    if not args:
        raise ValueError("tvm.tir.any needs at least one condition")
    out = convert(args[0])
    for a in args[1:]:
        out = logical_or(out, a)
    return logical_or(out, False) if not dt.is_bool(out.dtype) else out


def _flatten(args) -> list:
    out = []
    for a in args:
        if isinstance(a, list | tuple):
            out.extend(a)
        else:
            out.append(a)
    return out


def _float_arg(x) -> PrimExpr:
    x = convert(x)
    if not dt.is_float(x.dtype):
        x = cast(x, "float32")
    return x


def _unary(name: str):
    def f(x) -> PrimExpr:
        x = _float_arg(x)
        return Call(x.dtype, name, [x])

    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}`` of a float expression (ints are cast to float32)."
    return f


exp = _unary("exp")
exp2 = _unary("exp2")
log = _unary("log")
log2 = _unary("log2")
log10 = _unary("log10")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
sigmoid = _unary("sigmoid")
tanh = _unary("tanh")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001
trunc = _unary("trunc")
erf = _unary("erf")
sin = _unary("sin")
cos = _unary("cos")


def abs(x) -> PrimExpr:  # noqa: A001
    """Absolute value; integers stay integers."""
    x = convert(x)
    if dt.is_uint(x.dtype) or dt.is_bool(x.dtype):
        return x
    if dt.is_integer(x.dtype):
        return Select(x < make_const(0, x.dtype), -x, x)
    return Call(x.dtype, "fabs", [x])


def power(x, y) -> PrimExpr:
    """``x ** y`` on floats."""
    x, y = match_types(_float_arg(x), y)
    return Call(x.dtype, "pow", [x, y])


pow = power  # noqa: A001


def fmod(x, y) -> PrimExpr:
    x, y = match_types(_float_arg(x), y)
    return Call(x.dtype, "fmod", [x, y])


def isnan(x) -> PrimExpr:
    x = convert(x)
    if not dt.is_float(x.dtype):
        return const(False)
    return Call("bool", "isnan", [x])


def likely(cond) -> PrimExpr:
    """Mark a condition as likely true (a hint for loop partitioning)."""
    cond = convert(cond)
    return Call(cond.dtype, "likely", [cond])


def truncdiv(a, b) -> PrimExpr:
    return div(a, b)


def indexdiv(a, b) -> PrimExpr:
    return floordiv(a, b)


def indexmod(a, b) -> PrimExpr:
    return floormod(a, b)


def min(a, b) -> PrimExpr:  # noqa: A001
    return emin(a, b)


def max(a, b) -> PrimExpr:  # noqa: A001
    return emax(a, b)


def reinterpret(dtype: str, value) -> PrimExpr:
    """``tvm.tir.reinterpret``: the bits of ``value`` read as ``dtype``, a type of the same
    width (``reinterpret("float32", (e + 127) << 23)`` is ``2.0 ** e``); no conversion."""
    value = convert(value)
    dtype = dt.normalize(dtype)
    if dt.bits(dtype) != dt.bits(value.dtype) or dt.lanes(dtype) != dt.lanes(value.dtype):
        raise TypeError(f"tir.reinterpret: {value.dtype} and {dtype} differ in width")
    if dtype == value.dtype:
        return value
    return Call(dtype, "reinterpret", [value])


def call_intrin(dtype: str, func_name: str, *args) -> PrimExpr:
    """``tvm.tir.call_intrin``: the intrinsic ``func_name`` of ``args``, of type ``dtype``.
    TVM's op names (``"tir.exp"``, ``"tir.if_then_else"``) and kiln's (``"exp"``) are both
    accepted; the backend says at build time when it lacks the intrinsic."""
    name = func_name.removeprefix("tir.")
    return _call_intrin(dtype, _TVM_INTRINSICS.get(name, name), *args)


def call_pure_extern(dtype: str, func_name: str, *args) -> PrimExpr:
    """``tvm.tir.call_pure_extern``: call the C (or CUDA device) function ``func_name``,
    which has no side effects, returning ``dtype``: ``call_pure_extern("float32", "expf",
    x)`` is the C ``expf(x)``, ``"__expf"`` CUDA's fast exponential. As for ``call_extern``,
    the function must be declared in the generated code (libm's are; others through
    ``pragma_import_c``, docs/extern.md)."""
    return _extern(PURE_EXTERN_CALL, dtype, func_name, args)


def call_packed(func_name: str, *args) -> PrimExpr:
    """``tvm.tir.call_packed``: call the function registered as ``func_name``
    (``tvm.register_func``) from compiled code, at run time. A Buffer argument (``ins[0]`` of
    ``te.extern``) is passed as a DLTensor, which the function receives as an NDArray viewing
    the buffer's memory; ints and floats are passed as Python numbers, strings as str. The
    call's value is 0; a failure of the function raises in the caller of the compiled code."""
    if not isinstance(func_name, str):
        raise TypeError(f"call_packed: the first argument is the registered function's name "
                        f"(str), got {func_name!r}")
    return Call("int32", PACKED_CALL, [StringImm(func_name), *(_packed_arg(a) for a in args)])


def call_extern(dtype: str, func_name: str, *args) -> PrimExpr:
    """``tvm.tir.call_extern``: call the C function ``func_name`` linked into the module,
    returning ``dtype``. A Buffer argument is passed as its data pointer. The function must
    be declared in the generated C: libc/libm functions are, others are declared (or defined)
    with the ``pragma_import_c`` attribute (docs/extern.md)."""
    return _extern(EXTERN_CALL, dtype, func_name, args)


def _extern(op: str, dtype: str, func_name: str, args: tuple) -> PrimExpr:
    """``op("func_name", args...)``, a Buffer argument passed as its data pointer."""
    if not isinstance(func_name, str):
        raise TypeError(f"{op}: the function name must be a str, got {func_name!r}")
    call_args = [a.data if isinstance(a, Buffer) else _packed_arg(a) for a in args]
    return Call(dt.normalize(dtype), op, [StringImm(func_name), *call_args])


def _packed_arg(a) -> PrimExpr:
    if isinstance(a, Buffer):
        return _stack_array(a)
    if isinstance(a, str):
        return StringImm(a)
    return convert(a)


def _stack_array(buf: Buffer) -> PrimExpr:
    """A buffer as TVM's ``tvm_stack_make_array`` (a DLTensor built where it is passed)."""
    shape = Call("handle", STACK_SHAPE, list(buf.shape))
    strides = Call("handle", STACK_SHAPE, list(buf.strides)) if buf.strides else const(0)
    offset = buf.elem_offset if buf.elem_offset is not None else const(0)
    return Call("handle", STACK_ARRAY, [buf.data, shape, strides, const(len(buf.shape)),
                                        make_const(0, buf.dtype), convert(offset)])
