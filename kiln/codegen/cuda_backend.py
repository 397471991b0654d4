"""The CUDA backend (target kinds ``cuda`` and ``nvptx``): CUDA C compiled with NVRTC,
launched through the driver API; the host side of each function runs in Python
(``cuda_host.py``).

The build compiles the CUDA source right away, so code generation errors surface at build time
even without a GPU: for ``-arch=sm_XY`` of the target string if given, else for the compute
capability of ``cuda(0)`` when a GPU is present, else for ``sm_80``. On a GPU of another
compute capability the kernels are recompiled for it when first launched.
``CUDABackend(compile_now=False)`` skips the NVRTC compile (it then happens at the first
launch), for tools and tests that only look at the generated code.
"""

from __future__ import annotations

from typing import Any

from kiln.errors import TVMError
from kiln.target import Target
from kiln.tir.split_host_device import SplitFunc

from .backend import Backend
from .codegen_cuda import generate_cuda
from .cuda_host import HostFunction, host_source

DEFAULT_ARCH = "sm_80"


class CUDABackend(Backend):
    name = "cuda"

    def __init__(self, compile_now: bool = True):
        self.compile_now = compile_now

    def source(self, funcs: list[SplitFunc], target: Target) -> str:
        return generate_cuda([k for sp in funcs for k in sp.kernels])

    def compile(self, funcs: list[SplitFunc], source: str, target: Target) -> Any:
        """A :class:`kiln.runtime.cuda_driver.CUDAModule` of the host functions and kernels."""
        from kiln.runtime import cuda_driver as rt

        if self.compile_now:
            arch = _build_arch(target, rt)
            image = rt.compile_cuda(source, arch)
        else:
            arch, image = target.attrs.get("arch", DEFAULT_ARCH), None
        return cuda_module(funcs, source, target.text, arch, image)


def cuda_module(funcs: list[SplitFunc], source: str, target_text: str, arch: str,
                image: bytes | None) -> Any:
    """The :class:`kiln.runtime.cuda_driver.CUDAModule` of split functions and their CUDA
    ``source`` (``image``: its cubin for ``arch``, or None to compile at the first launch);
    also how a saved build is loaded back (AutoTVM's measurement of CUDA candidates)."""
    from kiln.runtime import cuda_driver as rt

    kernels = [k for sp in funcs for k in sp.kernels]
    params = {k.name: [p.dtype if p.kind == "scalar" else "handle" for p in k.params]
              for k in kernels}
    device_mod = rt.CUDADeviceModule(source, params, arch, image)
    functions = {sp.func.name: HostFunction(sp, device_mod) for sp in funcs}
    host_text = "\n\n".join(host_source(sp) for sp in funcs)
    return rt.CUDAModule(functions, funcs[0].func.name if funcs else None, device_mod,
                         host_text, target_text, exporter=_export_archive)


def _export_archive(mod, path) -> None:
    from .cuda_archive import export_archive

    export_archive(mod, path)


def _build_arch(tgt: Target, rt) -> str:
    arch = tgt.attrs.get("arch")
    if arch:
        return arch
    from kiln.runtime.device import cuda

    if cuda(0).exist:
        try:
            return rt.device_arch(0)
        except TVMError:
            pass
    return DEFAULT_ARCH


def compile_source(source: str, arch: str = DEFAULT_ARCH, fmt: str = "cubin") -> bytes:
    """NVRTC-compile CUDA ``source`` for ``arch`` (for tests and tools)."""
    from kiln.runtime.cuda_driver import compile_cuda

    return compile_cuda(source, arch, fmt)
