"""Inject virtual threads: turn each ``vthread``/``cthread`` binding into one instruction stream.

A loop bound to ``te.thread_axis("vthread")`` is a *virtual* thread: its iterations are
conceptually concurrent threads, but they run on one real thread. Unrolling the whole loop
(the simple lowering) would repeat everything under it once per virtual thread, including the
cooperative fetches into shared memory, which are the same for every virtual thread. This pass
does what TVM's ``InjectVirtualThread`` does instead:

* **touched analysis** — a variable or buffer is *touched* by the virtual thread ``vx`` when
  its value can differ between virtual threads: ``vx`` itself, lets and loop variables whose
  values or ranges use touched variables, buffers stored at a touched index or with a touched
  value (loads of touched buffers included), or under touched control flow; iterated to a
  fixed point;
* **sharing** — a statement that touches nothing runs once, for all virtual threads; loops,
  attributes, lets, conditions and allocations that do not touch ``vx`` themselves are kept
  once and the injection goes on inside them;
* **private storage** — a buffer allocated under the virtual thread and touched by it gets one
  copy per virtual thread: its allocation grows ``n``-fold and every access is offset by
  ``vx * size``; untouched allocations are shared (for ``cthread``, which may not share,
  every allocation under it is private); an allocation whose size depends on ``vx`` (symbolic
  shapes) is not grown: the loop over ``vx`` goes around it, as in TVM;
* **co-processor operations** — under ``cthread``, a ``pragma_*`` loop nest (an
  accelerator's DMA copy or ALU operation, kiln.vta) is repeated whole per virtual thread
  rather than interleaved inside, as TVM does for its ``coproc_scope``; a
  ``tvm_access_ptr`` into a private buffer is offset like its loads and stores;
* **interleaving** — each remaining statement that touches ``vx`` is repeated for
  ``vx = 0 .. n-1`` (substituted, so the copies sit side by side for instruction-level
  parallelism), or, for more than ``MAX_UNROLL`` virtual threads, a symbolic count, or a
  statement that defines loops, lets or buffers of its own, wrapped in a loop over ``vx``.

Interleaving is legal because virtual threads are concurrent by definition: any interleaving
of their statements is an execution a program with real threads could have had. After this
pass no ``vthread``/``cthread`` attribute is left, so virtual threads also work on CPU targets.
"""

from __future__ import annotations

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import Mutator, Visitor, collect_vars, rebuild, substitute
from kiln.ir.stmt import ACCESS_PTR

from .thread_binding import is_thread_attr, is_virtual_tag, thread_tag

#: virtual threads repeated by substitution up to this count (TVM's ``max_loop_unroll``)
MAX_UNROLL = 16


def inject_virtual_thread(stmt: S.Stmt) -> S.Stmt:
    """Replace every virtual-thread attribute of ``stmt`` by its injected body (module doc)."""
    return _VirtualThreadInjector().visit(stmt)


def _is_virtual_thread(s) -> bool:
    return is_thread_attr(s) and is_virtual_tag(thread_tag(s))


class _VirtualThreadInjector(Mutator):
    def visit_AttrStmt(self, s: S.AttrStmt):
        if not _is_virtual_thread(s):
            return self.generic_visit(s)
        vx = s.node.var
        body = _StripRebinding(vx).visit(s.body)  # the same virtual thread bound again inside
        body = self.visit(body)  # inner virtual threads first
        share = thread_tag(s).startswith("vthread")
        return _inject(body, vx, s.value, share)


class _StripRebinding(Mutator):
    def __init__(self, var: E.Var):
        super().__init__()
        self.var = var

    def visit_AttrStmt(self, s: S.AttrStmt):
        if _is_virtual_thread(s) and s.node.var is self.var:
            return self.visit(s.body)
        return self.generic_visit(s)


# ---- touched analysis ----------------------------------------------------------------------
def touched_vars(body: S.Stmt, vx: E.Var, share: bool = True) -> set[E.Var]:
    """The variables and buffer variables of ``body`` whose values depend on ``vx``."""
    touched = {vx}
    while True:
        grown = _TouchedPass(touched, share)
        grown.visit(body)
        if not grown.added:
            return touched


class _TouchedPass(Visitor):
    """One sweep of the fixed-point iteration; records what it newly found in ``added``."""

    def __init__(self, touched: set[E.Var], share: bool):
        super().__init__()
        self.touched = touched
        self.share = share
        self.context = 0  # > 0 under control flow that depends on touched variables
        self.added = False

    def _uses(self, *nodes) -> bool:
        return any(not collect_vars(n).isdisjoint(self.touched) for n in nodes if n is not None)

    def _add(self, v: E.Var) -> None:
        if v not in self.touched:
            self.touched.add(v)
            self.added = True

    def _under(self, cond: bool, *stmts) -> None:
        self.context += cond
        for st in stmts:
            self.visit(st)
        self.context -= cond

    def visit_Store(self, s: S.Store):
        if self.context or self._uses(s.index, s.value, s.predicate):
            self._add(s.buffer_var)

    def visit_LetStmt(self, s: S.LetStmt):
        if self.context or self._uses(s.value):
            self._add(s.var)
        self.visit(s.body)

    def visit_For(self, s: S.For):
        dependent = self._uses(s.min, s.extent)
        if dependent or self.context:
            self._add(s.loop_var)
        self._under(dependent, s.body)

    def visit_IfThenElse(self, s: S.IfThenElse):
        self._under(self._uses(s.condition), s.then_case, s.else_case)

    def visit_Allocate(self, s: S.Allocate):
        if not self.share:
            self._add(s.buffer_var)
        self.visit(s.body)


