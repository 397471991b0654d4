"""``pragma_import_llvm``: LLVM IR compiled into a CPU module, as TVM's tensorize tutorial
links its ``gemv_update`` micro-kernel (``s[C].pragma(axis, "import_llvm", ll_code)``).

kiln's CPU backend compiles C, so the IR goes through LLVM's static compiler (``llc``, found
on ``PATH`` as ``llc`` or ``llc-<version>``) to assembly, which :func:`llvm_ir_to_c` pastes
into the translation unit as one top-level ``__asm__`` block (in ``.text``, between
``.pushsection`` and ``.popsection``, the assembler's file-level directives left out), after
a C prototype of each function the IR defines, so that a tensorized body's ``call_extern``
calls it. The module's C source then holds everything: its cache key, ``export_library``
and ``fcompile`` see the IR's code like any other.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

from kiln.errors import CompileError

#: the attribute of ``s[T].pragma(axis, "import_llvm", ir)``
IMPORT_LLVM = "pragma_import_llvm"

_DEFINE = re.compile(r"^define\b[^@]*?(\S+)\s+@([\w.$]+)\s*\((.*)\)", re.MULTILINE)
_SCALARS = {"void": "void", "i1": "int8_t", "i8": "int8_t", "i16": "int16_t",
            "i32": "int32_t", "i64": "int64_t", "float": "float", "double": "double"}
_DROPPED_DIRECTIVES = (".file", ".ident", ".addrsig", '.section\t".note.GNU-stack"',
                       '.section ".note.GNU-stack"')

__all__ = ["IMPORT_LLVM", "llvm_ir_to_c", "prototypes"]


def _llc() -> str:
    for name in ("llc", *(f"llc-{v}" for v in range(20, 10, -1))):
        path = shutil.which(name)
        if path:
            return path
    raise CompileError("pragma import_llvm needs LLVM's static compiler (llc) on PATH to "
                       "compile the IR; install LLVM, or pass the C source with import_c")


def _c_type(llvm_type: str) -> str:
    if llvm_type.endswith("*") or llvm_type == "ptr":
        return "void*"
    if llvm_type not in _SCALARS:
        raise CompileError(f"pragma import_llvm: no C type for LLVM type {llvm_type!r} in a "
                           f"function signature")
    return _SCALARS[llvm_type]


def _params(text: str) -> list[str]:
    """The LLVM types of a ``define``'s parameter list (each parameter's first word)."""
    params = [p.strip() for p in text.split(",") if p.strip()]
    return [] if params == ["void"] else [p.split()[0] for p in params]


def prototypes(ir: str) -> list[str]:
    """A C prototype of each function ``ir`` defines."""
    protos = []
    for ret, name, params in _DEFINE.findall(ir):
        args = ", ".join(_c_type(t) for t in _params(params)) or "void"
        protos.append(f"{_c_type(ret)} {name}({args});")
    if not protos:
        raise CompileError("pragma import_llvm: the IR defines no function")
    return protos


def _assembly(ir: str) -> str:
    res = subprocess.run([_llc(), "-O3", "-relocation-model=pic", "-filetype=asm", "-o", "-"],
                         input=ir, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise CompileError(f"pragma import_llvm: llc rejected the IR:\n{res.stderr.strip()}")
    return res.stdout


def _c_string(line: str) -> str:
    return '"' + line.replace("\\", "\\\\").replace('"', '\\"') + '\\n"'


@functools.lru_cache(maxsize=64)
def llvm_ir_to_c(ir: str) -> str:
    """C source defining what LLVM ``ir`` defines: prototypes, then its assembly (``llc``
    runs once per IR text in a process)."""
    lines = [ln for ln in _assembly(ir).splitlines()
             if ln.strip() and not ln.strip().startswith(_DROPPED_DIRECTIVES)]
    body = "\n  ".join(_c_string(ln) for ln in [".pushsection .text", *lines, ".popsection"])
    return "\n".join(prototypes(ir)) + f"\n__asm__(\n  {body});\n"
