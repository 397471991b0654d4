"""Storage synchronisation in GPU kernels: ``__syncthreads()`` where threads share memory.

Guarantee: in a kernel body, every ``produce`` region that stores to ``shared`` memory is
followed by a barrier (``tvm_storage_sync("shared")``), so that no thread reads the shared
tile before every thread has written its part; when that region sits inside a loop it is also
preceded by one, so that the next iteration does not overwrite what other threads may still
read. Kernels without shared memory are returned unchanged.
"""

from __future__ import annotations

from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import Mutator, Visitor

STORAGE_SYNC = "tvm_storage_sync"


def sync_stmt() -> S.Stmt:
    """The barrier statement: ``tvm_storage_sync("shared")``, ``__syncthreads()`` in CUDA."""
    return S.Evaluate(E.Call("int32", STORAGE_SYNC, [E.StringImm("shared")]))


def _writes_directly(stmt, buffers: set[E.Var]) -> bool:
    """Does ``stmt`` store to ``buffers`` outside the produce regions nested in it?"""
    found = []

    class V(Visitor):
        def visit_Store(self, s):
            if s.buffer_var in buffers:
                found.append(s)
            self.generic_visit(s)

        def visit_AttrStmt(self, s):
            if s.attr_key != "produce":
                self.generic_visit(s)

    V().visit(stmt)
    return bool(found)


class _SyncInserter(Mutator):
    def __init__(self, shared: set[E.Var]):
        super().__init__()
        self.shared = shared
        self.loops = 0

    def visit_For(self, s: S.For):
        self.loops += 1
        try:
            return self.generic_visit(s)
        finally:
            self.loops -= 1

    def visit_AttrStmt(self, s: S.AttrStmt):
        new = self.generic_visit(s)
        if s.attr_key == "produce" and _writes_directly(s.body, self.shared):
            before = sync_stmt() if self.loops else None
            return S.seq(before, new, sync_stmt())
        return new


def insert_storage_sync(body: S.Stmt) -> S.Stmt:
    """``__syncthreads()`` around every produce that writes shared memory (module docstring)."""
    shared: set[E.Var] = set()

    class V(Visitor):
        def visit_Allocate(self, s):
            if s.scope == "shared":
                shared.add(s.buffer_var)
            self.generic_visit(s)

    V().visit(body)
    if not shared:
        return body
    return _SyncInserter(shared).visit(body)