# ---- injection -----------------------------------------------------------------------------
def _inject(body: S.Stmt, vx: E.Var, extent: E.PrimExpr, share: bool) -> S.Stmt:
    touched = touched_vars(body, vx, share)
    return _Injector(vx, extent, touched, share).inject(body)


class _Injector:
    def __init__(self, vx: E.Var, extent: E.PrimExpr, touched: set[E.Var], share: bool):
        self.vx = vx
        self.extent = extent
        self.touched = touched
        self.share = share

    def _touches(self, node) -> bool:
        return node is not None and not collect_vars(node).isdisjoint(self.touched)

    def inject(self, s: S.Stmt) -> S.Stmt:
        """A statement equivalent to running ``s`` once per virtual thread."""
        if not self._touches(s):
            return s
        if isinstance(s, S.SeqStmt):
            return S.seq(*(self.inject(c) for c in s.seq))
        if isinstance(s, S.AttrStmt) and s.attr_key.startswith("pragma_") and not self.share:
            return self._interleave(s)  # a co-processor operation: one whole copy per cthread
        if isinstance(s, S.For) and not self._touches((s.min, s.extent)):
            return rebuild(s, body=self.inject(s.body))
        if isinstance(s, S.AttrStmt) and not self._touches(s.value):
            return rebuild(s, body=self.inject(s.body))
        if isinstance(s, S.LetStmt) and not self._touches(s.value):
            return rebuild(s, body=self.inject(s.body))
        if isinstance(s, S.IfThenElse) and not self._touches(s.condition):
            return rebuild(s, then_case=self.inject(s.then_case),
                           else_case=self.inject(s.else_case) if s.else_case else None)
        if isinstance(s, S.Allocate):
            if self._touches(s.extents):  # a size per virtual thread: a loop around it all
                return self._interleave(s)
            return self._private(s) if s.buffer_var in self.touched else \
                rebuild(s, body=self.inject(s.body))
        return self._interleave(s)

    def _private(self, s: S.Allocate) -> S.Stmt:
        """One copy of the buffer per virtual thread, each access offset by ``vx * size``."""
        size = E.IntImm("int32", 1)
        for e in s.extents:
            size = size * e
        body = _OffsetAccesses(s.buffer_var, self.vx * size).visit(s.body)
        return rebuild(s, extents=(size * self.extent,), body=self.inject(body))

    def _interleave(self, s: S.Stmt) -> S.Stmt:
        n = self.extent.value if isinstance(self.extent, E.IntImm) else None
        if n is not None and n <= MAX_UNROLL and not _defines_names(s):
            return S.seq(*(substitute(s, {self.vx: E.IntImm(self.vx.dtype, i)})
                           for i in range(n)))
        kind = S.ForKind.UNROLLED if n is not None and n <= MAX_UNROLL else S.ForKind.SERIAL
        return S.For(self.vx, 0, self.extent, kind, s)


def _defines_names(s: S.Stmt) -> bool:
    """Does ``s`` define loop variables, lets or buffers (which copies may not repeat)?"""
    found = []

    class V(Visitor):
        def visit_For(self, n):
            found.append(n)

        visit_LetStmt = visit_Allocate = visit_For

    V().visit(s)
    return bool(found)


class _OffsetAccesses(Mutator):
    """Every load and store of ``buffer`` at ``index + offset``."""

    def __init__(self, buffer: E.Var, offset: E.PrimExpr):
        super().__init__()
        self.buffer = buffer
        self.offset = offset

    def _index(self, index: E.PrimExpr) -> E.PrimExpr:
        if isinstance(index, E.Ramp):
            return rebuild(index, base=index.base + self.offset)
        lanes = dt.lanes(index.dtype)
        return index + (E.Broadcast(self.offset, lanes) if lanes > 1 else self.offset)

    def _access(self, node, **fields):
        changes = {f: self.visit(v) for f, v in fields.items()}
        if node.buffer_var is self.buffer:
            changes["index"] = self._index(changes["index"])
        return rebuild(node, **changes)

    def visit_Load(self, e: E.Load):
        return self._access(e, index=e.index, predicate=e.predicate)

    def visit_Store(self, s: S.Store):
        return self._access(s, index=s.index, value=s.value, predicate=s.predicate)

    def visit_Call(self, e: E.Call):
        """``tvm_access_ptr(t, buffer, offset, extent, mask)`` (a tensor intrinsic's operand)
        points into the thread's copy, as in TVM."""
        if e.op == ACCESS_PTR and e.args[1] is self.buffer:
            annotation, data, offset, extent, mask = e.args
            return rebuild(e, args=(annotation, data, self.visit(offset) + self.offset,
                                    self.visit(extent), mask))
        return self.generic_visit(e)

    def visit_Var(self, v: E.Var):
        if v is self.buffer:
            raise NotImplementedError(
                f"inject_virtual_thread: buffer '{v.name}' is private to each virtual thread "
                f"but is used other than by loads and stores (e.g. its address is taken); "
                f"only loads and stores can be offset per virtual thread")
        return v
