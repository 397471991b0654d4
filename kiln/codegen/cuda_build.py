"""``kiln.build(..., target="cuda")``: split host and device, generate CUDA C, compile it with
NVRTC and wrap the result in a runtime module.

The host side of every PrimFunc is a Python callable (see docs/cuda.md for why): it checks the
arguments with the same messages as the C entry of the CPU backend (``codegen/c_entry.py``),
binds symbolic shapes, runs the host program (loops, lets, device workspaces) and launches the
kernels through the driver API. The device side is one CUDA translation unit for all kernels.

The build compiles the CUDA source right away, so code generation errors surface at build time
even without a GPU: for ``-arch=sm_XY`` of the target string if given, else for the compute
capability of ``cuda(0)`` when a GPU is present, else for ``sm_80``. On a GPU of another
compute capability the kernels are recompiled for it when first launched.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.arith.evaluate import evaluate
from kiln.errors import TVMError
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import collect_vars
from kiln.ir.printer import expr_text, stmt_text
from kiln.ir.stmt import PrimFunc
from kiln.runtime.device import CUDA
from kiln.runtime.ndarray import DLTensor
from kiln.target import Target
from kiln.tir.split_host_device import LAUNCH, Kernel, SplitFunc, split_host_device

from .c_types import dl_code
from .codegen_cuda import generate_cuda

DEFAULT_ARCH = "sm_80"
_slots = itertools.count()


def build(funcs: list[PrimFunc], target, compile_now: bool = True) -> Any:
    """Compile ``funcs`` for a CUDA GPU; returns a :class:`kiln.runtime.cuda_driver.CUDAModule`.

    ``compile_now=False`` skips the NVRTC compile (it then happens at the first launch); for
    tools and tests that only look at the generated code."""
    from kiln.runtime import cuda_driver as rt

    tgt = Target(target)
    splits = [split_host_device(f) for f in funcs]
    kernels = [k for sp in splits for k in sp.kernels]
    source = generate_cuda(kernels)
    arch = _build_arch(tgt, rt) if compile_now else tgt.attrs.get("arch", DEFAULT_ARCH)
    image = rt.compile_cuda(source, arch) if compile_now else None
    params = {k.name: [p.dtype if p.kind == "scalar" else "handle" for p in k.params]
              for k in kernels}
    device_mod = rt.CUDADeviceModule(source, params, arch, image)
    functions = {sp.func.name: HostFunction(sp, device_mod) for sp in splits}
    host_text = "\n\n".join(host_source(sp) for sp in splits)
    return rt.CUDAModule(functions, funcs[0].name if funcs else None, device_mod, host_text,
                         tgt.text)


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
    """NVRTC-compile CUDA ``source`` for ``arch`` (re-exported for tests and tools)."""
    from kiln.runtime.cuda_driver import compile_cuda

    return compile_cuda(source, arch, fmt)


# ---------------------------------------------------------------------------------------
# host side: readable text
# ---------------------------------------------------------------------------------------
def host_source(sp: SplitFunc) -> str:
    lines = [f"// host function {sp.func.name}({', '.join(p.name for p in sp.func.params)})"]
    for k in sp.kernels:
        grid = ", ".join(expr_text(g) for g in k.grid)
        block = ", ".join(expr_text(b) for b in k.block)
        args = ", ".join(p.var.name for p in k.params)
        lines.append(f"//   {k.name}<<<({grid}), ({block})>>>({args})")
    lines.append(stmt_text(sp.host_body))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# host side: argument checks (the wording of codegen/c_entry.py)
# ---------------------------------------------------------------------------------------
_TYPE_CODE_INT, _TYPE_CODE_FLOAT, _TYPE_CODE_TENSOR = 0, 2, 7


def _type_code(a: Any) -> int:
    if hasattr(a, "_handle"):
        return _TYPE_CODE_TENSOR
    if isinstance(a, bool | int | np.integer | np.bool_):
        return _TYPE_CODE_INT
    if isinstance(a, float | np.floating):
        return _TYPE_CODE_FLOAT
    raise TypeError(f"argument has unsupported type '{type(a).__name__}'; expected an NDArray, "
                    f"int or float")


class _ArgChecker:
    """Checks the arguments of one function and returns the environment of the host program:
    each parameter and each symbolic shape variable mapped to its value (pointers as ints)."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.name = func.name
        self.nargs = len(func.params)
        self.steps: list[Callable[[Any, dict], None]] = []
        bound: set[E.Var] = set()
        deferred: list[tuple[int, int, E.PrimExpr, str]] = []
        for k, p in enumerate(func.params):
            buf = func.buffer_map.get(p)
            if buf is None:
                self.steps.append(self._scalar_step(k, p))
                bound.add(p)
            else:
                self.steps.append(self._tensor_step(k, p, buf, bound, deferred))
        for _k, _d, shape_expr, what in deferred:
            missing = [v for v in collect_vars(shape_expr) if v not in bound]
            if missing:
                raise TVMError(
                    f"{func.name}: the shape {expr_text(shape_expr)} of {what} uses variable "
                    f"'{missing[0].name}', which is neither a scalar argument nor a plain "
                    f"dimension of an argument tensor; pass it in the argument list")
        self.deferred = deferred

    def _scalar_step(self, k: int, p: E.Var):
        pname = p.name
        is_float = dt.is_float(p.dtype)

        def step(a, env):
            code = _type_code(a)
            if is_float:
                if code not in (_TYPE_CODE_FLOAT, _TYPE_CODE_INT):
                    raise TVMError(f"arg{k} ({pname}): expected a number, got type code {code}")
                env[p] = float(a)
            else:
                if code != _TYPE_CODE_INT:
                    raise TVMError(
                        f"arg{k} ({pname}): expected an integer, got type code {code}")
                env[p] = int(a)

        return step

    def _tensor_step(self, k: int, p: E.Var, buf, bound: set, deferred: list):
        a_ = f"arg{k}"
        tname = buf.name
        ndim = len(buf.shape)
        code, bits, lanes = dl_code(buf.dtype)
        # NDArrays describe numpy's one-byte bool as (1, 1, 1)
        ok_bits = {bits, 1, 8} if dt.is_bool(buf.dtype) else {bits}
        dims: list[tuple[int, str, Any]] = []
        for d, extent in enumerate(buf.shape):
            if isinstance(extent, E.IntImm):
                dims.append((d, "const", extent.value))
            elif isinstance(extent, E.Var) and extent not in bound:
                bound.add(extent)
                dims.append((d, "bind", extent))
            else:
                deferred.append((k, d, extent, f"{a_}.shape[{d}]"))
                dims.append((d, "later", None))

        def step(a, env):
            tc = _type_code(a)
            if tc != _TYPE_CODE_TENSOR:
                raise TVMError(f"{a_} ({tname}): expected a tensor (NDArray), got type code {tc}")
            t = DLTensor.from_address(a._handle)
            if t.ndim != ndim:
                raise TVMError(
                    f"Argument {a_}.ndim ({tname}) has an unsatisfied constraint: {a_}.ndim is "
                    f"expected to equal {ndim}, got {t.ndim}")
            if not (t.dtype.code == code and t.dtype.bits in ok_bits
                    and t.dtype.lanes == lanes):
                raise TVMError(
                    f"Assert fail: {a_}.dtype is expected to be {buf.dtype} ({tname}), got "
                    f"code={t.dtype.code} bits={t.dtype.bits} lanes={t.dtype.lanes}")
            if t.device.device_type != CUDA:
                raise TVMError(
                    f"Argument {a_}.device_type ({tname}) has an unsatisfied constraint: "
                    f"expected a cuda tensor, got device type {t.device.device_type}")
            dev_id = env.setdefault("__device_id__", t.device.device_id)
            if t.device.device_id != dev_id:
                raise TVMError(
                    f"Argument {a_}.device_id ({tname}) has an unsatisfied constraint: "
                    f"expected cuda({dev_id}) like the arguments before it, got "
                    f"cuda({t.device.device_id})")
            for d, kind, val in dims:
                got = t.shape[d]
                if kind == "const":
                    if got != val:
                        what = f"{a_}.shape[{d}]"
                        raise TVMError(
                            f"Assert fail: ({val} == int32({what})), Argument {what} has an "
                            f"unsatisfied constraint: expected {val}, got {got}")
                elif kind == "bind":
                    env[val] = int(got)
            if t.strides and ndim:
                expect = 1
                for d in range(ndim - 1, -1, -1):
                    if t.shape[d] != 1 and t.strides[d] != expect:
                        raise TVMError(
                            f"Argument {a_}.strides ({tname}): expected a compact (row-major "
                            f"contiguous) tensor")
                    expect *= t.shape[d]
            env[p] = int(t.data or 0) + int(t.byte_offset)
            env[("shape", k)] = t

        return step

    def __call__(self, args: tuple) -> dict:
        if len(args) != self.nargs:
            raise TVMError(f"{self.name}: expected {self.nargs} arguments, got {len(args)}")
        env: dict = {}
        for step, a in zip(self.steps, args, strict=True):
            step(a, env)
        for k, d, shape_expr, what in self.deferred:
            want = int(evaluate(shape_expr, env))
            got = int(env[("shape", k)].shape[d])
            if want != got:
                raise TVMError(
                    f"Assert fail: ({expr_text(shape_expr)} == {what}), Argument {what} has an "
                    f"unsatisfied constraint: expected {want}, got {got}")
        return env


