"""CUDA runtime: NVRTC compilation, the driver API (contexts, memory, modules, launches, events)
and the runtime modules that ``kiln.build(..., target="cuda")`` returns.

Everything goes through NVIDIA's official Python bindings, ``cuda-bindings``
(``cuda.bindings.nvrtc`` / ``cuda.bindings.driver``; ``pip install kiln[cuda]``). NVRTC needs
no GPU, so CUDA source compiles anywhere the bindings install; contexts, memory and launches
need a GPU and its driver and raise :class:`kiln.TVMError` without one.

Importing this module registers the CUDA device allocator with
:func:`kiln.runtime.ndarray.register_device_allocator` (when the bindings import), so
``kiln.nd.array(x, kiln.cuda(0))`` allocates with ``cuMemAlloc`` and copies both ways.
Work runs on the legacy default stream of each device's primary context.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CompileError, TVMError
from .compile_cache import CacheEntry, build, cache_entry, lookup
from .device import CUDA, Device
from .ndarray import register_device_allocator

__all__ = [
    "available", "nvrtc_version", "supported_archs", "compile_cuda", "device_arch",
    "CUDAKernel", "CUDADeviceModule", "CUDAModule", "CUDAAllocator", "workspace",
    "time_evaluator",
]

_INSTALL_HINT = ("install NVIDIA's CUDA Python bindings: pip install 'kiln[cuda]' "
                 "(cuda-bindings, nvidia-cuda-nvrtc, nvidia-cuda-runtime)")


# ---------------------------------------------------------------------------------------
# the bindings
# ---------------------------------------------------------------------------------------
def _import_bindings():
    try:
        from cuda.bindings import driver, nvrtc  # type: ignore[import-not-found]
    except ImportError:
        try:  # cuda-python < 12.6 spelled them cuda.cuda / cuda.nvrtc
            from cuda import cuda as driver  # type: ignore[import-not-found,no-redef]
            from cuda import nvrtc  # type: ignore[import-not-found,no-redef]
        except ImportError:
            return None, None
    return driver, nvrtc


_DRIVER, _NVRTC = _import_bindings()


def available() -> bool:
    """True when the CUDA Python bindings import (a GPU is not needed for this)."""
    return _NVRTC is not None


def _nvrtc():
    if _NVRTC is None:
        raise CompileError(f"cannot compile CUDA: the NVRTC bindings are missing; {_INSTALL_HINT}")
    return _NVRTC


def _driver():
    if _DRIVER is None:
        raise TVMError(f"CUDA is not available: the driver bindings are missing; {_INSTALL_HINT}")
    return _DRIVER


def _enum_name(err) -> str:
    return getattr(err, "name", str(err))


def _check(result, what: str):
    """Unpack a cuda-bindings ``(err, *values)`` result, raising TVMError on failure."""
    err, *rest = result
    if int(err) != 0:
        d = _DRIVER
        detail = ""
        if d is not None:
            try:
                e2, text = d.cuGetErrorString(err)
                if int(e2) == 0 and text:
                    detail = ": " + text.decode()
            except Exception:  # noqa: BLE001 - the message is best effort
                pass
        raise TVMError(f"CUDA error in {what}: {_enum_name(err)}{detail}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


# ---------------------------------------------------------------------------------------
# NVRTC
# ---------------------------------------------------------------------------------------
def nvrtc_version() -> tuple[int, int]:
    n = _nvrtc()
    err, major, minor = n.nvrtcVersion()
    if int(err) != 0:
        raise CompileError(f"nvrtcVersion failed: {_enum_name(err)}")
    return int(major), int(minor)


def supported_archs() -> list[int]:
    """Compute capabilities (e.g. 80 for sm_80) this NVRTC can generate cubins for."""
    n = _nvrtc()
    try:
        err, archs = n.nvrtcGetSupportedArchs()
        if int(err) == 0:
            return sorted(int(a) for a in archs)
    except AttributeError:  # very old NVRTC
        pass
    return [52, 60, 61, 70, 75, 80, 86, 89, 90]


def _include_dirs() -> list[str]:
    """Where cuda_fp16.h lives: nvidia-cuda-runtime's wheel, $CUDA_HOME or /usr/local/cuda."""
    out: list[str] = []
    try:
        from cuda import pathfinder  # type: ignore[import-not-found]

        d = pathfinder.find_nvidia_header_directory("cudart")
        if d:
            out.append(str(d))
    except Exception:  # noqa: BLE001 - optional helper
        pass
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            out.append(os.path.join(os.environ[env], "include"))
    out.append("/usr/local/cuda/include")
    return [d for d in dict.fromkeys(out) if os.path.isfile(os.path.join(d, "cuda_fp16.h"))]


