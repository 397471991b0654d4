"""Visitors and mutators over the IR with type-indexed dispatch.

Subclass ``Mutator`` and define ``visit_<NodeClass>(self, node)`` for the nodes you rewrite;
every other node is rebuilt generically from its ``_fields`` (and kept as the same object when
no child changed, so passes preserve sharing). ``Visitor`` is the read-only counterpart.
"""

from __future__ import annotations

from collections.abc import Callable

from .expr import CommReducer, IterVar, Node, PrimExpr, Var
from .stmt import Allocate, AttrStmt, For, LetStmt

# Fields the generic traversal does not descend into: they name things, they do not hold IR.
_OPAQUE = (IterVar, CommReducer)
# What a field holding IR is, for the visitor and the mutator (a tuple of types is checked
# faster than a union).
_VISITED = (Node, tuple, list)
_SEQUENCES = (tuple, list)
_MUTATED = (Node, tuple)


def _all_slots(cls) -> tuple[str, ...]:
    out: list[str] = []
    for c in reversed(cls.__mro__):
        for s in getattr(c, "__slots__", ()):
            if s not in out:
                out.append(s)
    return tuple(out)


_SLOTS: dict[type, tuple[str, ...]] = {}


def rebuild(node: Node, **changes) -> Node:
    """A copy of ``node`` with some fields replaced (dtype and others kept)."""
    cls = type(node)
    slots = _SLOTS.get(cls)
    if slots is None:
        slots = _SLOTS[cls] = _all_slots(cls)
    new = object.__new__(cls)
    for s in slots:
        object.__setattr__(new, s, changes[s] if s in changes else getattr(node, s))
    return new


def _leave(node):
    """What a visitor does with a value that holds no IR: nothing (a mutator keeps it)."""
    return node


class Visitor:
    """Walks every node once in pre-order; override ``visit_<Class>`` to act on some."""

    def __init__(self):
        # type -> what visiting a value of that type calls; the one lookup per node
        self._dispatch: dict[type, Callable] = {}

    def visit(self, node) -> None:
        fn = self._dispatch.get(type(node))
        if fn is None:
            fn = self._dispatch[type(node)] = self._visit_fn(type(node))
        fn(node)

    def _visit_fn(self, cls: type) -> Callable:
        if issubclass(cls, tuple | list):
            return self._visit_seq
        if not issubclass(cls, Node) or issubclass(cls, _OPAQUE):
            return _leave
        return getattr(self, "visit_" + cls.__name__, None) or self.generic_visit

    def _visit_seq(self, seq: tuple | list) -> None:
        for x in seq:
            self.visit(x)

    def generic_visit(self, node: Node) -> None:
        visit = self.visit
        for f in node._fields:
            v = getattr(node, f)
            if isinstance(v, _VISITED):
                visit(v)


class Mutator:
    """Rebuilds the tree bottom-up; override ``visit_<Class>`` to rewrite some nodes."""

    def __init__(self):
        # type -> what visiting a value of that type calls; the one lookup per node
        self._dispatch: dict[type, Callable] = {}

    def visit(self, node):
        fn = self._dispatch.get(type(node))
        if fn is None:
            fn = self._dispatch[type(node)] = self._visit_fn(type(node))
        return fn(node)

    def _visit_fn(self, cls: type) -> Callable:
        if issubclass(cls, tuple):
            return self._visit_tuple
        if not issubclass(cls, Node) or issubclass(cls, _OPAQUE):
            return _leave
        return getattr(self, "visit_" + cls.__name__, None) or self.generic_visit

    def _visit_tuple(self, t: tuple) -> tuple:
        out = tuple(self.visit(x) for x in t)
        return t if all(a is b for a, b in zip(out, t, strict=True)) else out

    def generic_visit(self, node: Node):
        changes = {}
        for f in node._fields:
            v = getattr(node, f)
            if isinstance(v, _MUTATED):
                nv = self.visit(v)
                if nv is not v:
                    changes[f] = nv
        return rebuild(node, **changes) if changes else node


class _Substituter(Mutator):
    def __init__(self, vmap):
        super().__init__()
        self.vmap = vmap

    def visit_Var(self, v):
        return self.vmap.get(v, v)

    visit_SizeVar = visit_Var


def substitute(node, vmap: dict[Var, PrimExpr]):
    """Replace variables by expressions everywhere in ``node``."""
    if not vmap:
        return node
    return _Substituter(vmap).visit(node)


def post_order_visit(node, fn: Callable[[Node], None]) -> None:
    """Call ``fn`` on every node under ``node``, children first: the nodes a
    :class:`Visitor` walks, in its order (a node reached twice is called twice). One
    function call per node, not a visitor's dispatch (the lowering passes call this on
    every expression they collect variables or reads from)."""
    def walk(n) -> None:
        if isinstance(n, _SEQUENCES):
            for x in n:
                walk(x)
        elif isinstance(n, Node) and not isinstance(n, _OPAQUE):
            for f in n._fields:
                v = getattr(n, f)
                if isinstance(v, _VISITED):
                    walk(v)
            fn(n)

    walk(node)


def collect_vars(node) -> set[Var]:
    """Every Var used in ``node``."""
    found: set[Var] = set()

    def f(n):
        if isinstance(n, Var):
            found.add(n)

    post_order_visit(node, f)
    return found


def defined_vars(stmt) -> set[Var]:
    """Variables a statement defines itself: loop variables, lets, allocations, threads."""
    out: set[Var] = set()

    def visit(n):
        if isinstance(n, For):
            out.add(n.loop_var)
        elif isinstance(n, LetStmt):
            out.add(n.var)
        elif isinstance(n, Allocate):
            out.add(n.buffer_var)
        elif isinstance(n, AttrStmt) and n.attr_key == "thread_extent":
            out.add(n.node.var)

    post_order_visit(stmt, visit)
    return out


def uses_var(node, pred: Callable[[Var], bool]) -> bool:
    return any(pred(v) for v in collect_vars(node))


def is_pure_expr(e: PrimExpr) -> bool:
    return isinstance(e, PrimExpr)