# ---------------------------------------------------------------------------------------
# host side: the program, as nested Python closures
# ---------------------------------------------------------------------------------------
def _expr_fn(e: E.PrimExpr) -> Callable[[dict], Any]:
    if isinstance(e, E.IntImm | E.FloatImm):
        v = e.value
        return lambda env: v
    if isinstance(e, E.Var):
        return lambda env: env[e]
    return lambda env: evaluate(e, env)


class HostFunction:
    """The host side of one PrimFunc: ``f(*args)`` checks the arguments and launches."""

    def __init__(self, sp: SplitFunc, device_mod):
        self.name = sp.func.name
        self.split = sp
        self.device_mod = device_mod
        self._check = _ArgChecker(sp.func)
        self._kernels = {k.name: k for k in sp.kernels}
        self._run = self._compile(sp.host_body)

    def __call__(self, *args: Any) -> None:
        env = self._check(args)
        env.setdefault("__device_id__", 0)
        self._run(env)

    def __repr__(self) -> str:
        return f"<PackedFunc {self.name} (cuda)>"

    # ---- statement compilers --------------------------------------------------------------
    def _compile(self, s: S.Stmt) -> Callable[[dict], None]:
        m = getattr(self, "_c_" + type(s).__name__, None)
        if m is None:
            raise TVMError(f"{self.name}: the host program cannot run a {type(s).__name__}")
        return m(s)

    def _c_SeqStmt(self, s: S.SeqStmt):
        fns = [self._compile(x) for x in s.seq]

        def run(env):
            for f in fns:
                f(env)

        return run

    def _c_For(self, s: S.For):
        lo, ext, body, var = _expr_fn(s.min), _expr_fn(s.extent), self._compile(s.body), s.loop_var

        def run(env):
            start = int(lo(env))
            for i in range(start, start + int(ext(env))):
                env[var] = i
                body(env)

        return run

    def _c_LetStmt(self, s: S.LetStmt):
        val, body, var = _expr_fn(s.value), self._compile(s.body), s.var

        def run(env):
            env[var] = val(env)
            body(env)

        return run

    def _c_IfThenElse(self, s: S.IfThenElse):
        cond = _expr_fn(s.condition)
        then = self._compile(s.then_case)
        other = self._compile(s.else_case) if s.else_case is not None else None

        def run(env):
            if cond(env):
                then(env)
            elif other is not None:
                other(env)

        return run

    def _c_AttrStmt(self, s: S.AttrStmt):
        return self._compile(s.body)

    def _c_AssertStmt(self, s: S.AssertStmt):
        cond, body, msg = _expr_fn(s.condition), self._compile(s.body), s.message

        def run(env):
            if not cond(env):
                raise TVMError(msg)
            body(env)

        return run

    @staticmethod
    def workspace(device_id: int, nbytes: int, slot: int) -> int:
        """Device memory for a host-level temporary (replaceable, e.g. by an emulator)."""
        from kiln.runtime.cuda_driver import workspace

        return workspace(device_id, nbytes, slot)

    def _c_Allocate(self, s: S.Allocate):
        size = E.IntImm("int64", dt.itemsize(dt.element_of(s.dtype)))
        for x in s.extents:
            size = E.cast(x, "int64") * size
        nbytes = _expr_fn(size)
        body, var, slot = self._compile(s.body), s.buffer_var, next(_slots)

        def run(env):
            env[var] = self.workspace(env["__device_id__"], int(nbytes(env)), slot)
            body(env)

        return run

    def _c_Evaluate(self, s: S.Evaluate):
        v = s.value
        if isinstance(v, E.Call) and v.op == LAUNCH:
            return self._launcher(self._kernels[v.args[0].value])
        if isinstance(v, E.IntImm):
            return lambda env: None
        raise TVMError(f"{self.name}: the host program cannot evaluate {expr_text(v)}")

    def _launcher(self, k: Kernel):
        grid = [_expr_fn(g) for g in k.grid]
        block = [_expr_fn(b) for b in k.block]
        const_dims = all(isinstance(x, E.IntImm) for x in [*k.grid, *k.block])
        dims = ([g.value for g in k.grid], [b.value for b in k.block]) if const_dims else None
        param_vars = [p.var for p in k.params]
        device_mod = self.device_mod
        name = k.name

        def run(env):
            kern = device_mod.kernel(name, env["__device_id__"])
            if dims is not None:
                g, b = dims
            else:
                g = [int(f(env)) for f in grid]
                b = [int(f(env)) for f in block]
            kern.launch(g, b, [env[v] for v in param_vars])

        return run