def _program_log(n, prog) -> str:
    err, size = n.nvrtcGetProgramLogSize(prog)
    if int(err) != 0 or size <= 1:
        return ""
    buf = b" " * size
    n.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace")


def _numbered(source: str, log: str, context: int = 3) -> str:
    import re

    lines = source.splitlines()
    wanted: set[int] = set()
    for m in re.finditer(r"\((\d+)\): (?:error|catastrophic)", log):
        k = int(m.group(1))
        wanted.update(range(max(1, k - context), min(len(lines), k + context) + 1))
    if not wanted:
        wanted = set(range(1, min(len(lines), 40) + 1))
    return "\n".join(f"{k:5d}  {lines[k - 1]}" for k in sorted(wanted))


def _cache_entry(source: str, arch: str, fmt: str, options: Sequence[str]) -> CacheEntry:
    from .compiler import cache_dir

    try:
        ver = ".".join(map(str, nvrtc_version()))
    except CompileError:
        ver = "?"
    h = hashlib.sha256("\0".join([source, arch, fmt, ver, *options]).encode()).hexdigest()
    return cache_entry(cache_dir() / "cuda", "kernels", h, f".{fmt}")


def compile_cuda(source: str, arch: str = "sm_80", fmt: str = "cubin",
                 options: Sequence[str] = (), name: str = "kiln_kernels.cu") -> bytes:
    """Compile CUDA C ``source`` with NVRTC for ``arch`` (``sm_80``, ``sm_90``...) to a cubin
    (``fmt="cubin"``) or PTX text (``fmt="ptx"``, bytes). Results are cached on disk under
    ``$KILN_CACHE_DIR/cuda``, each entry checked before use (``compile_cache.py``). Raises
    :class:`kiln.CompileError` with NVRTC's log."""
    if fmt not in ("cubin", "ptx"):
        raise ValueError(f"compile_cuda: fmt must be 'cubin' or 'ptx', got {fmt!r}")
    if not arch.startswith(("sm_", "compute_")):
        raise ValueError(f"compile_cuda: arch must look like 'sm_80', got {arch!r}")
    n = _nvrtc()
    entry = _cache_entry(source, arch, fmt, options)

    def make(entry: CacheEntry, out: Path) -> None:
        out.write_bytes(_nvrtc_compile(n, source, arch, fmt, options, name))

    return Path(lookup(entry) or build(entry, make)).read_bytes()


