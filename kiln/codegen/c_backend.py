"""The C backend (target kinds ``llvm`` and ``c``): C11 with OpenMP and vector extensions,
compiled by the system C compiler and loaded with ctypes (docs/codegen.md)."""

from __future__ import annotations

from kiln.ir.stmt import PrimFunc
from kiln.runtime.module import Module
from kiln.target import Target

from .backend import Backend
from .source_c import generate_c


class CBackend(Backend):
    name = "c"

    def source(self, funcs: list[PrimFunc], target: Target) -> str:
        return generate_c(funcs, target.kind, funcs[0].name)

    def compile(self, funcs: list[PrimFunc], source: str, target: Target) -> Module:
        return Module.from_source(source, [f.name for f in funcs], funcs[0].name, target.kind,
                                  flags=target.c_flags())
