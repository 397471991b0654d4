"""Run kiln's generated CUDA kernels on the CPU, for tests on machines without a GPU.

The CUDA source of a build is compiled as C++20 with g++: every CUDA thread of a block is a
``std::thread``, ``__syncthreads()`` is a ``std::barrier`` over the block, ``__shared__``
arrays are ``static`` (one copy, shared by the threads of the block being run; blocks run one
after another) and ``threadIdx``/``blockIdx`` are thread-local. The host program is kiln's own
(``HostFunction``), with the launches and device workspaces redirected here, and the argument
tensors are CPU NDArrays whose DLTensor claims to be on cuda(0).

A missing or misplaced barrier shows up as a data race, i.e. as wrong results (not always).
The C++ standard headers every source includes are precompiled once per cache directory
(``_precompiled_headers``): parsing them was half of each compile.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

import kiln
from kiln.codegen.codegen_cuda import cuda_scalar
from kiln.codegen.cuda_host import HostFunction
from kiln.runtime.ndarray import DLTensor

#: the standard headers of every emulated source, precompiled (``-include``d by g++)
_HEADERS = """#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
"""
#: g++'s flags for the sources and, identical, for their precompiled headers
_CXX_FLAGS = ["-std=c++20", "-O1", "-fPIC", "-pthread", "-w"]

_PRELUDE = r"""
struct kiln_dim3 { unsigned x, y, z; };
static thread_local kiln_dim3 threadIdx, blockIdx;
static std::barrier<>* kiln_bar;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))
#define __syncthreads() kiln_bar->arrive_and_wait()
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
typedef _Float16 half;
"""

_CTYPES = {
    "float16": ctypes.c_uint16, "float32": ctypes.c_float, "float64": ctypes.c_double,
    "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
    "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "bool": ctypes.c_bool,
}


def available() -> bool:
    return shutil.which("g++") is not None


def _launcher(k) -> str:
    decls, names = [], []
    for i, p in enumerate(k.params):
        if p.kind == "buffer":
            t = ("const " if p.read_only else "") + cuda_scalar(p.dtype) + "*"
        else:
            t = cuda_scalar(p.dtype)
        decls.append(f"  {t} a{i} = *({t}*)params[{i}];")
        names.append(f"a{i}")
    call = f"{k.name}({', '.join(names)});"
    return "\n".join([
        f'extern "C" void emu_{k.name}(void** params, unsigned gx, unsigned gy, unsigned gz, '
        f"unsigned bx, unsigned by, unsigned bz) {{",
        *decls,
        "  unsigned n = bx * by * bz;",
        "  std::barrier<> bar(n); kiln_bar = &bar;",
        "  std::vector<std::thread> ts;",
        "  for (unsigned t = 0; t < n; ++t) ts.emplace_back([=, &bar] {",
        "    threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};",
        "    for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y)",
        "    for (unsigned x = 0; x < gx; ++x) {",
        "      blockIdx = {x, y, z};",
        f"      {call}",
        "      bar.arrive_and_wait();",
        "    }",
        "  });",
        "  for (auto& th : ts) th.join();",
        "}",
    ])


def _publish(path: str, make) -> None:
    """Create ``path`` by ``make(tmp)`` and a rename, so that concurrent processes (xdist
    workers) never see it half written."""
    tmp = f"{path}.{os.getpid()}.tmp"
    make(tmp)
    os.replace(tmp, path)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _precompiled_headers(d: str) -> str:
    """The header of :data:`_HEADERS` in ``d``, named by its text and :data:`_CXX_FLAGS`,
    with its precompiled ``.gch`` beside it (g++ uses the ``.gch`` of an ``-include``d
    header built with the same flags, else parses the header)."""
    key = hashlib.sha256((_HEADERS + " ".join(_CXX_FLAGS)).encode()).hexdigest()[:16]
    header = os.path.join(d, f"emu_headers_{key}.h")
    if not os.path.exists(header + ".gch"):
        if not os.path.exists(header):
            _publish(header, lambda tmp: _write(tmp, _HEADERS))
        _publish(header + ".gch", lambda tmp: subprocess.run(
            ["g++", *_CXX_FLAGS, "-x", "c++-header", header, "-o", tmp], check=True,
            capture_output=True, text=True))
    return header


def _compile(source: str) -> ctypes.CDLL:
    h = hashlib.sha256(source.encode()).hexdigest()[:24]
    d = os.path.join(os.environ.get("KILN_CACHE_DIR", tempfile.gettempdir()), "cuda-emu")
    os.makedirs(d, exist_ok=True)
    so = os.path.join(d, f"emu_{h}.so")
    if not os.path.exists(so):
        src = os.path.join(d, f"emu_{h}.{os.getpid()}.cc")  # per process: xdist workers
        _write(src, source)
        headers = _precompiled_headers(d)
        _publish(so, lambda tmp: subprocess.run(
            ["g++", *_CXX_FLAGS, "-include", headers, "-shared", src, "-o", tmp], check=True,
            capture_output=True, text=True))
    return ctypes.CDLL(so)


class _EmuKernel:
    def __init__(self, lib, k):
        self.fn = getattr(lib, f"emu_{k.name}")
        self.params = k.params

    def launch(self, grid, block, args, shared_bytes=0):
        vals = []
        for p, a in zip(self.params, args, strict=True):
            if p.kind == "buffer":
                vals.append(ctypes.c_void_p(a))
            elif p.dtype == "float16":
                vals.append(ctypes.c_uint16(int(np.float16(a).view(np.uint16))))
            else:
                vals.append(_CTYPES[p.dtype](a))
        arr = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])
        self.fn(arr, *[ctypes.c_uint(int(x)) for x in (*grid, *block)])


class _EmuDevice:
    def __init__(self, lib, kernels):
        self.kernels = {k.name: _EmuKernel(lib, k) for k in kernels}

    def kernel(self, name, device_id):
        return self.kernels[name]


class Emulated:
    """``Emulated(mod)(*numpy arrays)`` runs ``mod``'s entry with kernels on the CPU; arrays
    are updated in place."""

    def __init__(self, mod, name: str | None = None):
        host: HostFunction = mod.get_function(name or mod.entry_name)
        sp = host.split
        src = mod.imported_modules[0].get_source()
        lines = [ln for ln in src.splitlines()
                 if not ln.startswith(("#include <cuda_fp16.h>", "#define INFINITY",
                                       "#define NAN"))]
        # the launchers of every kernel of the module: its functions share one compiled build
        kernels = [k for f in mod.functions for k in mod.get_function(f).split.kernels]
        full = _PRELUDE + "\n".join(lines) + "\n\n" + "\n\n".join(_launcher(k)
                                                               for k in kernels) + "\n"
        lib = _compile(full)
        self.host = HostFunction(sp, _EmuDevice(lib, sp.kernels))
        self._keep: list = []

        def workspace(device_id, nbytes, slot):
            buf = np.zeros(nbytes + 64, np.uint8)
            self._keep.append(buf)
            return buf.ctypes.data

        self.host.workspace = workspace

    def __call__(self, *args):
        nds = []
        for a in args:
            if isinstance(a, np.ndarray):
                nd = kiln.nd.array(a)
                DLTensor.from_address(nd._handle).device.device_type = 2
                nds.append(nd)
            else:
                nds.append(a)
        try:
            self.host(*nds)
        finally:
            for a, nd in zip(args, nds, strict=True):
                if isinstance(a, np.ndarray):
                    DLTensor.from_address(nd._handle).device.device_type = 1
                    a[...] = nd.numpy()
