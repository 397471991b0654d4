"""The checks a compiled function makes on its arguments, described once for every backend.

As in TVM, a compiled function checks the number, type, ndim, dtype, device and shape of its
arguments before it runs, and fails with TVM's words
(``Assert fail: (100 == int32(arg0.shape[0])), Argument arg0.shape[0] has an unsatisfied
constraint: expected 100, got 200``). ``describe`` turns a PrimFunc into the list of those
checks, each with its message; the C backend renders them as C in the exported entry
(``c_entry.py``), the CUDA backend as the Python checker of its host function
(``cuda_host.py``). A rule or a message changes here, in one place.

A message is a ``Message``: the text with ``{}`` holes for the values only known at run time
(what the caller passed), each hole naming that value (``ArgValue``), so that each backend can
fill it in its own language.

Shape rules: a constant dimension must match; as in TVM, the scalar arguments are bound
first, wherever they stand in the argument list (``[A, B, n, m]`` with ``A`` of shape
``(n, m)`` declares ``n`` once, from ``arg2``); the first occurrence of another shape variable
binds it; a dimension given by a scalar argument, a later occurrence, or a composite
expression (``n * 2``) is checked after every argument is bound ("deferred"). A composite
expression whose variables no argument binds is an error at build time.

Strides and offset rules (a buffer from ``tir.decl_buffer`` in ``binds``): without declared
strides the array must be compact; with them, each stride is a constraint like a dimension
(a constant must match, a variable is bound, a composite checked after binding), read from the
array's ``strides`` (the compact strides when it has none; a dimension of extent 1 has stride
0 in an ``auto_broadcast`` buffer). Without an ``elem_offset`` the function reads from
``data + byte_offset``; with one, from ``data``, and the offset (``byte_offset`` in elements;
it must be a whole number of them) is a constraint too, a multiple of ``offset_factor``
(``Argument arg0.elem_offset has an unsatisfied constraint: ((A_elem_offset % 16) == 0)``).

Aliasing rule: the compute function takes its buffers as ``restrict`` pointers, so a tensor
argument the function stores to must share no memory with any other tensor argument
(``mod(a, a)`` for a transpose would read elements it has already overwritten). TVM leaves
this undefined; kiln checks it last, one ``AliasCheck`` per such pair, and fails with
``Argument arg1 (B) overlaps arg0 (A) in memory ...``. Tensors that are only read may alias.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kiln.errors import TVMError
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import collect_vars, post_order_visit
from kiln.ir.op import index_dtype
from kiln.ir.printer import expr_text
from kiln.ir.stmt import PrimFunc, Store

#: DLPack type codes of the packed calling convention
TYPE_CODE_INT, TYPE_CODE_FLOAT, TYPE_CODE_TENSOR = 0, 2, 7


class ArgValue(Enum):
    """A run-time value a message reports (the backends know how to read each)."""

    NUM_ARGS = "num_args"
    TYPE_CODE = "type_code"
    NDIM = "ndim"
    DTYPE_CODE = "dtype.code"
    DTYPE_BITS = "dtype.bits"
    DTYPE_LANES = "dtype.lanes"
    DEVICE_TYPE = "device_type"
    DEVICE_ID = "device_id"
    FIRST_DEVICE_ID = "first_device_id"
    DIM = "dim"
    STRIDE = "stride"
    ELEM_OFFSET = "elem_offset"
    BYTE_OFFSET = "byte_offset"
    EXPECTED_DIM = "expected_dim"


#: the run-time value each field of a tensor argument reports in messages
FIELD_VALUE = {"shape": ArgValue.DIM, "strides": ArgValue.STRIDE,
               "elem_offset": ArgValue.ELEM_OFFSET}


@dataclass(frozen=True)
class Message:
    """Error text with one ``{}`` hole per entry of ``values``."""

    text: str
    values: tuple[ArgValue, ...] = ()

    def format(self, *values) -> str:
        return self.text.format(*values)


def dl_code(dtype: str) -> tuple[int, int, int]:
    """DLPack ``(code, bits, lanes)`` of a kiln dtype (bool: code 1, bits 1)."""
    d = dt.parse(dtype)
    code = {"int": 0, "uint": 1, "float": 2, "bool": 1, "bfloat": 4}[d.code]
    return code, d.bits, d.lanes


@dataclass(frozen=True)
class ScalarArg:
    index: int
    var: E.Var
    is_float: bool
    wrong_type: Message


@dataclass(frozen=True)
class ShapeDim:
    """A constraint on one value of a tensor argument: ``field`` "shape" (dimension
    ``axis``), "strides" (stride ``axis``) or "elem_offset". ``kind`` is "const" (``value``
    an int), "bind" (``value`` the Var it defines) or "deferred" (checked by a
    ``DeferredShape``)."""

    axis: int
    kind: str
    value: object
    mismatch: Message | None = None
    field: str = "shape"


@dataclass(frozen=True)
class TensorArg:
    index: int
    var: E.Var
    tensor_name: str
    ndim: int
    dtype_code: int
    dtype_bits: tuple[int, ...]  # accepted bit widths (numpy's bool is 1 or 8 bits)
    dtype_lanes: int
    dims: tuple[ShapeDim, ...]
    not_a_tensor: Message
    wrong_ndim: Message
    wrong_dtype: Message
    wrong_device: Message
    wrong_device_id: Message
    not_compact: Message
    #: declared strides (empty: the array must be compact); ``broadcast``: a dimension of
    #: extent 1 has stride 0
    strides: tuple[ShapeDim, ...] = ()
    broadcast: bool = False
    #: the element offset (None: the data starts at ``data + byte_offset``)
    elem_offset: ShapeDim | None = None
    elem_bytes: int = 1
    bad_byte_offset: Message | None = None
    offset_factor: int = 1
    offset_misaligned: Message | None = None


@dataclass(frozen=True)
class DeferredShape:
    """``expr`` (over bound variables) must equal value ``axis`` of ``field`` ("shape",
    "strides", "elem_offset") of argument ``index``."""

    index: int
    axis: int
    expr: E.PrimExpr
    mismatch: Message
    field: str = "shape"


@dataclass(frozen=True)
class AliasCheck:
    """Tensor argument ``output``, which the function stores to, must not overlap the memory
    of tensor argument ``other``."""

    output: int
    other: int
    overlap: Message


@dataclass(frozen=True)
class ArgSpec:
    """Every check of one function, in the order they run."""

    func_name: str
    device: str  # "cpu" or "cuda": the device every tensor argument must be on
    wrong_count: Message
    args: tuple[ScalarArg | TensorArg, ...]
    deferred: tuple[DeferredShape, ...]
    aliases: tuple[AliasCheck, ...]

    @property
    def num_args(self) -> int:
        return len(self.args)


def describe(func: PrimFunc, device: str) -> ArgSpec:
    """The argument checks of ``func`` for tensors on ``device`` ("cpu" or "cuda")."""
    bound: set[E.Var] = {p for p in func.params if p not in func.buffer_map}
    args: list[ScalarArg | TensorArg] = []
    deferred: list[DeferredShape] = []
    for k, p in enumerate(func.params):
        buf = func.buffer_map.get(p)
        if buf is None:
            args.append(_scalar(k, p))
        else:
            args.append(_tensor(k, p, buf, device, bound, deferred))
    for d in deferred:
        missing = [v for v in collect_vars(d.expr) if v not in bound]
        if missing:
            where = _what(d.index, d.field, d.axis)
            raise TVMError(
                f"{func.name}: the {d.field} {expr_text(d.expr)} of {where} "
                f"uses variable '{missing[0].name}', which is neither a scalar argument nor a "
                f"plain dimension of an argument tensor; pass it in the argument list")
    n = len(func.params)
    count = Message(f"{func.name}: expected {n} arguments, got {{}}", (ArgValue.NUM_ARGS,))
    return ArgSpec(func.name, device, count, tuple(args), tuple(deferred),
                   _alias_checks(func, args))


def _stored_params(func: PrimFunc) -> set[E.Var]:
    """The pointer parameters of ``func`` that its body stores to (its outputs)."""
    stored: set[E.Var] = set()

    def visit(node) -> None:
        if isinstance(node, Store) and node.buffer_var in func.buffer_map:
            stored.add(node.buffer_var)

    post_order_visit(func.body, visit)
    return stored


def _alias_checks(func: PrimFunc, args: list[ScalarArg | TensorArg]) -> tuple[AliasCheck, ...]:
    """One check per pair of tensor arguments of which at least one is stored to."""
    tensors = [a for a in args if isinstance(a, TensorArg)]
    stored = _stored_params(func)
    checks: list[AliasCheck] = []
    for out in tensors:
        if out.var not in stored:
            continue
        for other in tensors:
            if other is out or (other.var in stored and other.index < out.index):
                continue  # itself, or a pair of outputs already checked
            role = "writes" if other.var in stored else "reads"
            checks.append(AliasCheck(out.index, other.index, Message(
                f"Argument arg{out.index} ({out.tensor_name}) overlaps arg{other.index} "
                f"({other.tensor_name}) in memory: {func.name} writes arg{out.index} and "
                f"{role} arg{other.index}, which must not share memory (the result would be "
                f"wrong); pass a separate output array")))
    return tuple(checks)


def _scalar(k: int, p: E.Var) -> ScalarArg:
    is_float = dt.is_float(p.dtype)
    want = "a number" if is_float else "an integer"
    return ScalarArg(k, p, is_float, Message(
        f"arg{k} ({p.name}): expected {want}, got type code {{}}", (ArgValue.TYPE_CODE,)))


def _what(k: int, field: str, axis: int) -> str:
    """How messages name a constrained value: ``arg0.shape[1]``, ``arg0.elem_offset``."""
    return f"arg{k}.elem_offset" if field == "elem_offset" else f"arg{k}.{field}[{axis}]"


def _constraint(k: int, field: str, axis: int, expr: E.PrimExpr, bound: set[E.Var],
                deferred: list[DeferredShape]) -> ShapeDim:
    """The check of one value of argument ``k`` against ``expr`` (see ``ShapeDim``)."""
    what = _what(k, field, axis)
    value = FIELD_VALUE[field]
    if isinstance(expr, E.IntImm):
        return ShapeDim(axis, "const", expr.value, Message(
            f"Assert fail: ({expr.value} == {index_dtype(expr)}({what})), Argument {what} has "
            f"an unsatisfied constraint: expected {expr.value}, got {{}}", (value,)), field)
    if isinstance(expr, E.Var) and expr not in bound:
        bound.add(expr)
        return ShapeDim(axis, "bind", expr, field=field)
    deferred.append(DeferredShape(k, axis, expr, Message(
        f"Assert fail: ({expr_text(expr)} == {what}), Argument {what} has an unsatisfied "
        f"constraint: expected {{}}, got {{}}", (ArgValue.EXPECTED_DIM, value)), field))
    return ShapeDim(axis, "deferred", expr, field=field)


def _offset_checks(k: int, buf, bound: set[E.Var], deferred: list[DeferredShape]) -> dict:
    """The ``elem_offset`` fields of ``TensorArg`` for ``buf`` (none without an offset)."""
    e = buf.elem_offset
    if e is None or (isinstance(e, E.IntImm) and e.value == 0):
        return {}
    d = dt.parse(buf.dtype)
    elem_bytes = max(d.bits * d.lanes // 8, 1)
    a = f"arg{k}"
    out = {
        "elem_offset": _constraint(k, "elem_offset", 0, e, bound, deferred),
        "elem_bytes": elem_bytes,
        "bad_byte_offset": Message(
            f"Argument {a}.byte_offset ({buf.name}) has an unsatisfied constraint: expected a "
            f"multiple of the element size ({elem_bytes} bytes), got {{}}",
            (ArgValue.BYTE_OFFSET,)),
    }
    if buf.offset_factor > 1 and not isinstance(e, E.IntImm):
        out["offset_factor"] = buf.offset_factor
        out["offset_misaligned"] = Message(
            f"Argument {a}.elem_offset has an unsatisfied constraint: "
            f"(({expr_text(e)} % {buf.offset_factor}) == 0), got elem_offset {{}}",
            (ArgValue.ELEM_OFFSET,))
    return out


def _tensor(k: int, p: E.Var, buf, device: str, bound: set[E.Var],
            deferred: list[DeferredShape]) -> TensorArg:
    a, tname = f"arg{k}", buf.name
    code, bits, lanes = dl_code(buf.dtype)
    dims = [_constraint(k, "shape", d, extent, bound, deferred)
            for d, extent in enumerate(buf.shape)]
    strides = [_constraint(k, "strides", d, stride, bound, deferred)
               for d, stride in enumerate(buf.strides)]
    offset = _offset_checks(k, buf, bound, deferred)
    return TensorArg(
        k, p, tname, len(buf.shape), code, (bits, 8) if dt.is_bool(buf.dtype) else (bits,),
        lanes, tuple(dims),
        not_a_tensor=Message(f"{a} ({tname}): expected a tensor (NDArray), got type code {{}}",
                             (ArgValue.TYPE_CODE,)),
        wrong_ndim=Message(
            f"Argument {a}.ndim ({tname}) has an unsatisfied constraint: {a}.ndim is expected "
            f"to equal {len(buf.shape)}, got {{}}", (ArgValue.NDIM,)),
        wrong_dtype=Message(
            f"Assert fail: {a}.dtype is expected to be {buf.dtype} ({tname}), got code={{}} "
            f"bits={{}} lanes={{}}",
            (ArgValue.DTYPE_CODE, ArgValue.DTYPE_BITS, ArgValue.DTYPE_LANES)),
        wrong_device=Message(
            f"Argument {a}.device_type ({tname}) has an unsatisfied constraint: expected a "
            f"{device} tensor, got device type {{}}", (ArgValue.DEVICE_TYPE,)),
        wrong_device_id=Message(
            f"Argument {a}.device_id ({tname}) has an unsatisfied constraint: expected "
            f"{device}({{}}) like the arguments before it, got {device}({{}})",
            (ArgValue.FIRST_DEVICE_ID, ArgValue.DEVICE_ID)),
        not_compact=Message(
            f"Argument {a}.strides ({tname}): expected a compact (row-major contiguous) "
            f"tensor"),
        strides=tuple(strides), broadcast=buf.buffer_type == "auto_broadcast", **offset,
    )
