"""In-place ALU stages: ``C = A op x`` computed in ``A``'s accumulator tiles when ``A`` is
dead afterwards.

VTA's ALU updates its destination (``dst = dst op src``); a chain of element-wise stages
each in a buffer of its own (``res_shr = res_conv >> 8; res_max = max(res_shr, 0)``) would
need a copy per stage and an accumulator buffer per stage. This lowering pass (phase 3 of
``vta.build_config``) rewrites an ``env.alu`` nest storing ``D[i] = L[i] op x`` into
``L[i] = L[i] op x`` and makes ``D`` an alias of ``L`` (its allocation disappears), when:

* both are accumulator buffers, ``D``'s allocation lies inside ``L``'s, and the nest is the
  only statement writing ``D`` (no tensor intrinsic writes it);
* the nest reads ``L`` at the index it writes ``D`` (and nowhere else);
* nothing reads ``L`` after the nest inside ``L``'s allocation: not the statements that
  follow it, nor, for a loop around it, the statements before it (its next iterations);
* every loop between ``L``'s allocation and the nest indexes the store (each iteration
  updates its own tiles).

Applied until no chain is left, so TVM's tutorials fit their accumulator buffer.
"""

from __future__ import annotations

from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import Mutator, Visitor, collect_vars, substitute
from kiln.ir.stmt import ACCESS_PTR
from kiln.ir.structural import structural_equal

from .inject_alu import alu_operands

__all__ = ["alu_inplace"]


def alu_inplace(stmt: S.Stmt, acc_scope: str, alu_pragma: str = "pragma_alu") -> S.Stmt:
    """``stmt`` with every in-place-able ALU stage rewritten (module doc)."""
    while True:
        found = _Finder(stmt, acc_scope, alu_pragma).find()
        if found is None:
            return stmt
        stmt = _Alias(*found).visit(stmt)


class _Finder(Visitor):
    """The first (D's allocation, L) pair that may be merged."""

    def __init__(self, root: S.Stmt, acc_scope: str, alu_pragma: str):
        super().__init__()
        self.root = root
        self.acc_scope = acc_scope
        self.alu_pragma = alu_pragma
        self.path: list[S.Stmt] = []
        self.result: tuple[S.Allocate, E.Var] | None = None

    def find(self) -> tuple[S.Allocate, E.Var] | None:
        self.visit(self.root)
        return self.result

    def visit(self, node):
        if self.result is not None:
            return
        if isinstance(node, S.Stmt):
            self.path.append(node)
            super().visit(node)
            self.path.pop()
        else:
            super().visit(node)

    def visit_AttrStmt(self, s: S.AttrStmt):
        if s.attr_key == self.alu_pragma:
            self._consider(s)
        self.generic_visit(s)

    def _consider(self, pragma: S.AttrStmt) -> None:
        store = pragma.body
        while isinstance(store, (S.For, S.AttrStmt)):
            store = store.body
        if not isinstance(store, S.Store):
            return
        try:
            _, lhs, rhs = alu_operands(store.value)
        except NotImplementedError:
            return
        if not isinstance(lhs, E.Load) or lhs.buffer_var is store.buffer_var:
            return
        d_alloc = self._allocation(store.buffer_var)
        l_alloc = self._allocation(lhs.buffer_var)
        if d_alloc is None or l_alloc is None or \
                self.path.index(l_alloc) > self.path.index(d_alloc):
            return
        if not structural_equal(lhs.index, store.index):
            return
        if isinstance(rhs, E.Load) and rhs.buffer_var in (store.buffer_var, lhs.buffer_var):
            return
        if _writes(self.root, store.buffer_var) != 1:
            return
        if not self._dead_after(l_alloc, lhs.buffer_var, store.index):
            return
        self.result = (d_alloc, lhs.buffer_var)

    def _allocation(self, var: E.Var) -> S.Allocate | None:
        for node in self.path:
            if isinstance(node, S.Allocate) and node.buffer_var is var and \
                    node.scope == self.acc_scope:
                return node
        return None

    def _dead_after(self, l_alloc: S.Allocate, buf: E.Var, index: E.PrimExpr) -> bool:
        """Is ``buf`` unread after the nest (the last node of ``path``)?"""
        top = self.path.index(l_alloc)
        chain = self.path[top:]
        index_vars = collect_vars(index)
        later: list[S.Stmt] = []
        for depth in range(len(chain) - 2, -1, -1):
            node, child = chain[depth], chain[depth + 1]
            looped = any(isinstance(n, S.For) for n in chain[1:depth + 1])
            if isinstance(node, S.For) and depth > 0 and node.loop_var not in index_vars:
                return False
            if isinstance(node, S.SeqStmt):
                k = next(i for i, c in enumerate(node.seq) if c is child)
                later += node.seq[k + 1:]
                if looped:
                    later += node.seq[:k]
        return not any(_reads(s, buf) for s in later)


def _reads(stmt: S.Stmt, buf: E.Var) -> bool:
    return buf in collect_vars(stmt)


def _writes(stmt: S.Stmt, buf: E.Var) -> int:
    """Statements writing ``buf`` (stores, and any address taken counts as a write)."""
    count = [0]

    class V(Visitor):
        def visit_Store(self, s: S.Store):
            count[0] += s.buffer_var is buf
            self.generic_visit(s)

        def visit_Call(self, e: E.Call):
            if e.op == ACCESS_PTR and e.args[1] is buf:
                count[0] += 2
            self.generic_visit(e)

    V().visit(stmt)
    return count[0]


class _Alias(Mutator):
    """Drop ``d_alloc`` and use ``l_var`` for its buffer."""

    def __init__(self, d_alloc: S.Allocate, l_var: E.Var):
        super().__init__()
        self.d_alloc = d_alloc
        self.l_var = l_var

    def visit_Allocate(self, s: S.Allocate):
        if s is self.d_alloc:
            return self.visit(substitute(s.body, {s.buffer_var: self.l_var}))
        return self.generic_visit(s)
