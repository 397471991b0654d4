"""The exported entry of a compiled function: argument checks in TVM's words, then the call.

For every buffer parameter it checks the type code, ndim, dtype, device and each dimension:
a constant dimension must match, the first occurrence of a symbolic variable binds it, and any
later occurrence (or a composite expression) must agree, e.g.
``Assert fail: (100 == int32(arg0.shape[0])), Argument arg0.shape[0] has an unsatisfied
constraint: expected 100, got 200``.
"""

from __future__ import annotations

from kiln.errors import TVMError
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import collect_vars
from kiln.ir.printer import expr_text
from kiln.ir.stmt import PrimFunc

from .c_types import c_scalar, dl_code
from .codegen_c import CSourceWriter, _Names


def _c_str(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def _fail(w: CSourceWriter, fmt: str, *args: str) -> None:
    extra = "".join(", " + a for a in args)
    w.emit(f'  kiln_set_error("{fmt}"{extra});')
    w.emit("  return -1;")


def write_entry(func: PrimFunc, names: _Names, w: CSourceWriter, compute_name: str,
                compute_args: list[str]) -> None:
    """Emit the packed entry function for ``func`` into writer ``w``."""
    n = len(func.params)
    w.emit(f"if (num_args != {n}) {{")
    _fail(w, f"{_c_str(func.name)}: expected {n} arguments, got %d", "(int)num_args")
    w.emit("}")
    bound: dict[E.Var, str] = {}
    deferred: list[tuple[str, E.PrimExpr, str]] = []
    for k, p in enumerate(func.params):
        buf = func.buffer_map.get(p)
        if buf is None:
            _scalar_arg(w, k, p, names, bound)
            continue
        _tensor_arg(w, k, p, buf, names, bound, deferred)
    # parameters that only appear inside composite shape expressions must already be bound
    for arg, shape_expr, what in deferred:
        missing = [v for v in collect_vars(shape_expr) if v not in bound]
        if missing:
            raise TVMError(
                f"{func.name}: the shape {expr_text(shape_expr)} of {what} uses variable "
                f"'{missing[0].name}', which is neither a scalar argument nor a plain dimension "
                f"of an argument tensor; pass it in the argument list")
        c = w.expr(shape_expr)
        w.emit(f"if ((int64_t)({c}) != {arg}) {{")
        _fail(w, f"Assert fail: ({_c_str(expr_text(shape_expr))} == {what}), Argument "
                 f"{what} has an unsatisfied constraint: expected %lld, got %lld",
              f"(long long)({c})", f"(long long){arg}")
        w.emit("}")
    w.emit(f"return {compute_name}({', '.join(compute_args)});")


def _scalar_arg(w: CSourceWriter, k: int, p: E.Var, names: _Names, bound) -> None:
    name = names.get(p)
    ct = c_scalar(p.dtype)
    if dt.is_float(p.dtype):
        w.emit(f"if (type_codes[{k}] != KILN_FLOAT && type_codes[{k}] != KILN_INT) {{")
        _fail(w, f"arg{k} ({_c_str(p.name)}): expected a number, got type code %d",
              f"(int)type_codes[{k}]")
        w.emit("}")
        w.emit(f"{ct} {name} = type_codes[{k}] == KILN_FLOAT ? ({ct})args[{k}].v_float64 : "
               f"({ct})args[{k}].v_int64;")
    else:
        w.emit(f"if (type_codes[{k}] != KILN_INT) {{")
        _fail(w, f"arg{k} ({_c_str(p.name)}): expected an integer, got type code %d",
              f"(int)type_codes[{k}]")
        w.emit("}")
        w.emit(f"{ct} {name} = ({ct})args[{k}].v_int64;")
    bound[p] = name


def _tensor_arg(w: CSourceWriter, k: int, p: E.Var, buf, names: _Names, bound, deferred) -> None:
    a = f"arg{k}"
    tname = _c_str(buf.name)
    w.emit(f"if (type_codes[{k}] != KILN_DLTENSOR || args[{k}].v_handle == NULL) {{")
    _fail(w, f"{a} ({tname}): expected a tensor (NDArray), got type code %d",
          f"(int)type_codes[{k}]")
    w.emit("}")
    w.emit(f"DLTensor* {a} = (DLTensor*)args[{k}].v_handle;")
    ndim = len(buf.shape)
    w.emit(f"if ({a}->ndim != {ndim}) {{")
    _fail(w, f"Argument {a}.ndim ({tname}) has an unsatisfied constraint: {a}.ndim is "
             f"expected to equal {ndim}, got %d", f"(int){a}->ndim")
    w.emit("}")
    code, bits, lanes = dl_code(buf.dtype)
    w.emit(f"if (!({a}->dtype.code == {code} && {a}->dtype.bits == {bits} && "
           f"{a}->dtype.lanes == {lanes})) {{")
    _fail(w, f"Assert fail: {a}.dtype is expected to be {buf.dtype} ({tname}), got "
             f"code=%d bits=%d lanes=%d", f"(int){a}->dtype.code", f"(int){a}->dtype.bits",
          f"(int){a}->dtype.lanes")
    w.emit("}")
    w.emit(f"if ({a}->device.device_type != KILN_CPU) {{")
    _fail(w, f"Argument {a}.device_type ({tname}) has an unsatisfied constraint: expected a "
             f"cpu tensor, got device type %d", f"(int){a}->device.device_type")
    w.emit("}")
    for d, extent in enumerate(buf.shape):
        what = f"{a}.shape[{d}]"
        val = f"{a}->shape[{d}]"
        if isinstance(extent, E.IntImm):
            w.emit(f"if ({val} != {extent.value}) {{")
            _fail(w, f"Assert fail: ({extent.value} == int32({what})), Argument {what} has an "
                     f"unsatisfied constraint: expected {extent.value}, got %lld",
                  f"(long long){val}")
            w.emit("}")
        elif isinstance(extent, E.Var) and extent not in bound:
            name = names.get(extent)
            w.emit(f"{c_scalar(extent.dtype)} {name} = ({c_scalar(extent.dtype)}){val};")
            bound[extent] = what
        else:
            deferred.append((val, extent, what))
    if ndim:
        _compact_check(w, a, tname, buf)
    data = names.get(p)
    ct = c_scalar(buf.dtype)
    w.emit(f"{ct}* {data} = ({ct}*)((char*){a}->data + {a}->byte_offset);")


def _compact_check(w: CSourceWriter, a: str, tname: str, buf) -> None:
    w.emit(f"if ({a}->strides != NULL) {{")
    w.emit("  int64_t expect = 1;")
    w.emit(f"  for (int d = {len(buf.shape) - 1}; d >= 0; --d) {{")
    w.emit(f"    if ({a}->shape[d] != 1 && {a}->strides[d] != expect) {{")
    w.emit(f'      kiln_set_error("Argument {a}.strides ({tname}): expected a compact '
           f'(row-major contiguous) tensor");')
    w.emit("      return -1;")
    w.emit("    }")
    w.emit(f"    expect *= {a}->shape[d];")
    w.emit("  }")
    w.emit("}")
