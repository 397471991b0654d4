"""Schedules: how each operation of a tensor-expression DAG is computed.

A ``Schedule`` holds one ``Stage`` per operation. A stage starts with one loop per axis of its
operation (data-parallel axes, then reduce axes) and is transformed by primitives (``split``,
``fuse``, ``reorder``, ``compute_at``, ...). Each primitive records a relation between iteration
variables (``Split``, ``Fuse``) or an annotation; nothing is lowered until ``kiln.lower``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.errors import ScheduleError
from kiln.ir import dtype as dt
from kiln.ir.expr import IntImm, IterVar, PrimExpr, Range, StringImm, Var
from kiln.ir.op import convert, index_dtype

from .prefetch import check_prefetch
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from .tensor_intrin import TensorIntrin


# ---------------------------------------------------------------------------------------
# Relations between iteration variables
# ---------------------------------------------------------------------------------------
@dataclass(eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: PrimExpr | None
    nparts: PrimExpr | None
    #: how a tail that the factor does not divide is run (``kiln.te.split_tail``); None:
    #: the ``likely`` guard that ``loop_partition`` may cut (the default)
    tail: str | None = None
    #: what lowering chose for ``tail="auto"`` (``kiln.cost.tail_choice``)
    auto_choice: str | None = None
    #: the widths of the remainder's vector paths lowering chose for ``tail="dispatch"``
    #: (``kiln.cost.dispatch_choice``), widest first
    dispatch_widths: tuple[int, ...] | None = None

    @property
    def strategy(self) -> str | None:
        """The tail strategy lowering applies: ``tail``, or for ``"auto"`` the choice made
        when lowering (the default guard until one is made)."""
        return self.auto_choice if self.tail == "auto" else self.tail


@dataclass(eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(eq=False)
class Singleton:
    iter: IterVar


@dataclass
class IterVarAttr:
    """Annotations of one loop: its kind, a bound thread, pragmas, a tensor intrinsic."""

    kind: str = ""  # "", "parallel", "vectorize", "unroll"
    bind_thread: IterVar | None = None
    pragmas: list[tuple[str, PrimExpr]] = field(default_factory=list)
    tensor_intrin: TensorIntrin | None = None  # this loop and those inside it are replaced
    #: tensors prefetched at the top of this loop's body, each for iteration ``loop + offset``
    prefetch_data: list[Tensor] = field(default_factory=list)
    prefetch_offset: list[PrimExpr] = field(default_factory=list)


_KIND_NAMES = {"parallel": "parallel", "vectorize": "vectorize", "unroll": "unroll"}


def _iv(name: str, dtype: str, kind: int) -> IterVar:
    return IterVar(None, Var(name, dtype), kind)


def _check_env_thread(stage: str, t) -> None:
    """A thread axis of ``env_threads``: a real GPU thread with a known extent; several
    blocks would need a grid-wide barrier between the steps."""
    if not isinstance(t, IterVar) or t.iter_type != IterVar.ThreadIndex or \
            t.thread_tag.startswith(("vthread", "cthread")):
        raise ScheduleError(
            f"env_threads on stage '{stage}': expected GPU thread axes "
            f"(te.thread_axis((0, 64), 'threadIdx.x')), got {t!r}")
    if t.dom is None:
        raise ScheduleError(
            f"env_threads on stage '{stage}': thread axis '{t.thread_tag}' has no extent; "
            f"give it one, e.g. te.thread_axis((0, 64), '{t.thread_tag}')")
    extent = t.dom.extent
    if t.thread_tag.startswith("blockIdx.") and not (isinstance(extent, IntImm)
                                                     and extent.value == 1):
        raise NotImplementedError(
            f"env_threads on stage '{stage}': a persistent kernel over several blocks "
            f"('{t.thread_tag}' with extent {extent}) needs a grid-wide barrier between the "
            f"steps (TVM's tir.detect_global_barrier), which kiln does not implement; use "
            f"threadIdx axes only (one block), or drop env_threads to launch one kernel per "
            f"step")


class Stage:
    """The schedule of one operation (``s[C]``)."""

    def __init__(self, op: Operation, schedule: Schedule):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.relations: list = []
        self.iter_var_attrs: dict[IterVar, IterVarAttr] = {}
        self.attach_type = "root"  # root | inline | scope
        self.attach_ivar: IterVar | None = None
        self.attach_stage: Stage | None = None
        self.scope = ""
        self.is_output = False
        self.double_buffer = False
        self.storage_align_dims: dict[int, tuple[int, int]] = {}
        # where compute_root puts a stage of a group (a scan's update group: its scan loop)
        self.group_attach: tuple[Stage, IterVar] | None = None
        self._set_op(op)

    def _set_op(self, op: Operation) -> None:
        self.op = op
        self.all_iter_vars = list(op.root_iter_vars())
        self.leaf_iter_vars = list(self.all_iter_vars)

    # ---- helpers ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"stage({self.op.name}, {type(self.op).__name__})"

    def _check_leaf(self, iv: IterVar, primitive: str) -> int:
        if not isinstance(iv, IterVar):
            raise ScheduleError(
                f"{primitive} on stage '{self.name}': expected an axis (IterVar), got "
                f"{type(iv).__name__}")
        if iv in self.leaf_iter_vars:
            return self.leaf_iter_vars.index(iv)
        if iv in self.all_iter_vars:
            raise ScheduleError(
                f"{primitive} on stage '{self.name}': axis '{iv.var.name}' was already split "
                f"or fused away; use the axes that replaced it ("
                f"{', '.join(v.var.name for v in self.leaf_iter_vars)})")
        owner = self.schedule._owner_of(iv)
        where = f" it belongs to stage '{owner.name}'" if owner is not None else ""
        raise ScheduleError(
            f"{primitive} on stage '{self.name}': axis '{iv.var.name}' is not an axis of this "
            f"stage;{where}. Axes here: "
            f"{', '.join(v.var.name for v in self.leaf_iter_vars)}")

    @property
    def at_group_root(self) -> bool:
        """Computed where ``compute_root`` puts it: the function's root, or its group's
        loop."""
        if self.group_attach is None:
            return self.attach_type == "root"
        return self.attach_type == "scope" and \
            (self.attach_stage, self.attach_ivar) == self.group_attach

    def _attr(self, iv: IterVar) -> IterVarAttr:
        a = self.iter_var_attrs.get(iv)
        if a is None:
            a = self.iter_var_attrs[iv] = IterVarAttr()
        return a

    def _check_compute(self, primitive: str) -> None:
        if isinstance(self.op, PlaceholderOp):
            raise ScheduleError(
                f"{primitive}: stage '{self.name}' is a placeholder (an input); it has no loops "
                f"to schedule")
        self.op.check_primitive(primitive)

    # ---- loop transformations -----------------------------------------------------------
    def split(self, parent: IterVar, factor=None, nparts=None,
              tail: str | None = None) -> tuple[IterVar, IterVar]:
        """Split ``parent`` into an outer and an inner loop.

        Before::  for (i, 0, 100) { C[i] = ... }
        ``xo, xi = s[C].split(i, factor=32)``
        After::   for (i.outer, 0, 4) { for (i.inner, 0, 32) {
                     if (likely(((i.outer*32) + i.inner) < 100)) { C[...] = ... } } }

        ``tail`` says how the iterations past the extent are handled when the factor does not
        divide it: "guard", "partition", "shift_inwards", "pad", "predicate", "dispatch" or
        "auto" (the cost model chooses); ``kiln.te.split_tail`` shows each one's loop nest
        (docs/dynamic.md). None keeps the guard that ``loop_partition`` cuts.
        """
        self._check_compute("split")
        pos = self._check_leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(
                f"split on stage '{self.name}', axis '{parent.var.name}': give exactly one of "
                f"factor= or nparts=")
        amount = convert(factor if factor is not None else nparts)
        if hasattr(amount, "value") and amount.value <= 0:
            raise ScheduleError(
                f"split on stage '{self.name}', axis '{parent.var.name}': the "
                f"{'factor' if factor is not None else 'nparts'} must be positive, got "
                f"{amount.value}")
        if tail is not None:
            from .split_tail import check_tail  # split_tail builds on this module

            check_tail(self, parent, tail)
        kind = parent.iter_type
        # both loops count in the dtype of the axis they split (as in TVM)
        outer = _iv(parent.var.name + ".outer", parent.var.dtype, kind)
        inner = _iv(parent.var.name + ".inner", parent.var.dtype, kind)
        self.relations.append(Split(parent, outer, inner,
                                    amount if factor is not None else None,
                                    amount if nparts is not None else None, tail))
        self.all_iter_vars += [outer, inner]
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        return outer, inner

    def fuse(self, *args: IterVar) -> IterVar:
        """Fuse consecutive loops into one.

        Before::  for (i, 0, 4) { for (j, 0, 8) { C[i, j] = ... } }
        ``f = s[C].fuse(i, j)``
        After::   for (i.j.fused, 0, 32) { C[floordiv(f, 8), floormod(f, 8)] = ... }
        """
        self._check_compute("fuse")
        if len(args) == 1 and isinstance(args[0], list | tuple):
            args = tuple(args[0])
        if not args:
            raise ScheduleError(f"fuse on stage '{self.name}': give at least one axis")
        if len(args) == 1:
            self._check_leaf(args[0], "fuse")
            return args[0]
        positions = [self._check_leaf(a, "fuse") for a in args]
        if positions != list(range(positions[0], positions[0] + len(args))):
            names = ", ".join(a.var.name for a in args)
            raise ScheduleError(
                f"fuse on stage '{self.name}': axes ({names}) must be adjacent loops, outer to "
                f"inner, in the current order "
                f"({', '.join(v.var.name for v in self.leaf_iter_vars)}); reorder them first")
        fused = args[0]
        for nxt in args[1:]:
            kind = IterVar.CommReduce if IterVar.CommReduce in (
                fused.iter_type, nxt.iter_type) else IterVar.DataPar
            if fused.iter_type != nxt.iter_type:
                raise ScheduleError(
                    f"fuse on stage '{self.name}': cannot fuse a data-parallel axis with a "
                    f"reduction axis ('{fused.var.name}' and '{nxt.var.name}')")
            out = _iv(f"{fused.var.name}.{nxt.var.name}.fused", self._fused_dtype(fused, nxt),
                      kind)
            self.relations.append(Fuse(fused, nxt, out))
            self.all_iter_vars.append(out)
            pos = self.leaf_iter_vars.index(fused)
            self.leaf_iter_vars[pos:pos + 2] = [out]
            fused = out
        return fused

    def _fused_dtype(self, outer: IterVar, inner: IterVar) -> str:
        """The dtype of the loop fusing ``outer`` and ``inner``: the wider of theirs (as in
        TVM), and int64 where the fused extent, from the axes' domains, may not fit in
        int32 (70000 x 70000)."""
        from .relations import static_extents  # relations builds on this module

        extents = static_extents(self)
        return max(outer.var.dtype, inner.var.dtype,
                   index_dtype(extents[outer], extents[inner]), key=dt.bits)

    def reorder(self, *args: IterVar) -> None:
        """Reorder the given loops (the others keep their places).

        Before::  for (i) { for (j) { for (k) ... } }
        ``s[C].reorder(k, i)``
        After::   for (k) { for (j) { for (i) ... } }
        """
        self._check_compute("reorder")
        if len(args) == 1 and isinstance(args[0], list | tuple):
            args = tuple(args[0])
        positions = [self._check_leaf(a, "reorder") for a in args]
        if len(set(positions)) != len(positions):
            raise ScheduleError(f"reorder on stage '{self.name}': an axis is named twice")
        slots = sorted(positions)
        for slot, iv in zip(slots, args, strict=True):
            self.leaf_iter_vars[slot] = iv

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Tile two loops: split both and reorder to (x.outer, y.outer, x.inner, y.inner).

        Before:: for (x, 0, 64) { for (y, 0, 64) { C[x, y] = ... } }
        ``xo, yo, xi, yi = s[C].tile(x, y, 8, 16)``
        After::  for (x.outer, 0, 8) { for (y.outer, 0, 4) {
                   for (x.inner, 0, 8) { for (y.inner, 0, 16) { C[...] = ... } } } }
        """
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # ---- loop annotations ---------------------------------------------------------------
    def parallel(self, var: IterVar) -> None:
        """Run iterations of ``var`` on parallel threads (OpenMP).

        Before:: for (i, 0, n)       After:: parallel (i, 0, n)
        """
        self._annotate(var, "parallel")

    def vectorize(self, var: IterVar) -> None:
        """Turn loop ``var`` (constant extent) into vector operations (ramp / broadcast).

        Before:: for (j.inner, 0, 8) { C[j.inner] = A[j.inner] }
        After::  C[ramp(0, 1, 8)] = A[ramp(0, 1, 8)]
        """
        self._annotate(var, "vectorize")

    def unroll(self, var: IterVar) -> None:
        """Unroll loop ``var`` (constant extent).

        Before:: for (k, 0, 4)       After:: unrolled (k, 0, 4)
        """
        self._annotate(var, "unroll")

    def _annotate(self, var: IterVar, kind: str) -> None:
        self._check_compute(kind)
        self._check_leaf(var, kind)
        if kind in ("parallel", "vectorize") and var.iter_type == IterVar.CommReduce:
            raise ScheduleError(
                f"{kind} on stage '{self.name}': axis '{var.var.name}' is a reduction axis; "
                f"iterations of a reduction depend on each other. Use rfactor to parallelize a "
                f"reduction, or {kind} a data-parallel axis")
        attr = self._attr(var)
        if attr.bind_thread is None:  # as in TVM, a thread binding wins over a loop kind
            attr.kind = kind

    def pragma(self, var: IterVar, pragma_type: str, pragma_value=None) -> None:
        """Attach a pragma to loop ``var`` (e.g. ``auto_unroll_max_step``, ``unroll_explicit``).

        Before:: for (i, 0, n)  After:: // attr [i] pragma_auto_unroll_max_step = 16 / for ...
        """
        self._check_leaf(var, "pragma")
        if pragma_type in ("parallel", "vectorize", "unroll"):
            self._annotate(var, pragma_type)
            return
        # a string value (the C source of ``import_c``) stays a string, as in TVM
        value = StringImm(pragma_value) if isinstance(pragma_value, str) else \
            convert(pragma_value if pragma_value is not None else 1)
        self._attr(var).pragmas.append((pragma_type, value))

    def bind(self, ivar: IterVar, thread_ivar: IterVar) -> None:
        """Bind loop ``ivar`` to a GPU thread axis (``te.thread_axis``).

        Before:: for (i.outer, 0, 64)   After:: // attr [blockIdx.x] thread_extent = 64

        As in TVM, the binding wins over a loop kind: a ``parallel``, ``vectorize`` or
        ``unroll`` of the same axis, before or after, is dropped.
        """
        self._check_compute("bind")
        self._check_leaf(ivar, "bind")
        if not isinstance(thread_ivar, IterVar) or not thread_ivar.thread_tag:
            raise ScheduleError(
                f"bind on stage '{self.name}', axis '{ivar.var.name}': the second argument "
                f"must be te.thread_axis('blockIdx.x' | 'threadIdx.x' | 'vthread' ...)")
        attr = self._attr(ivar)
        attr.kind = ""
        attr.bind_thread = thread_ivar

    def env_threads(self, threads) -> None:
        """Run this scan stage's whole recurrence inside GPU thread axes (TVM's
        ``env_threads``): one persistent kernel, not one launch per stage per step. The
        stages computed in the scan bind their loops to the same threads; a barrier ends the
        init and every step, so that a step reads rows every thread has finished.

        Before:: produce s_init { ... }
                 for (scan.idx, 0, 9) { produce s_update { ... } }    // a kernel per step
        ``s[s_scan].env_threads([te.thread_axis((0, 8), "threadIdx.x")])``
        After::  // attr [threadIdx.x] thread_extent = 8                 // one kernel
                 produce s_init { ... }  tvm_storage_sync("shared")
                 for (scan.idx, 0, 9) { produce s_update { ... }  tvm_storage_sync("shared") }
        """
        self._check_compute("env_threads")
        if not self.op.composite:
            raise ScheduleError(
                f"env_threads on stage '{self.name}': env_threads applies to composite "
                f"operations such as te.scan (whose loop computes other stages); bind this "
                f"stage's own axes with s[{self.name}].bind(axis, thread) instead")
        if self.env_thread_axes:
            raise ScheduleError(f"env_threads on stage '{self.name}': already set")
        threads = [threads] if isinstance(threads, IterVar) else list(threads)
        for t in threads:
            _check_env_thread(self.name, t)
        self.leaf_iter_vars[0:0] = threads
        self.all_iter_vars += threads

    @property
    def env_thread_axes(self) -> list[IterVar]:
        """The thread axes ``env_threads`` put around this stage's loops (its leading
        leaves, outermost first)."""
        out = []
        for iv in self.leaf_iter_vars:
            if iv.iter_type != IterVar.ThreadIndex:
                break
            out.append(iv)
        return out

    # ---- attachment -----------------------------------------------------------------------
    def compute_at(self, parent: Stage, scope: IterVar) -> None:
        """Compute this stage inside loop ``scope`` of stage ``parent``.

        Before:: produce B { for (i) B[i] = .. }  produce C { for (i) C[i] = B[i] }
        ``s[B].compute_at(s[C], i)``
        After::  produce C { for (i) { produce B { B[i] = .. }  C[i] = B[i] } }
        """
        self._check_compute("compute_at")
        if not isinstance(parent, Stage):
            raise ScheduleError(
                f"compute_at on stage '{self.name}': the first argument must be a stage, "
                f"e.g. s[C]")
        if parent is self:
            raise ScheduleError(f"compute_at: stage '{self.name}' cannot be computed inside "
                                f"itself")
        if scope not in parent.leaf_iter_vars:
            raise ScheduleError(
                f"compute_at on stage '{self.name}': axis '{_name(scope)}' is not a loop of "
                f"stage '{parent.name}' (its loops are "
                f"{', '.join(v.var.name for v in parent.leaf_iter_vars)})")
        if not self.schedule._reads_transitively(parent, self):
            raise ScheduleError(
                f"compute_at on stage '{self.name}': stage '{parent.name}' does not consume "
                f"'{self.name}' (directly or through other stages); compute a stage at a "
                f"consumer's loop")
        self.attach_type = "scope"
        self.attach_stage = parent
        self.attach_ivar = scope

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its consumers (no loops, no storage).

        Before:: produce B { B[i] = A[i]*2 }  produce C { C[i] = B[i] + 1 }
        After::  produce C { C[i] = ((A[i]*2) + 1) }
        """
        self._check_compute("compute_inline")
        if self.is_output:
            raise ScheduleError(
                f"compute_inline: stage '{self.name}' is an output of the schedule; outputs "
                f"must be stored")
        if isinstance(self.op, ComputeOp) and self.op.reduce_axis:
            raise ScheduleError(
                f"compute_inline: stage '{self.name}' is a reduction; only element-wise "
                f"(injective) stages can be inlined")
        self.attach_type = "inline"
        self.attach_stage = None
        self.attach_ivar = None

    def compute_root(self) -> None:
        """Compute this stage at the top level of the function (the default; undoes
        compute_at / compute_inline).

        Before:: produce C { for (i) { produce B { B[i] = .. }  C[i] = B[i] } }
        After::  produce B { for (i) B[i] = .. }  produce C { for (i) C[i] = B[i] }

        A stage of a scan's update group goes back into the scan loop (TVM's group root).
        """
        self._check_compute("compute_root")
        if self.group_attach is not None:
            self.attach_type = "scope"
            self.attach_stage, self.attach_ivar = self.group_attach
            return
        self.attach_type = "root"
        self.attach_stage = None
        self.attach_ivar = None

    def set_scope(self, scope: str) -> None:
        """Store this stage's output in memory ``scope`` ('global', 'shared', 'local'), or
        a tagged scope of an accelerator's memory (TVM's ``rank.tag``: ``local.inp_buffer``).

        Before:: allocate B[float32 * 64]
        ``s[B].set_scope("local")``
        After::  // attr [B] storage_scope = "local"   allocate B[float32 * 64]
        """
        if scope.partition(".")[0] not in ("global", "shared", "local", "warp", ""):
            raise ScheduleError(f"set_scope on stage '{self.name}': unknown scope {scope!r}")
        self.scope = scope

    def storage_align(self, axis: IterVar, factor: int, offset: int) -> None:
        """Pad the stride of ``axis``'s dimension to ``factor*k + offset`` elements (e.g. to
        avoid shared-memory bank conflicts).

        Before:: allocate AA[float32 * (64*32)]   AA[((i*32) + j)]
        ``s[AA].storage_align(AA.op.axis[0], 32, 1)``
        After::  allocate AA[float32 * (64*33)]   AA[((i*33) + j)]
        """
        self._check_compute("storage_align")
        axes = list(self.op.axis)
        if axis not in axes:
            raise ScheduleError(
                f"storage_align on stage '{self.name}': '{_name(axis)}' must be one of the "
                f"operation's axes (s[T].op.axis)")
        if int(factor) <= 0 or not 0 <= int(offset) < int(factor):
            raise ScheduleError(
                f"storage_align on stage '{self.name}': need factor > 0 and "
                f"0 <= offset < factor, got factor={factor}, offset={offset}")
        self.storage_align_dims[axes.index(axis)] = (int(factor), int(offset))

    def double_buffer_(self) -> None:
        self.double_buffer = True

    def prefetch(self, tensor: Tensor, var: IterVar, offset) -> None:
        """Inside loop ``var``, prefetch the region of ``tensor`` that iteration
        ``var + offset`` reads (kiln/tir/inject_prefetch.py: one ``prefetch`` call per cache
        line; results never change). ``tensor`` is read by this stage or by a stage
        computed at its loops (``compute_at``), directly or through a copy
        (``cache_read``, before or after this call) or an inlined stage; the loop prefetches
        the one of ``tensor`` and its copies that its body reads (kiln/te/prefetch.py).

        Before:: for (k.outer, 0, 7) { for (k.inner, 0, 16) { C[i] = C[i] + A[i, ...] } }
        ``s[C].prefetch(A, ko, 1)``
        After::  for (k.outer, 0, 7) {
                   // attr [A] prefetch_scope = 1
                   for (k.inner, 0, 16) { ... } }
        and after the ``inject_prefetch`` pass::
                 for (k.outer, 0, 7) {
                   if ((k.outer < 6)) {
                     prefetch(tvm_address_of(A[(((i*112) + (k.outer*16)) + 16)]), 0, 3, 1) }
                   for (k.inner, 0, 16) { ... } }
        """
        self._check_compute("prefetch")
        self._check_leaf(var, "prefetch")
        check_prefetch(self, tensor)
        attr = self._attr(var)
        attr.prefetch_data.append(tensor)
        attr.prefetch_offset.append(convert(offset))

    def tensorize(self, var: IterVar, intrin: TensorIntrin) -> None:
        """Replace loop ``var`` and the loops inside it by the tensor intrinsic ``intrin``
        (``te.decl_tensor_intrin``), once their body matches its computation (checked when
        lowering: kiln/te/tensorize.py, docs/tensorize.md).

        Before:: for (j.outer, 0, 32) { for (j.inner, 0, 16) { for (k, 0, 64) {
                   C[i, ((j.outer*16) + j.inner)] = C[...] + A[i, k]*B[..., k] } } }
        ``s[C].tensorize(ji, intrin_gemv(16, 64))``
        After::  for (j.outer, 0, 32) {
                   gemv_update(tvm_access_ptr(type_annotation(), C, ((i*512) + (j.outer*16)),
                               16, 2), tvm_access_ptr(..., A, (i*64), 64, 1), ...) }
        """
        self._check_compute("tensorize")
        self._check_leaf(var, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise ScheduleError(f"tensorize on stage '{self.name}': the second argument must "
                                f"be a te.decl_tensor_intrin, got {type(intrin).__name__}")
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"tensorize on stage '{self.name}': only te.compute stages "
                                f"can be tensorized")
        for iv, attr in self.iter_var_attrs.items():
            if attr.tensor_intrin is not None and iv is not var:
                raise ScheduleError(f"tensorize on stage '{self.name}': loop "
                                    f"'{iv.var.name}' is tensorized already; a stage has one "
                                    f"tensorized loop")
        self._attr(var).tensor_intrin = intrin


def _name(iv) -> str:
    return iv.var.name if isinstance(iv, IterVar) else repr(iv)


class Schedule:
    """The schedule of a DAG of operations (``te.create_schedule(C.op)``)."""

    def __init__(self, outputs: list[Operation]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        for op in _post_dfs(self.outputs):
            st = Stage(op, self)
            self.stages.append(st)
            self.stage_map[op] = st
        for op in self.outputs:
            self.stage_map[op].is_output = True
        for st in self.stages:
            st.op.attach_group(self)

    def __getitem__(self, key) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        st = self.stage_map.get(op)
        if st is None:
            for s in self.stages:
                if s.origin_op is op or s.op is op:
                    return s
            name = getattr(op, "name", repr(op))
            raise ScheduleError(
                f"tensor/operation '{name}' is not part of this schedule (its stages are "
                f"{', '.join(s.name for s in self.stages)})")
        return st

    def __repr__(self) -> str:
        return f"schedule({', '.join(s.name for s in self.stages)})"

    def _owner_of(self, iv: IterVar) -> Stage | None:
        for s in self.stages:
            if iv in s.all_iter_vars:
                return s
        return None

    def consumers(self, stage: Stage) -> list[Stage]:
        out = []
        for s in self.stages:
            if any(t.op is stage.op for t in s.op.input_tensors):
                out.append(s)
        return out

    def _reads_transitively(self, consumer: Stage, producer: Stage) -> bool:
        """True if consumer reads producer directly or through other stages (as TVM allows:
        the book attaches a shared cache at a loop of the stage that reads its local copy)."""
        todo = [t.op for t in consumer.op.input_tensors]
        seen = set()
        while todo:
            op = todo.pop()
            if op is producer.op:
                return True
            if op in seen:
                continue
            seen.add(op)
            todo.extend(t.op for t in op.input_tensors)
        return False

    # cache_read / cache_write / rfactor live in kiln.te.schedule_dataflow,
    # create_fused_loop in kiln.te.fused_loop
    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        from .schedule_dataflow import cache_read

        return cache_read(self, tensor, scope, readers)

    def cache_write(self, tensor, scope: str):
        from .schedule_dataflow import cache_write

        return cache_write(self, tensor, scope)

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0):
        from .schedule_dataflow import rfactor

        return rfactor(self, tensor, axis, factor_axis)

    def create_fused_loop(self, inputs, fuse_outputs, extents, name: str = "fused",
                          interleave: int | None = None):
        """Run independent stages side by side in one loop (horizontal fusion, seed 002),
        end to end or ``interleave`` rows of each at a time; the loop nest before and after:
        ``kiln.te.fused_loop``."""
        from .fused_loop import create_fused_loop

        return create_fused_loop(self, inputs, fuse_outputs, extents, name, interleave)

    def create_group(self, outputs, inputs, include_inputs=False):
        raise NotImplementedError("create_group is not implemented in kiln yet")

    def normalize(self) -> Schedule:
        return self


def _post_dfs(outputs: list[Operation]) -> list[Operation]:
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def AutoInlineInjective(sch: Schedule) -> None:  # noqa: N802 - TVM's name
    """Inline every injective (element-wise, non-reduction) stage that is not an output."""
    for st in sch.stages:
        if (isinstance(st.op, ComputeOp) and not st.op.reduce_axis and not st.is_output
                and st.attach_type == "root"):
            st.compute_inline()


def create_schedule(ops) -> Schedule:
    """A default schedule for the operations ``ops`` (an op, a tensor, or a list of them)."""
    if not isinstance(ops, list | tuple):
        ops = [ops]
    ops = [o.op if isinstance(o, Tensor) else o for o in ops]
    for o in ops:
        if not isinstance(o, Operation):
            raise TypeError(f"create_schedule expects operations or tensors, got {o!r}")
    return Schedule(ops)


def InferBound(sch: Schedule) -> dict:  # noqa: N802 - TVM's name
    """TVM's ``te.schedule.InferBound``: the range of every loop of every stage, after
    inlining (``kiln.te.bound``)."""
    from kiln.arith import Analyzer

    from .bound import infer_bound
    from .inline import effective_bodies

    return infer_bound(sch, effective_bodies(sch), Analyzer())


def ScheduleOps(sch: Schedule, bounds: dict):  # noqa: N802 - TVM's name
    """TVM's ``te.schedule.ScheduleOps``: the loop nests of ``sch`` under ``bounds`` (from
    :func:`InferBound`), before storage flattening. Every tensor is realized in the body."""
    from kiln.arith import Analyzer

    from .inline import effective_bodies
    from .schedule_ops import schedule_to_stmt
    from .tensorize import tensorize_stages

    bodies = effective_bodies(sch)
    return schedule_to_stmt(sch, bodies, bounds, set(), Analyzer(),
                            tensorize_stages(sch, bodies, bounds))


__all__ = ["Schedule", "Stage", "create_schedule", "AutoInlineInjective", "Split", "Fuse",
           "Range", "InferBound", "ScheduleOps"]
