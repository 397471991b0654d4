"""Make the GPU thread bindings of each kernel agree (run right after schedule → loop IR).

A kernel is launched with one block shape, but several stages of it may bind loops to the
same thread tag: a cache stage's cooperative fetch binds ``threadIdx.x`` inside the loop nest
of its consumer, which binds ``threadIdx.x`` too, possibly through a different
``te.thread_axis`` object and with a different extent. For every kernel (an outermost
``thread_extent`` attribute and everything under it) this pass

* gives each real thread tag (``blockIdx.*``, ``threadIdx.*``) one variable: the first
  binding's, substituted for the others;
* sets every binding of a tag to the kernel's launch extent, the largest of its extents, and
  guards a binding with a smaller extent by ``if (likely(threadIdx.x < extent))``;
* rejects a binding nested in a binding of the same tag with a smaller extent (the outer
  guard would keep the extra threads from the inner work, and from its barriers), and
  symbolic extents that differ.

Virtual threads (``vthread``/``cthread``) are left alone: each of those axes is its own loop.
Without thread bindings the statement is returned unchanged.
"""

from __future__ import annotations

from kiln.errors import ScheduleError
from kiln.ir.expr import Call, IntImm, IterVar, PrimExpr
from kiln.ir.functor import Mutator, post_order_visit, substitute
from kiln.ir.printer import expr_text
from kiln.ir.stmt import AttrStmt, IfThenElse, Stmt
from kiln.ir.structural import structural_equal

VIRTUAL_TAGS = ("vthread", "cthread")


def is_thread_attr(s) -> bool:
    return isinstance(s, AttrStmt) and s.attr_key == "thread_extent"


def is_virtual_tag(tag: str) -> bool:
    return tag.startswith(VIRTUAL_TAGS)


def thread_tag(s: AttrStmt) -> str:
    node = s.node
    return getattr(node, "thread_tag", "") or getattr(node, "name", "")


def has_thread_binding(stmt) -> bool:
    """Whether ``stmt`` binds a thread (``attr thread_extent``): a walk of its statements
    only, which stops at the first binding (a CPU kernel's expressions are most of it)."""
    todo = [stmt]
    while todo:
        node = todo.pop()
        if is_thread_attr(node):
            return True
        for f in node._fields:
            v = getattr(node, f)
            if isinstance(v, Stmt):
                todo.append(v)
            elif isinstance(v, tuple):
                todo += [x for x in v if isinstance(x, Stmt)]
    return False


def _real_thread_attrs(stmt) -> list[AttrStmt]:
    out: list[AttrStmt] = []

    def f(n):
        if is_thread_attr(n) and not is_virtual_tag(thread_tag(n)):
            out.append(n)

    post_order_visit(stmt, f)
    return out


class _KernelUnifier(Mutator):
    def __init__(self, canon: dict[str, IterVar], launch: dict[str, PrimExpr]):
        super().__init__()
        self.canon = canon
        self.launch = launch
        self.enclosing: dict[str, list[PrimExpr]] = {}

    def visit_AttrStmt(self, s: AttrStmt):
        if not is_thread_attr(s) or is_virtual_tag(thread_tag(s)):
            return self.generic_visit(s)
        tag = thread_tag(s)
        ext = s.value
        for outer in self.enclosing.get(tag, []):
            if (isinstance(outer, IntImm) and isinstance(ext, IntImm)
                    and outer.value < ext.value):
                raise ScheduleError(
                    f"a loop bound to {tag} with extent {ext.value} is nested inside a loop "
                    f"bound to {tag} with extent {outer.value}; one kernel launches one block "
                    f"shape, so split the inner stage's axis to {outer.value} threads (the "
                    f"same thread count as its consumer)")
        self.enclosing.setdefault(tag, []).append(ext)
        try:
            body = self.visit(s.body)
        finally:
            self.enclosing[tag].pop()
        canon = self.canon[tag]
        launch = self.launch[tag]
        if isinstance(ext, IntImm) and isinstance(launch, IntImm) and ext.value < launch.value:
            body = IfThenElse(Call("bool", "likely", [canon.var < ext]), body)
        if s.node is canon and launch is ext and body is s.body:
            return s
        return AttrStmt(canon, "thread_extent", launch, body)


def _unify_kernel(root: AttrStmt) -> Stmt:
    attrs = _real_thread_attrs(root)
    # post_order_visit lists children first; the first binding in program order comes last
    attrs.reverse()
    canon: dict[str, IterVar] = {}
    extents: dict[str, list[PrimExpr]] = {}
    for a in attrs:
        tag = thread_tag(a)
        canon.setdefault(tag, a.node)
        extents.setdefault(tag, []).append(a.value)
    launch: dict[str, PrimExpr] = {}
    for tag, exts in extents.items():
        if all(isinstance(e, IntImm) for e in exts):
            launch[tag] = max(exts, key=lambda e: e.value)
            continue
        first = exts[0]
        for e in exts[1:]:
            if not structural_equal(e, first):
                raise ScheduleError(
                    f"loops bound to {tag} in one kernel have different extents "
                    f"{expr_text(first)} and {expr_text(e)}, and one is not a constant; "
                    f"bind loops of the same extent")
        launch[tag] = first
    vmap = {a.node.var: canon[thread_tag(a)].var for a in attrs
            if a.node.var is not canon[thread_tag(a)].var}
    body = substitute(root, vmap) if vmap else root
    return _KernelUnifier(canon, launch).visit(body)


class _Finder(Mutator):
    def visit_AttrStmt(self, s: AttrStmt):
        if is_thread_attr(s):
            return _unify_kernel(s)
        return self.generic_visit(s)


def unify_thread_extents(stmt: Stmt) -> Stmt:
    """One variable and one launch extent per thread tag in every kernel (see module doc)."""
    if not has_thread_binding(stmt):
        return stmt
    return _Finder().visit(stmt)