def _nvrtc_compile(n: Any, source: str, arch: str, fmt: str, options: Sequence[str],
                   name: str) -> bytes:
    """The cubin or PTX NVRTC makes of ``source`` (not cached)."""
    virtual = "compute_" + arch.split("_", 1)[1]
    target = arch if fmt == "cubin" else virtual
    opts = [f"--gpu-architecture={target}", "--std=c++17", *options]
    if "#include <cuda_fp16.h>" in source:
        dirs = _include_dirs()
        if not dirs:
            raise CompileError(
                "this kernel uses float16, which needs cuda_fp16.h, and no CUDA headers were "
                "found; pip install nvidia-cuda-runtime (part of kiln[cuda]) or set CUDA_HOME")
        opts += [f"--include-path={d}" for d in dirs]
    err, prog = n.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if int(err) != 0:
        raise CompileError(f"nvrtcCreateProgram failed: {_enum_name(err)}")
    try:
        bopts = [o.encode() for o in opts]
        (err,) = n.nvrtcCompileProgram(prog, len(bopts), bopts)
        log = _program_log(n, prog)
        if int(err) != 0:
            raise CompileError(
                f"NVRTC failed to compile the generated CUDA for {arch}:\n{log.strip()}\n"
                f"--- source (excerpt) ---\n{_numbered(source, log)}")
        if fmt == "cubin":
            err, size = n.nvrtcGetCUBINSize(prog)
            data = b" " * size
            (err,) = n.nvrtcGetCUBIN(prog, data)
        else:
            err, size = n.nvrtcGetPTXSize(prog)
            data = b" " * size
            (err,) = n.nvrtcGetPTX(prog, data)
            data = data.rstrip(b"\x00")
        if int(err) != 0:
            raise CompileError(f"NVRTC could not return the {fmt}: {_enum_name(err)}")
    finally:
        n.nvrtcDestroyProgram(prog)
    return data


