"""CUDA C code generation for the kernels of a host/device split (``kiln.tir.split_host_device``).

The expression printer is the C backend's (``CSourceWriter``); this subclass changes what
differs on the GPU: thread variables print as ``((int)threadIdx.x)``, types are plain C++
names (``half`` for float16, from cuda_fp16.h), ``shared``/``local`` allocations become
``__shared__`` / per-thread arrays, storage syncs become ``__syncthreads()``, helpers are
``__device__`` functions, and each kernel is an
``extern "C" __global__ void __launch_bounds__(threads) name(T* __restrict__ A, ..., int n)``.
"""

from __future__ import annotations

from kiln.errors import ScheduleError
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.tir.op import PACKED_CALL
from kiln.tir.split_host_device import Kernel
from kiln.tir.storage_sync import STORAGE_SYNC

from .c_narrow import is_narrow_int
from .codegen_c import CSourceWriter, _Names

_CUDA_SCALAR = {
    "float16": "half", "float32": "float", "float64": "double",
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long", "bool": "bool",
}

_PRELUDE = """\
// kiln: generated CUDA C (compiled with NVRTC)
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
template <typename T> __device__ __forceinline__ T kiln_min(T a, T b) { return a < b ? a : b; }
template <typename T> __device__ __forceinline__ T kiln_max(T a, T b) { return a > b ? a : b; }
__device__ __forceinline__ int kiln_floordiv_i32(int a, int b) {
  int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ int kiln_floormod_i32(int a, int b) {
  int r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
__device__ __forceinline__ long long kiln_floordiv_i64(long long a, long long b) {
  long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ long long kiln_floormod_i64(long long a, long long b) {
  long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
"""


def cuda_scalar(dtype: str) -> str:
    t = _CUDA_SCALAR.get(dt.element_of(dtype))
    if t is None or dt.lanes(dtype) > 1:
        raise NotImplementedError(f"CUDA code generation does not support dtype {dtype}")
    return t


#: CUDA's bit casts, by (source, destination) element type
_BIT_CASTS = {("int32", "float32"): "__int_as_float", ("float32", "int32"): "__float_as_int",
              ("uint32", "float32"): "__uint_as_float", ("float32", "uint32"): "__float_as_uint",
              ("int64", "float64"): "__longlong_as_double",
              ("float64", "int64"): "__double_as_longlong"}


