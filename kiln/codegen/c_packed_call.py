"""C for calls out of compiled code: ``tvm_call_packed`` into the Python runtime's function
registry, ``call_extern`` of a C function, and C source imported with ``pragma_import_c``.

A packed call becomes a block that builds the argument array of the runtime ABI
(kiln_c_runtime.h, ``KILN_PACKED_CALLS``): each buffer a ``DLTensor`` on the stack (its
shape, and strides when declared, in ``int64_t`` arrays), ints as ``v_int64``, floats as
``v_float64``, strings and handles as ``v_handle``; then ``kiln_call_packed`` and, when the
registered function fails, ``return -1`` with the runtime's message as the function's error::

    { int64_t _shape1[1] = {(int64_t)(n)};
      DLTensor _dl2 = {(void*)(A), {KILN_CPU, 0}, 1, {2, 32, 1}, _shape1, NULL, 0};
      KilnValue _pv3[2]; int32_t _pc4[2];
      _pv3[0].v_handle = &_dl2; _pc4[0] = KILN_DLTENSOR; ...
      if (kiln_call_packed("my_func", _pv3, _pc4, 2) != 0) return -1; }

A packed call is a statement of its own (``Evaluate``), outside parallel loops (the error of a
worker thread could not reach the caller).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import PrimFunc
from kiln.tir.op import PACKED_CALL, STACK_ARRAY

from .arg_checks import dl_code

if TYPE_CHECKING:
    from .codegen_c import CSourceWriter

#: defined before the runtime header by a source that makes packed calls
PACKED_CALLS_DEFINE = "#define KILN_PACKED_CALLS 1"
#: the pragma whose value, C source, is pasted into the translation unit (as in TVM)
IMPORT_C = "pragma_import_c"


def uses_packed_calls(funcs: list[PrimFunc]) -> bool:
    """Whether any of ``funcs`` calls a registered function (``tvm_call_packed``)."""
    found: list[E.Call] = []

    def visit(n) -> None:
        if isinstance(n, E.Call) and n.op == PACKED_CALL:
            found.append(n)

    for f in funcs:
        post_order_visit(f.body, visit)
    return bool(found)


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def write_packed_call(w: CSourceWriter, call: E.Call) -> None:
    """Emit the block of one ``tvm_call_packed`` statement (module docstring)."""
    if w.in_parallel:
        raise NotImplementedError(
            f"tir.call_packed({call.args[0].value!r}) inside a parallel loop is not supported; "
            f"call it outside the loop, or make the loop serial")
    args = call.args[1:]
    w.emit("{")
    w.indent += 1
    values = [_packed_value(w, a) for a in args]
    pv, pc = w.fresh("pv"), w.fresh("pc")
    w.emit(f"KilnValue {pv}[{max(len(args), 1)}]; int32_t {pc}[{max(len(args), 1)}];")
    for k, (field, code, value) in enumerate(values):
        w.emit(f"{pv}[{k}].{field} = {value}; {pc}[{k}] = {code};")
    w.emit(f"if (kiln_call_packed({_c_string(call.args[0].value)}, {pv}, {pc}, {len(args)}) "
           f"!= 0) return -1;")
    w.indent -= 1
    w.emit("}")


def _packed_value(w: CSourceWriter, a: E.PrimExpr) -> tuple[str, str, str]:
    """(KilnValue field, type code, C value) of one argument of a packed call."""
    if isinstance(a, E.Call) and a.op == STACK_ARRAY:
        return "v_handle", "KILN_DLTENSOR", "&" + _stack_array(w, a)
    if isinstance(a, E.StringImm):
        return "v_handle", "KILN_STR", f"(void*){_c_string(a.value)}"
    if dt.is_float(a.dtype):
        return "v_float64", "KILN_FLOAT", f"(double)({w.expr(a)})"
    if a.dtype == "handle":
        return "v_handle", "KILN_HANDLE", f"(void*)({w.expr(a)})"
    return "v_int64", "KILN_INT", f"(int64_t)({w.expr(a)})"


def _stack_array(w: CSourceWriter, call: E.Call) -> str:
    """Declare a DLTensor for ``tvm_stack_make_array(data, shape, strides, ndim, carrier,
    elem_offset)`` on the stack; returns its name."""
    data, shape, strides, ndim, carrier, offset = call.args
    dims = _int64_array(w, "shape", shape)
    steps = _int64_array(w, "strides", strides) if isinstance(strides, E.Call) else "NULL"
    code, bits, lanes = dl_code(carrier.dtype)
    itemsize = dt.itemsize(carrier.dtype)
    name = w.fresh("dl")
    w.emit(f"DLTensor {name} = {{(void*)({w.expr(data)}), {{KILN_CPU, 0}}, {ndim.value}, "
           f"{{{code}, {bits}, {lanes}}}, {dims}, {steps}, "
           f"(uint64_t)({w.expr(offset)}) * {itemsize}}};")
    return name


def _int64_array(w: CSourceWriter, base: str, values: E.Call) -> str:
    """Declare an ``int64_t`` array of a ``tvm_stack_make_shape``; returns its name."""
    name = w.fresh(base)
    items = ", ".join(f"(int64_t)({w.expr(v)})" for v in values.args) or "0"
    w.emit(f"int64_t {name}[{max(len(values.args), 1)}] = {{{items}}};")
    return name


def extern_call_text(w: CSourceWriter, call: E.Call) -> str:
    """``name(args)`` of a ``call_extern``."""
    return f"{call.args[0].value}({', '.join(w.operand(a) for a in call.args[1:])})"


def nested_call_error(call: E.Call) -> NotImplementedError:
    """The error for a packed call (or one of its array builders) inside an expression."""
    return NotImplementedError(
        f"C codegen: {call.op} must be a statement of its own (the body of te.extern, or "
        f"ib.emit(tvm.tir.call_packed(...))), not part of an expression")


__all__ = ["PACKED_CALLS_DEFINE", "IMPORT_C", "uses_packed_calls", "write_packed_call",
           "extern_call_text", "nested_call_error"]
