"""The C backend (target kinds ``llvm`` and ``c``): C11 with OpenMP and vector extensions,
compiled by the system C compiler and loaded with ctypes (docs/codegen.md).

A sanitized build (``KILN_SANITIZE``, ``kiln.build(..., sanitize=...)``; kiln/runtime/sanitize.py)
adds the sanitizers' flags to the target's, so the compile cache keeps sanitized and plain
libraries apart, and refuses to load an AddressSanitizer library into a process without the
ASan runtime (it would abort the process)."""

from __future__ import annotations

from kiln.ir.stmt import PrimFunc
from kiln.ir.transform import PassContext
from kiln.runtime.compile_cache import CacheEntry
from kiln.runtime.module import Module
from kiln.runtime.sanitize import requested_sanitizers, require_runtime, sanitize_flags
from kiln.target import Target

from .backend import Backend
from .source_c import generate_c, link_glue_c


class CBackend(Backend):
    name = "c"

    def source(self, funcs: list[PrimFunc], target: Target) -> str:
        return generate_c(funcs, target.kind, funcs[0].name)

    def compile(self, funcs: list[PrimFunc], source: str, target: Target) -> Module:
        return Module.from_source(source, [f.name for f in funcs], funcs[0].name, target.kind,
                                  flags=self.flags(target))

    def flags(self, target: Target) -> list[str]:
        """The C compiler flags of ``target`` and of the sanitizers the current PassContext
        requests."""
        sanitizers = requested_sanitizers(PassContext.current().config)
        require_runtime(sanitizers)
        return target.c_flags() + sanitize_flags(sanitizers)

    def kernel_source(self, funcs: list[PrimFunc], target: Target) -> str:
        """The source of ``funcs`` as a translation unit compiled apart and linked by
        :meth:`link` (no module info)."""
        return generate_c(funcs, target.kind, funcs[0].name, module_info=False)

    def link(self, objects: list[CacheEntry], aliases: dict[str, str], sources: list[str],
             entry: str, target: Target) -> Module:
        """The loaded library of the compiled ``objects`` (of ``sources``), whose packed
        functions are ``aliases``' names (name -> the symbol it was compiled as)."""
        glue = link_glue_c(aliases)
        return Module.from_objects(objects, glue, list(aliases), entry, target.kind,
                                   "\n".join([*sources, glue]), flags=self.flags(target))