class CUDASourceWriter(CSourceWriter):
    """Emit the body of one CUDA kernel."""

    def __init__(self, names: _Names, kernel: Kernel):
        super().__init__(names, set(), {})
        self.kernel = kernel
        self._synced = False

    def emit(self, line: str) -> None:
        self._synced = False
        super().emit(line)

    def _declare(self, line: str) -> None:
        # declarations do not separate two barriers
        self.lines.append("  " * self.indent + line)

    # ---- types ------------------------------------------------------------------------------
    def type_of(self, dtype: str) -> str:
        return cuda_scalar(dtype)

    def need_vector(self, dtype: str) -> str:
        raise NotImplementedError(
            f"CUDA codegen: vector type {dtype} left after scalarization (unsupported here)")

    # ---- expressions --------------------------------------------------------------------------
    def e_IntImm(self, e: E.IntImm) -> str:
        v = e.value
        if e.dtype == "int32":
            return str(v) if v != -(2**31) else "(-2147483647-1)"
        if e.dtype == "bool":
            return "true" if v else "false"
        if e.dtype == "int64":
            return f"{v}LL" if v != -(2**63) else "(-9223372036854775807LL-1)"
        if e.dtype == "uint64":
            return f"{v}ULL"
        return f"(({cuda_scalar(e.dtype)}){v})"

    def e_FloatImm(self, e: E.FloatImm) -> str:
        if e.dtype == "float16":
            inner = super().e_FloatImm(E.FloatImm("float32", e.value))
            return f"((half){inner})"
        return super().e_FloatImm(e)

    def e_Cast(self, e: E.Cast) -> str:
        src = e.value.dtype
        x = self.cast_operand(e)
        if dt.is_bool(e.dtype):
            zero = "0.0f" if dt.element_of(src) == "float16" else "0"
            if dt.element_of(src) == "float16":
                return f"((float)({x}) != {zero})"
            return f"(({x}) != {zero})"
        t = cuda_scalar(e.dtype)
        if e.dtype == "float16" or dt.element_of(src) == "float16":
            return f"(({t})((float)({x})))"
        return f"(({t})({x}))"

    def _minmax(self, name: str, op: str, e) -> str:
        if is_narrow_int(e.dtype):
            # C++ promotes narrow operands to int (c_narrow.py): the template's type is named
            # and its parameters cut them back
            name = f"{name}<{self.type_of(e.dtype)}>"
        return f"kiln_{name}({self.expr(e.a)}, {self.expr(e.b)})"

    def e_Let(self, e: E.Let) -> str:
        name = self.names.get(e.var)
        return (f"({{ {self.type_of(e.var.dtype)} {name} = {self.expr(e.value)}; "
                f"{self.expr(e.body)}; }})")

    def e_Call(self, e: E.Call) -> str:
        if e.op == STORAGE_SYNC:
            return "__syncthreads()"
        return super().e_Call(e)

    def _reinterpret(self, src: str, dst: str, x: str) -> str:
        """``tir.reinterpret`` by CUDA's bit casts (``__int_as_float``, ...)."""
        cast = _BIT_CASTS.get((dt.element_of(src), dt.element_of(dst)))
        if cast is None or dt.lanes(dst) > 1:
            raise NotImplementedError(f"CUDA codegen: reinterpret {src} as {dst}")
        return f"{cast}({x})"

    def _math(self, op: str, dtype: str, args: list[str]) -> str:
        if dtype == "float16":
            inner = ", ".join(f"(float)({a})" for a in args)
            return f"((half){op}f({inner}))"
        return super()._math(op, dtype, args)

    # ---- statements ---------------------------------------------------------------------------
    def s_Evaluate(self, s: S.Evaluate):
        v = s.value
        if isinstance(v, E.Call) and v.op == PACKED_CALL:
            raise NotImplementedError(
                f"tir.call_packed({v.args[0].value!r}) in CUDA device code is not supported: "
                f"a kernel cannot call a Python function; build the extern op for target llvm")
        if isinstance(v, E.Call) and v.op == STORAGE_SYNC:
            if not self._synced:
                self.emit("__syncthreads();")
                self._synced = True
            return
        if isinstance(v, E.Call) and v.op == "prefetch":  # a CPU cache hint: none on a GPU
            return
        super().s_Evaluate(s)

    def s_AssertStmt(self, s):
        raise NotImplementedError("CUDA codegen: assertions inside a kernel are not supported")

    def s_AttrStmt(self, s: S.AttrStmt):
        # thread_extent (its variable prints as threadIdx.x ...), produce, pragmas (the
        # auto_unroll_max_step pass already turned those into unrolled loops)
        self.stmt(s.body)

    def s_For(self, s: S.For):
        if s.kind == S.ForKind.PARALLEL:
            raise ScheduleError(
                f"loop '{s.loop_var.name}' is marked parallel inside a CUDA kernel; parallel is "
                f"for CPU targets: bind the loop to a GPU thread axis instead")
        v = self.names.get(s.loop_var)
        t = self.type_of(s.loop_var.dtype)
        lo = self.expr(s.min)
        ext = self.expr(s.extent)
        end = ext if lo == "0" else f"{lo} + {ext}"
        if s.kind == S.ForKind.UNROLLED:
            self.emit("#pragma unroll")
        self.emit(f"for ({t} {v} = {lo}; {v} < {end}; ++{v}) {{")
        self._nested(s.body)
        self.emit("}")

    def s_Allocate(self, s: S.Allocate):
        name = self.names.get(s.buffer_var)
        t = cuda_scalar(s.dtype)
        n = 1
        for x in s.extents:
            n *= x.value  # constant: checked by split_host_device
        n = max(n, 1)
        if s.scope == "shared":
            self._declare(f"__shared__ __align__(16) {t} {name}[{n}];")
        else:  # local, or a temporary computed inside the kernel: per-thread storage
            self._declare(f"{t} {name}[{n}];")
        self.stmt(s.body)


# C++ / CUDA words a variable must not be spelled as (C's are kept out by _Names itself)
_CUDA_RESERVED = {"half", "bool", "true", "false", "threadIdx", "blockIdx", "blockDim",
                  "gridDim", "warpSize", "new", "delete", "class", "template", "this",
                  "namespace", "operator", "private", "public", "protected", "virtual",
                  "friend", "using", "typename", "kiln_min", "kiln_max", "INFINITY", "NAN",
                  "nullptr", "explicit", "mutable", "catch", "throw", "try"}


def kernel_source(kernel: Kernel) -> str:
    """``extern "C" __global__`` definition of one kernel."""
    names = _Names()
    names.used |= _CUDA_RESERVED
    sig: list[str] = []
    for p in kernel.params:  # parameters first, so they keep their own spelling
        name = names.get(p.var)
        if p.kind == "buffer":
            const = "const " if p.read_only else ""
            sig.append(f"{const}{cuda_scalar(p.dtype)}* __restrict__ {name}")
        else:
            sig.append(f"{cuda_scalar(p.dtype)} {name}")
    for v, tag in kernel.thread_vars.items():
        names.names[v] = f"((int){tag})"
    w = CUDASourceWriter(names, kernel)
    w.stmt(kernel.body)
    threads = kernel.threads_per_block
    bounds = f"__launch_bounds__({threads}) " if threads else ""
    out = [f'extern "C" __global__ void {bounds}{kernel.name}({", ".join(sig)}) {{']
    out += w.lines
    out.append("}")
    return "\n".join(out)


def generate_cuda(kernels: list[Kernel]) -> str:
    """One CUDA translation unit holding ``kernels``."""
    parts = []
    if any(k.uses_fp16 for k in kernels):
        parts.append("#include <cuda_fp16.h>")
    parts.append(_PRELUDE)
    parts += [kernel_source(k) for k in kernels]
    return "\n".join(parts) + "\n"
