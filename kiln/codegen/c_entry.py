"""The exported entry of a compiled C function: the argument checks of
``codegen/arg_checks.py`` rendered as C, then the call of the compute function.

Each check becomes ``if (!ok) { kiln_set_error("<message>", <values>); return -1; }``; a
message's run-time values are read from the ``DLTensor`` (``arg0->ndim``, ...) or the packed
call (``type_codes[k]``, ``num_args``). A tensor whose buffer declares strides or an element
offset gets locals ``argK_strides[]`` (the array's strides, or its compact ones) and
``argK_elem_offset`` that the checks read.
"""

from __future__ import annotations

from kiln.ir import expr as E
from kiln.ir.stmt import PrimFunc

from .arg_checks import ArgValue, Message, ScalarArg, ShapeDim, TensorArg, describe
from .c_types import c_scalar
from .codegen_c import CSourceWriter, _Names

#: how C reads each run-time value of a message: (printf conversion, C expression template)
_C_VALUES = {
    ArgValue.NUM_ARGS: ("%d", "(int)num_args"),
    ArgValue.TYPE_CODE: ("%d", "(int)type_codes[{k}]"),
    ArgValue.NDIM: ("%d", "(int){a}->ndim"),
    ArgValue.DTYPE_CODE: ("%d", "(int){a}->dtype.code"),
    ArgValue.DTYPE_BITS: ("%d", "(int){a}->dtype.bits"),
    ArgValue.DTYPE_LANES: ("%d", "(int){a}->dtype.lanes"),
    ArgValue.DEVICE_TYPE: ("%d", "(int){a}->device.device_type"),
    ArgValue.DIM: ("%lld", "(long long){a}->shape[{d}]"),
    ArgValue.STRIDE: ("%lld", "(long long){a}_strides[{d}]"),
    ArgValue.ELEM_OFFSET: ("%lld", "(long long){a}_elem_offset"),
    ArgValue.BYTE_OFFSET: ("%llu", "(unsigned long long){a}->byte_offset"),
}


def _c_field(k: int, field: str, axis: int) -> str:
    """The C expression of a constrained value of tensor argument ``k``."""
    if field == "shape":
        return f"arg{k}->shape[{axis}]"
    return f"arg{k}_strides[{axis}]" if field == "strides" else f"arg{k}_elem_offset"