# ---------------------------------------------------------------------------------------
# devices and contexts
# ---------------------------------------------------------------------------------------
class _DeviceState:
    """The primary context of one GPU and the limits kiln checks launches against."""

    def __init__(self, device_id: int):
        d = _driver()
        try:
            _check(d.cuInit(0), "cuInit")
            count = _check(d.cuDeviceGetCount(), "cuDeviceGetCount")
        except TVMError as e:
            raise TVMError(f"no CUDA GPU is available ({e}); cuda({device_id}) cannot be "
                           f"used") from None
        except Exception as e:  # noqa: BLE001 - e.g. the driver library is not installed
            raise TVMError(f"no CUDA GPU is available (the NVIDIA driver could not be "
                           f"loaded: {e}); cuda({device_id}) cannot be used") from None
        if device_id >= int(count):
            raise TVMError(f"cuda({device_id}) does not exist: the driver reports {count} "
                           f"CUDA device(s)")
        self.device_id = device_id
        self.dev = _check(d.cuDeviceGet(device_id), "cuDeviceGet")
        self.ctx = _check(d.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        self.activate()
        A = d.CUdevice_attribute

        def attr(name):
            return int(_check(d.cuDeviceGetAttribute(getattr(A, name), self.dev), name))

        self.cc = (attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                   attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))
        self.max_threads = attr("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK")
        self.max_block = (attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X"),
                          attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y"),
                          attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z"))
        self.max_grid = (attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X"),
                         attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y"),
                         attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z"))
        self.max_shared = attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK")
        err, name = d.cuDeviceGetName(256, self.dev)
        self.name = name.split(b"\x00")[0].decode() if int(err) == 0 else "?"

    def activate(self) -> None:
        _check(_driver().cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"


_DEVICES: dict[int, _DeviceState] = {}
_LOCK = threading.Lock()


def _device(device_id: int) -> _DeviceState:
    st = _DEVICES.get(device_id)
    if st is None:
        with _LOCK:
            st = _DEVICES.get(device_id)
            if st is None:
                st = _DEVICES[device_id] = _DeviceState(device_id)
    st.activate()
    return st


def device_attributes(device_id: int = 0) -> dict:
    """The limits TVM's ``Device`` reports, read from the driver (raises TVMError without a
    GPU)."""
    st = _device(device_id)
    return {"max_threads_per_block": st.max_threads, "max_shared_memory_per_block":
            st.max_shared, "compute_version": f"{st.cc[0]}.{st.cc[1]}", "device_name": st.name,
            "max_thread_dimensions": st.max_block, "warp_size": 32}


def device_arch(device_id: int = 0) -> str:
    """``sm_XY`` of a GPU (raises TVMError without one)."""
    return _device(device_id).arch


# ---------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------
class CUDAAllocator:
    """NDArray storage on CUDA devices (registered for device type 2 on import)."""

    def alloc(self, nbytes: int, device: Device) -> int:
        _device(device.device_id)
        try:
            return int(_check(_driver().cuMemAlloc(int(nbytes)), "cuMemAlloc"))
        except TVMError as e:
            raise TVMError(f"cannot allocate {nbytes} bytes on {device}: {e}") from None

    def free(self, ptr: int, device: Device) -> None:
        st = _DEVICES.get(device.device_id)
        if st is None or _DRIVER is None:
            return
        try:
            st.activate()
            _DRIVER.cuMemFree(ptr)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass

    def copy_from_host(self, dst: int, src: np.ndarray, device: Device) -> None:
        _device(device.device_id)
        src = np.ascontiguousarray(src)
        if src.nbytes:
            _check(_driver().cuMemcpyHtoD(dst, src.ctypes.data, src.nbytes), "cuMemcpyHtoD")

    def copy_to_host(self, dst: np.ndarray, src: int, device: Device) -> None:
        _device(device.device_id)
        if not dst.flags.c_contiguous:
            raise ValueError("copy_to_host needs a C-contiguous destination")
        if dst.nbytes:
            _check(_driver().cuMemcpyDtoH(dst.ctypes.data, src, dst.nbytes), "cuMemcpyDtoH")

    def sync(self, device: Device) -> None:
        _device(device.device_id)
        _check(_driver().cuCtxSynchronize(), "cuCtxSynchronize")


_WORKSPACES: dict[tuple[int, int], int] = {}
_WORKSPACE_SIZES: dict[tuple[int, int], int] = {}


def workspace(device_id: int, nbytes: int, slot: int) -> int:
    """A device buffer of at least ``nbytes`` kept for reuse (host-side temporaries of a
    compiled function), identified by ``slot``; not shared between concurrent calls."""
    key = (device_id, slot)
    ptr = _WORKSPACES.get(key)
    size = _WORKSPACE_SIZES.get(key, 0)
    if ptr is None or size < nbytes:
        _device(device_id)
        if ptr is not None:
            _driver().cuMemFree(ptr)
        ptr = int(_check(_driver().cuMemAlloc(max(int(nbytes), 1)), "cuMemAlloc (workspace)"))
        _WORKSPACES[key] = ptr
        _WORKSPACE_SIZES[key] = nbytes
    return ptr


if _DRIVER is not None:
    register_device_allocator(CUDA, CUDAAllocator())


# ---------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------
def time_evaluator(func: Callable[..., Any], device_id: int = 0, number: int = 10,
                   repeat: int = 1, min_repeat_ms: float = 0) -> Callable[..., Any]:
    """A function that times ``func`` (anything that queues work on cuda(``device_id``)'s
    default stream: a kernel's host function, a graph's ``run``) on its arguments with CUDA
    events: after a warm-up call, each of ``repeat`` measurements runs ``func`` ``number``
    times (grown until it lasts ``min_repeat_ms``) and records the mean; returns a
    :class:`kiln.runtime.module.BenchmarkResult`."""
    from .module import BenchmarkResult

    if repeat < 1 or number < 1:
        raise ValueError("time_evaluator: number and repeat must be >= 1")

    def evaluator(*args: Any) -> BenchmarkResult:
        func(*args)
        d = _driver()
        _device(device_id)
        start = _check(d.cuEventCreate(0), "cuEventCreate")
        end = _check(d.cuEventCreate(0), "cuEventCreate")
        try:
            _check(d.cuCtxSynchronize(), "cuCtxSynchronize")
            n = int(number)
            results = []
            for _ in range(repeat):
                while True:
                    _check(d.cuEventRecord(start, 0), "cuEventRecord")
                    for _ in range(n):
                        func(*args)
                    _check(d.cuEventRecord(end, 0), "cuEventRecord")
                    _check(d.cuEventSynchronize(end), "cuEventSynchronize")
                    ms = float(_check(d.cuEventElapsedTime(start, end), "cuEventElapsedTime"))
                    if ms >= min_repeat_ms:
                        break
                    per_call = max(ms / n, 1e-6)
                    n = max(int(min_repeat_ms / per_call) + 1, int(n * 1.618))
                results.append(ms / 1e3 / n)
        finally:
            d.cuEventDestroy(start)
            d.cuEventDestroy(end)
        return BenchmarkResult(results)

    return evaluator


# ---------------------------------------------------------------------------------------
# modules and kernels
# ---------------------------------------------------------------------------------------
_CTYPES = {
    "float16": ctypes.c_uint16, "float32": ctypes.c_float, "float64": ctypes.c_double,
    "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
    "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "bool": ctypes.c_bool,
    "handle": ctypes.c_void_p,
}


class CUDAKernel:
    """One ``__global__`` function of a loaded module; ``launch`` takes Python values."""

    def __init__(self, name: str, handle, state: _DeviceState, param_dtypes: Sequence[str]):
        self.name = name
        self.handle = handle
        self.state = state
        self._values = [_CTYPES[t]() for t in param_dtypes]
        self._float16 = [t == "float16" for t in param_dtypes]
        self._ptrs = (ctypes.c_void_p * max(len(self._values), 1))(
            *[ctypes.addressof(v) for v in self._values])
        self._params_addr = ctypes.addressof(self._ptrs)

    def launch(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
               shared_bytes: int = 0) -> None:
        st = self.state
        threads = block[0] * block[1] * block[2]
        if threads > st.max_threads or any(b > m for b, m in zip(block, st.max_block, strict=True)):
            raise TVMError(
                f"{self.name}: block of {block[0]} x {block[1]} x {block[2]} = {threads} threads "
                f"exceeds the limits of {st.name} (at most {st.max_threads} threads per block, "
                f"{st.max_block[0]} x {st.max_block[1]} x {st.max_block[2]})")
        if any(g < 1 for g in grid) or any(b < 1 for b in block):
            return  # an empty launch: nothing to compute
        if any(g > m for g, m in zip(grid, st.max_grid, strict=True)):
            raise TVMError(f"{self.name}: grid {tuple(grid)} exceeds the device's limit "
                           f"{st.max_grid}")
        for slot, v, half in zip(self._values, args, self._float16, strict=True):
            slot.value = int(np.float16(v).view(np.uint16)) if half else v
        _check(_driver().cuLaunchKernel(self.handle, grid[0], grid[1], grid[2], block[0],
                                        block[1], block[2], shared_bytes, 0,
                                        self._params_addr, 0), f"cuLaunchKernel({self.name})")


class CUDADeviceModule:
    """The device code of a build: the CUDA source and its compiled images.

    ``get_source()`` returns the CUDA C (TVM's ``mod.imported_modules[0].get_source()``),
    ``get_source("ptx")`` PTX for the build's architecture. Kernels are loaded into a GPU on
    first use, compiled for that GPU's compute capability if the build was for another."""

    type_key = "cuda"

    def __init__(self, source: str, kernels: dict[str, list[str]], arch: str,
                 image: bytes | None = None):
        self.source = source
        self.kernel_params = dict(kernels)  # name -> parameter dtypes
        self.arch = arch
        self._images: dict[str, bytes] = {}
        if image is not None:
            self._images[arch] = image
        self._loaded: dict[int, Any] = {}
        self._kernels: dict[tuple[int, str], CUDAKernel] = {}
        self.imported_modules: list = []

    def compile_for(self, arch: str, fmt: str = "cubin") -> bytes:
        if fmt == "cubin" and arch in self._images:
            return self._images[arch]
        data = compile_cuda(self.source, arch, fmt)
        if fmt == "cubin":
            self._images[arch] = data
        return data

    def get_source(self, fmt: str = "") -> str:
        if fmt in ("", "cu", "cuda"):
            return self.source
        if fmt == "ptx":
            return self.compile_for(self.arch, "ptx").decode()
        raise TVMError(f"get_source: unsupported format {fmt!r} for a CUDA module "
                       f"(use '' or 'cuda' for CUDA C, 'ptx' for PTX)")

    def _image_for(self, st: _DeviceState) -> bytes:
        cc = st.cc[0] * 10 + st.cc[1]
        archs = supported_archs()
        if cc in archs:
            return self.compile_for(f"sm_{cc}")
        older = [a for a in archs if a <= cc]
        if not older:
            raise TVMError(f"NVRTC {nvrtc_version()} cannot generate code for {st.name} "
                           f"(sm_{cc}); supported: {archs}")
        # a GPU newer than this NVRTC: PTX for the newest known arch, JIT-compiled by the driver
        return self.compile_for(f"sm_{older[-1]}", "ptx") + b"\x00"

    def kernel(self, name: str, device_id: int) -> CUDAKernel:
        k = self._kernels.get((device_id, name))
        if k is not None:
            k.state.activate()
            return k
        st = _device(device_id)
        mod = self._loaded.get(device_id)
        if mod is None:
            mod = _check(_driver().cuModuleLoadData(self._image_for(st)), "cuModuleLoadData")
            self._loaded[device_id] = mod
        handle = _check(_driver().cuModuleGetFunction(mod, name.encode()),
                        f"cuModuleGetFunction({name})")
        k = self._kernels[(device_id, name)] = CUDAKernel(name, handle, st,
                                                           self.kernel_params[name])
        return k

    def __repr__(self) -> str:
        return f"Module(cuda, {id(self):x})"


class CUDAModule:
    """What ``kiln.build(..., target="cuda")`` returns: host functions (Python, they check
    arguments and launch kernels) with the device module in ``imported_modules[0]``."""

    type_key = "cuda_host"

    def __init__(self, functions: dict[str, Callable[..., None]], entry: str | None,
                 device_module: CUDADeviceModule, host_source: str = "", target: str = "cuda",
                 exporter: Callable[[CUDAModule, str], None] | None = None):
        self._exporter = exporter
        self._functions = dict(functions)
        self.functions = list(functions)
        self.entry_name = entry
        self.target = target
        self.imported_modules: list = [device_module]
        self._host_source = host_source

    def get_function(self, name: str, query_imports: bool = False) -> Callable[..., None]:
        f = self._functions.get(name)
        if f is None:
            raise AttributeError(
                f"Module has no function '{name}' (functions: {', '.join(self.functions)})")
        return f

    def __getitem__(self, name: str) -> Callable[..., None]:
        if not isinstance(name, str):
            raise TypeError("module function names are strings")
        return self.get_function(name)

    def __call__(self, *args: Any) -> None:
        if self.entry_name is None:
            raise TVMError("this module has no entry function; use mod['name'](...)")
        return self._functions[self.entry_name](*args)

    def import_module(self, module) -> None:
        self.imported_modules.append(module)

    def get_source(self, fmt: str = "") -> str:
        """The host program (kiln's host side is Python; this is its readable form). The
        CUDA C is ``imported_modules[0].get_source()``."""
        return self._host_source

    def export_library(self, file_name, **_ignored: Any) -> None:
        """Save the module as a tar archive (``.tar``, ``.tar.gz``, ``.tgz``): its host
        functions' IR, the CUDA source and the compiled image
        (:mod:`kiln.codegen.cuda_archive`); load it with ``kiln.runtime.load_module``."""
        if self._exporter is None:
            raise TVMError("export_library: this CUDA module was not made by kiln.build")
        self._exporter(self, os.fspath(file_name))

    def time_evaluator(self, func_name: str, dev: Device | None = None, number: int = 10,
                       repeat: int = 1, min_repeat_ms: float = 0, f_preproc: str = "",
                       ctx: Device | None = None) -> Callable[..., Any]:
        """Like :meth:`kiln.runtime.Module.time_evaluator`, timed with CUDA events on the
        default stream: after a warm-up call, each of ``repeat`` measurements runs the function
        ``number`` times (grown until it lasts ``min_repeat_ms``) and records the mean."""
        dev = dev if dev is not None else ctx
        return time_evaluator(self.get_function(func_name),
                              dev.device_id if dev is not None else 0, number, repeat,
                              min_repeat_ms)

    def __repr__(self) -> str:
        return f"Module(cuda_host, {id(self):x})"
