"""Assemble a whole C translation unit from lowered PrimFuncs."""

from __future__ import annotations

import json

from kiln.ir import expr as E
from kiln.ir.stmt import PrimFunc
from kiln.runtime.compiler import runtime_header

from . import c_alloc
from .c_bound_check import epilogue, has_bound_checks, prologue
from .c_entry import write_entry
from .c_packed_call import PACKED_CALLS_DEFINE, uses_packed_calls
from .c_types import c_scalar
from .codegen_c import CSourceWriter, _Names


def _function(func: PrimFunc, typedefs: set[str], helpers: dict[str, str]) -> str:
    names = _Names()
    # parameter names first so they keep their own spelling
    for p in func.params:
        names.get(p)
    body_w = CSourceWriter(names, typedefs, helpers)
    body_w.stmt(func.body)
    entry_w = CSourceWriter(names, typedefs, helpers)
    compute_name = f"{func.name}_compute"
    sig: list[str] = []
    call: list[str] = []
    for p in func.params:
        buf = func.buffer_map.get(p)
        if buf is not None:
            sig.append(f"{c_scalar(buf.dtype)}* restrict {names.get(p)}")
            call.append(names.get(p))
    scalars: list[E.Var] = []
    for p in func.params:
        if p not in func.buffer_map:
            scalars.append(p)
    for buf in func.buffer_map.values():
        scalars.extend(v for v in buf.symbolic_vars() if v not in scalars)
    for v in scalars:
        sig.append(f"{c_scalar(v.dtype)} {names.get(v)}")
        call.append(names.get(v))
    write_entry(func, names, entry_w, compute_name, call)
    checked = has_bound_checks(func.body)
    allocates = body_w.heap_allocates
    out = ["KILN_COMPUTE", f"static int32_t {compute_name}({', '.join(sig) or 'void'}) {{"]
    out += [c_alloc.prologue()] if allocates else []
    out += [prologue()] if checked else []
    out += body_w.lines
    out += [c_alloc.epilogue()] if allocates else []
    out += [epilogue(func.name)] if checked else []
    out.append("  return 0;")
    out.append("}")
    out.append("")
    out.append("KILN_ENTRY")
    out.append(f"KILN_DLL int32_t {func.name}(KilnValue* args, int32_t* type_codes, "
               f"int32_t num_args) {{")
    out += entry_w.lines
    out.append("}")
    return "\n".join(out)


def generate_c(funcs: list[PrimFunc], target: str, entry: str, module_info: bool = True) -> str:
    """C source for ``funcs`` with the runtime header, typedefs, helpers and (unless
    ``module_info`` is False: a kernel compiled apart, :func:`link_glue_c`) module info."""
    typedefs: set[str] = set()
    helpers: dict[str, str] = {}
    bodies = [_function(f, typedefs, helpers) for f in funcs]
    parts = [PACKED_CALLS_DEFINE] if uses_packed_calls(funcs) else []
    parts += [runtime_header(), c_alloc.ALLOC]
    parts += sorted(typedefs)
    parts += list(helpers.values())
    parts += bodies
    if module_info:
        info = json.dumps({"functions": [f.name for f in funcs], "entry": entry,
                           "target": target})
        info_c = info.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'KILN_DLL const char* kiln_module_info(void) {{ return "{info_c}"; }}')
    return "\n\n".join(parts) + "\n"


def link_glue_c(aliases: dict[str, str]) -> str:
    """The C source that joins kernels compiled apart (``generate_c(..., module_info=False)``)
    into one library: the runtime header and, for each packed function compiled under
    another symbol (``aliases``: name -> symbol), an exported function of that name that
    calls it."""
    parts = [runtime_header()]
    for name, symbol in aliases.items():
        if name != symbol:
            parts.append(f"int32_t {symbol}(KilnValue* args, int32_t* type_codes, "
                         f"int32_t num_args);\n"
                         f"KILN_DLL int32_t {name}(KilnValue* args, int32_t* type_codes, "
                         f"int32_t num_args) {{\n"
                         f"  return {symbol}(args, type_codes, num_args);\n}}")
    return "\n\n".join(parts) + "\n"
