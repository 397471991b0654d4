"""Split a lowered PrimFunc for the GPU into host code and device kernels.

Every outermost ``thread_extent`` attribute starts a kernel: the attribute and everything under
it run on the GPU, launched with grid and block dimensions taken from the ``blockIdx.*`` and
``threadIdx.*`` extents found inside it. What remains is the host program: loops, lets,
branches and global-memory workspaces around the launches, where each kernel is replaced by
``Evaluate(Call("int32", "kiln_launch", [StringImm(kernel name)]))``. A host program may not
touch memory itself (``did you forget to bind?``).

Each kernel's thread bindings are unified (``kiln.tir.thread_binding``; idempotent after
``lower``); virtual threads are gone already (``kiln.tir.inject_virtual_thread`` in ``lower``).
The launch dimensions and static shared memory are checked against CUDA's limits. The CUDA
backend's device passes (``kiln.driver.pipeline``) then rewrite each kernel body
(``scalarize_vector_stores``, ``insert_storage_sync``); they change neither its parameters nor
its memory.

The kernel's parameters are its free variables: buffers (argument tensors and host
workspaces, read-only ones marked) first, then scalars.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.errors import ScheduleError
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import Mutator, Visitor, collect_vars
from kiln.ir.printer import expr_text

from .thread_binding import _unify_kernel, is_thread_attr, is_virtual_tag, thread_tag

LAUNCH = "kiln_launch"

# CUDA's fixed limits (compute capability >= 3.0); the device's are checked at launch
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = {"x": 1024, "y": 1024, "z": 64}
MAX_GRID_DIM = {"x": 2**31 - 1, "y": 65535, "z": 65535}
MAX_STATIC_SHARED_BYTES = 48 * 1024


@dataclass
class KernelParam:
    var: E.Var
    kind: str  # "buffer" | "scalar"
    dtype: str  # element dtype of a buffer, or the scalar's dtype
    read_only: bool = False


@dataclass
class Kernel:
    name: str
    body: S.Stmt
    params: list[KernelParam]
    thread_vars: dict[E.Var, str]  # device var -> "threadIdx.x" ...
    grid: list[E.PrimExpr]  # blockIdx.x/y/z extents
    block: list[E.PrimExpr]  # threadIdx.x/y/z extents
    shared_bytes: int = 0
    uses_fp16: bool = False

    @property
    def threads_per_block(self) -> int | None:
        n = 1
        for b in self.block:
            if not isinstance(b, E.IntImm):
                return None
            n *= b.value
        return n


@dataclass
class SplitFunc:
    func: S.PrimFunc
    host_body: S.Stmt
    kernels: list[Kernel] = field(default_factory=list)
    workspaces: dict[E.Var, str] = field(default_factory=dict)  # host Allocate var -> dtype


# ---------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------
class _Splitter(Mutator):
    def __init__(self, func: S.PrimFunc):
        super().__init__()
        self.func = func
        self.kernels: list[Kernel] = []
        self.buffer_dtypes: dict[E.Var, str] = {p: b.dtype for p, b in func.buffer_map.items()}
        self.workspaces: dict[E.Var, str] = {}

    def visit_AttrStmt(self, s: S.AttrStmt):
        if is_thread_attr(s):
            k = make_kernel(s, f"{self.func.name}_kernel{len(self.kernels)}",
                            self.buffer_dtypes, self.func)
            self.kernels.append(k)
            return S.Evaluate(E.Call("int32", LAUNCH, [E.StringImm(k.name)]))
        return self.generic_visit(s)

    def visit_Allocate(self, s: S.Allocate):
        if s.scope in ("shared", "local", "warp"):
            raise ScheduleError(
                f"{self.func.name}: '{s.buffer_var.name}' has storage scope '{s.scope}' but is "
                f"computed outside every kernel (no enclosing loop is bound to blockIdx or "
                f"threadIdx); compute_at it inside the loops bound to blockIdx.x/threadIdx.x "
                f"of its consumer")
        self.buffer_dtypes[s.buffer_var] = s.dtype
        self.workspaces[s.buffer_var] = s.dtype
        return self.generic_visit(s)


class _HostMemoryCheck(Visitor):
    def __init__(self, func: S.PrimFunc):
        super().__init__()
        self.func = func

    def _fail(self, buf: E.Var, what: str):
        raise ScheduleError(
            f"{self.func.name}: the {what} '{buf.name}' would run on the host: it is not "
            f"inside any loop bound to a GPU thread, but target 'cuda' runs computations only "
            f"in kernels. Did you forget to bind? Bind the outer loops of every stage, e.g. "
            f"bx, tx = s[C].split(C.op.axis[0], factor=64); "
            f"s[C].bind(bx, te.thread_axis('blockIdx.x')); "
            f"s[C].bind(tx, te.thread_axis('threadIdx.x'))")

    def visit_Store(self, s: S.Store):
        self._fail(s.buffer_var, "store to")

    def visit_Load(self, e: E.Load):
        self._fail(e.buffer_var, "load from")


def split_host_device(func: S.PrimFunc) -> SplitFunc:
    """The host program and the kernels of ``func`` (see the module docstring)."""
    sp = _Splitter(func)
    host = sp.visit(func.body)
    _HostMemoryCheck(func).visit(host)
    if not sp.kernels:
        raise ScheduleError(
            f"{func.name}: target 'cuda' needs at least one loop bound to a GPU thread, but no "
            f"loop of this function is bound. Did you forget to bind? e.g. "
            f"s[C].bind(s[C].op.axis[0], te.thread_axis('blockIdx.x'))")
    return SplitFunc(func, host, sp.kernels, sp.workspaces)


# ---------------------------------------------------------------------------------------
# device side
# ---------------------------------------------------------------------------------------
def make_kernel(root: S.AttrStmt, name: str, buffer_dtypes: dict[E.Var, str],
                func: S.PrimFunc) -> Kernel:
    body = _unify_kernel(root)
    thread_vars, extents = _thread_extents(body, name)
    grid = [extents.get(f"blockIdx.{d}", E.IntImm("int32", 1)) for d in "xyz"]
    block = [extents.get(f"threadIdx.{d}", E.IntImm("int32", 1)) for d in "xyz"]
    _check_launch_dims(name, grid, block)
    shared, fp16 = _memory_info(body, name)
    params = _kernel_params(body, thread_vars, buffer_dtypes, func)
    return Kernel(name, body, params, thread_vars, grid, block, shared, fp16)


def _thread_extents(body: S.Stmt, name: str) -> tuple[dict[E.Var, str], dict[str, E.PrimExpr]]:
    thread_vars: dict[E.Var, str] = {}
    extents: dict[str, E.PrimExpr] = {}

    class V(Visitor):
        def visit_AttrStmt(self, s):
            if is_thread_attr(s):
                tag = thread_tag(s)
                if not is_virtual_tag(tag):
                    if not (tag.startswith(("blockIdx.", "threadIdx.")) and tag[-1] in "xyz"
                            and len(tag.split(".")) == 2):
                        raise ScheduleError(
                            f"{name}: unknown thread tag '{tag}'; use blockIdx.x/y/z, "
                            f"threadIdx.x/y/z or vthread")
                    thread_vars[s.node.var] = tag
                    extents.setdefault(tag, s.value)
            self.generic_visit(s)

    V().visit(body)
    return thread_vars, extents


def _check_launch_dims(name: str, grid, block) -> None:
    total = 1
    for d, b in zip("xyz", block, strict=True):
        if isinstance(b, E.IntImm):
            if b.value > MAX_BLOCK_DIM[d]:
                raise ScheduleError(
                    f"{name}: threadIdx.{d} has extent {b.value}, more than the {MAX_BLOCK_DIM[d]}"
                    f" threads a CUDA block allows in dimension {d}; split the axis and bind "
                    f"the outer part to blockIdx.{d}")
            total *= b.value
    if total > MAX_THREADS_PER_BLOCK:
        dims = " x ".join(expr_text(b) for b in block)
        raise ScheduleError(
            f"{name}: too many threads per block: {dims} = {total} threads, but a CUDA block "
            f"holds at most {MAX_THREADS_PER_BLOCK}; use smaller threadIdx extents (bind more "
            f"of the loop to blockIdx)")
    for d, g in zip("xyz", grid, strict=True):
        if isinstance(g, E.IntImm) and g.value > MAX_GRID_DIM[d]:
            raise ScheduleError(
                f"{name}: blockIdx.{d} has extent {g.value}, more than CUDA's grid limit "
                f"{MAX_GRID_DIM[d]} in dimension {d}")


def _memory_info(body: S.Stmt, name: str) -> tuple[int, bool]:
    shared = 0
    fp16 = []

    class V(Visitor):
        def visit_Allocate(self, s):
            nonlocal shared
            n = 1
            for e in s.extents:
                if not isinstance(e, E.IntImm):
                    raise ScheduleError(
                        f"{name}: '{s.buffer_var.name}' ({s.scope or 'local'} memory) has the "
                        f"non-constant size {expr_text(e)}; memory inside a GPU kernel needs a "
                        f"size known at compile time: split the axes it is computed over by "
                        f"constant factors")
                n *= e.value
            if s.scope == "shared":
                shared += n * dt.itemsize(dt.element_of(s.dtype))
            if dt.element_of(s.dtype) == "float16":
                fp16.append(s)
            self.generic_visit(s)

        def generic_visit(self, node):
            if isinstance(node, E.PrimExpr) and dt.element_of(node.dtype) == "float16":
                fp16.append(node)
            super().generic_visit(node)

    V().visit(body)
    if shared > MAX_STATIC_SHARED_BYTES:
        raise ScheduleError(
            f"{name}: too much shared memory: the kernel's shared buffers need {shared} bytes "
            f"per block, more than the {MAX_STATIC_SHARED_BYTES} bytes of static shared memory "
            f"a CUDA block can have; use smaller tiles for the shared cache stages")
    return shared, bool(fp16)


def _kernel_params(body, thread_vars, buffer_dtypes, func) -> list[KernelParam]:
    defined: set[E.Var] = set(thread_vars)
    stored: set[E.Var] = set()
    loaded: list[E.Var] = []

    class V(Visitor):
        def visit_For(self, s):
            defined.add(s.loop_var)
            self.generic_visit(s)

        def visit_LetStmt(self, s):
            defined.add(s.var)
            self.generic_visit(s)

        def visit_Let(self, e):
            defined.add(e.var)
            self.generic_visit(e)

        def visit_Allocate(self, s):
            defined.add(s.buffer_var)
            self.generic_visit(s)

        def visit_Store(self, s):
            stored.add(s.buffer_var)
            self.generic_visit(s)

        def visit_Load(self, e):
            loaded.append(e.buffer_var)
            self.generic_visit(e)

    V().visit(body)
    free = [v for v in collect_vars(body) if v not in defined]
    buffers = [v for v in free if v.dtype == "handle"]
    scalars = [v for v in free if v.dtype != "handle"]
    order = {p: k for k, p in enumerate(func.params)}
    for k, v in enumerate(buffer_dtypes):
        order.setdefault(v, len(func.params) + k)
    shape_vars: list[E.Var] = []
    for buf in func.buffer_map.values():
        for ext in buf.shape:
            for v in collect_vars(ext):
                if v not in shape_vars:
                    shape_vars.append(v)

    def scalar_key(v):
        if v in order:
            return (0, order[v], v.name)
        if v in shape_vars:
            return (1, shape_vars.index(v), v.name)
        return (2, 0, v.name)

    params: list[KernelParam] = []
    for v in sorted(buffers, key=lambda v: (order.get(v, 1 << 30), v.name)):
        dtype = buffer_dtypes.get(v)
        if dtype is None:
            raise ScheduleError(f"kernel uses buffer '{v.name}', which is neither an argument "
                                f"nor allocated by the function")
        params.append(KernelParam(v, "buffer", dt.element_of(dtype), v not in stored))
    for v in sorted(scalars, key=scalar_key):
        params.append(KernelParam(v, "scalar", v.dtype))
    return params