def _c_str(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def _fail_if(w: CSourceWriter, cond: str, msg: Message, k: int = 0, d: int = 0,
             expected: str = "") -> None:
    """``if (cond) { set the error message; return -1; }``."""
    convs, vals = [], []
    for v in msg.values:
        if v is ArgValue.EXPECTED_DIM:
            conv, val = "%lld", f"(long long)({expected})"
        else:
            conv, template = _C_VALUES[v]
            val = template.format(k=k, a=f"arg{k}", d=d)
        convs.append(conv)
        vals.append(val)
    pieces = [_c_str(p) for p in msg.text.split("{}")]
    fmt = "".join(p + (convs[i] if i < len(convs) else "") for i, p in enumerate(pieces))
    w.emit(f"if ({cond}) {{")
    w.emit(f'  kiln_set_error("{fmt}"{"".join(", " + v for v in vals)});')
    w.emit("  return -1;")
    w.emit("}")


def write_entry(func: PrimFunc, names: _Names, w: CSourceWriter, compute_name: str,
                compute_args: list[str]) -> None:
    """Emit the packed entry function for ``func`` into writer ``w``."""
    spec = describe(func, "cpu")
    _fail_if(w, f"num_args != {spec.num_args}", spec.wrong_count)
    for arg in spec.args:
        if isinstance(arg, ScalarArg):
            _scalar_arg(w, arg, names)
        else:
            _tensor_arg(w, arg, func.buffer_map[arg.var].dtype, names)
    for d in spec.deferred:
        c = w.expr(d.expr)
        _fail_if(w, f"(int64_t)({c}) != {_c_field(d.index, d.field, d.axis)}", d.mismatch,
                 d.index, d.axis, expected=c)
    for alias in spec.aliases:
        _fail_if(w, f"kiln_tensors_overlap(arg{alias.output}, arg{alias.other})", alias.overlap)
    w.emit(f"return {compute_name}({', '.join(compute_args)});")


def _scalar_arg(w: CSourceWriter, arg: ScalarArg, names: _Names) -> None:
    k, name, ct = arg.index, names.get(arg.var), c_scalar(arg.var.dtype)
    if arg.is_float:
        _fail_if(w, f"type_codes[{k}] != KILN_FLOAT && type_codes[{k}] != KILN_INT",
                 arg.wrong_type, k)
        w.emit(f"{ct} {name} = type_codes[{k}] == KILN_FLOAT ? ({ct})args[{k}].v_float64 : "
               f"({ct})args[{k}].v_int64;")
    else:
        _fail_if(w, f"type_codes[{k}] != KILN_INT", arg.wrong_type, k)
        w.emit(f"{ct} {name} = ({ct})args[{k}].v_int64;")


def _tensor_arg(w: CSourceWriter, arg: TensorArg, dtype: str, names: _Names) -> None:
    k, a = arg.index, f"arg{arg.index}"
    _fail_if(w, f"type_codes[{k}] != KILN_DLTENSOR || args[{k}].v_handle == NULL",
             arg.not_a_tensor, k)
    w.emit(f"DLTensor* {a} = (DLTensor*)args[{k}].v_handle;")
    _fail_if(w, f"{a}->ndim != {arg.ndim}", arg.wrong_ndim, k)
    bits = " || ".join(f"{a}->dtype.bits == {b}" for b in arg.dtype_bits)
    bits = bits if len(arg.dtype_bits) == 1 else f"({bits})"
    _fail_if(w, f"!({a}->dtype.code == {arg.dtype_code} && {bits} && "
                f"{a}->dtype.lanes == {arg.dtype_lanes})", arg.wrong_dtype, k)
    _fail_if(w, f"{a}->device.device_type != KILN_CPU", arg.wrong_device, k)
    for dim in arg.dims:
        _constrain(w, k, dim, names)
    if arg.strides:
        _strides(w, a, arg)
        for dim in arg.strides:
            _constrain(w, k, dim, names)
    elif arg.ndim:
        _compact_check(w, a, arg)
    ct = c_scalar(dtype)
    if arg.elem_offset is None:
        w.emit(f"{ct}* {names.get(arg.var)} = ({ct}*)((char*){a}->data + {a}->byte_offset);")
        return
    _fail_if(w, f"{a}->byte_offset % {arg.elem_bytes} != 0", arg.bad_byte_offset, k)
    w.emit(f"int64_t {a}_elem_offset = (int64_t)({a}->byte_offset / {arg.elem_bytes});")
    _constrain(w, k, arg.elem_offset, names)
    if arg.offset_misaligned is not None:
        _fail_if(w, f"{a}_elem_offset % {arg.offset_factor} != 0", arg.offset_misaligned, k)
    w.emit(f"{ct}* {names.get(arg.var)} = ({ct}*){a}->data;")


def _constrain(w: CSourceWriter, k: int, dim: ShapeDim, names: _Names) -> None:
    """Check a constant value of argument ``k``, or define the variable it binds."""
    val = _c_field(k, dim.field, dim.axis)
    if dim.kind == "const":
        _fail_if(w, f"{val} != {dim.value}", dim.mismatch, k, dim.axis)
    elif dim.kind == "bind":
        var: E.Var = dim.value
        ct = c_scalar(var.dtype)
        w.emit(f"{ct} {names.get(var)} = ({ct}){val};")


def _strides(w: CSourceWriter, a: str, arg: TensorArg) -> None:
    """``int64_t argK_strides[ndim]``: the array's strides, or its compact strides when it
    has none; 0 for a dimension of extent 1 of an ``auto_broadcast`` buffer."""
    w.emit(f"int64_t {a}_strides[{arg.ndim}];")
    w.emit("{")
    w.emit("  int64_t compact = 1;")
    w.emit(f"  for (int d = {arg.ndim - 1}; d >= 0; --d) {{")
    w.emit(f"    {a}_strides[d] = {a}->strides != NULL ? {a}->strides[d] : compact;")
    if arg.broadcast:
        w.emit(f"    if ({a}->shape[d] == 1) {a}_strides[d] = 0;")
    w.emit(f"    compact *= {a}->shape[d];")
    w.emit("  }")
    w.emit("}")


def _compact_check(w: CSourceWriter, a: str, arg: TensorArg) -> None:
    w.emit(f"if ({a}->strides != NULL) {{")
    w.emit("  int64_t expect = 1;")
    w.emit(f"  for (int d = {arg.ndim - 1}; d >= 0; --d) {{")
    w.emit(f"    if ({a}->shape[d] != 1 && {a}->strides[d] != expect) {{")
    w.emit(f'      kiln_set_error("{_c_str(arg.not_compact.text)}");')
    w.emit("      return -1;")
    w.emit("    }")
    w.emit(f"    expect *= {a}->shape[d];")
    w.emit("  }")
    w.emit("}")
