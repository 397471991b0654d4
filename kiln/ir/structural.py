"""Structural equality and hashing of IR trees, as TVM's ``tvm.ir.structural_equal``.

Two trees are equal when they have the same node types, dtypes and fields. Variables are
compared up to renaming where they are *defined* (a loop variable, a ``let`` variable, an
allocated buffer, a thread binding, a PrimFunc's parameters and the shape variables of its
buffers; names of buffers are hints and not compared, operations in ``produce`` attributes
compare by name), so
``for (i, 0, n) A[i] = 0`` equals ``for (j, 0, n) A[j] = 0``. Variables used without a
definition in the tree (free variables) compare by identity, unless ``map_free_vars=True``
lets them map too. The map is one-to-one: ``i + j`` never equals ``x + x``.
"""

from __future__ import annotations

from .expr import IterVar, Let, Node, PrimExpr, Var
from .stmt import Allocate, AttrStmt, Buffer, For, LetStmt, PrimFunc

#: node type -> the field holding the variable it defines
_DEFINES = {For: "loop_var", LetStmt: "var", Let: "var", Allocate: "buffer_var"}
#: fields that are names for printing only, not compared (as in TVM)
_HINTS = {Buffer: ("name",)}


class _Equal:
    def __init__(self, map_free_vars: bool):
        self.map_free_vars = map_free_vars
        self.fwd: dict[Var, Var] = {}
        self.bwd: dict[Var, Var] = {}

    def var(self, a: Var, b: Var, define: bool = False) -> bool:
        if a in self.fwd or b in self.bwd:
            return self.fwd.get(a) is b
        if a is b:
            return True
        if not (define or self.map_free_vars) or a.dtype != b.dtype:
            return False
        self.fwd[a], self.bwd[b] = b, a
        return True

    def eq(self, a, b) -> bool:
        if isinstance(a, Var) and isinstance(b, Var):
            return self.var(a, b)
        if a is b:
            return True
        if isinstance(a, tuple | list) and isinstance(b, tuple | list):
            return len(a) == len(b) and all(self.eq(x, y) for x, y in zip(a, b, strict=True))
        if not isinstance(a, Node) or not isinstance(b, Node):
            return False if isinstance(a, Node) or isinstance(b, Node) else a == b
        if type(a) is not type(b) or getattr(a, "dtype", None) != getattr(b, "dtype", None):
            return False
        if isinstance(a, PrimFunc):
            return self.primfunc(a, b)
        if isinstance(a, AttrStmt) and not self.attr_node(a.node, b.node):
            return False
        field = _DEFINES.get(type(a))
        if field is not None and not self.var(getattr(a, field), getattr(b, field), True):
            return False
        hints = _HINTS.get(type(a), ())
        if isinstance(a, AttrStmt):
            hints = ("node",)
        return all(self.eq(getattr(a, f), getattr(b, f)) for f in a._fields if f not in hints)

    def attr_node(self, a, b) -> bool:
        """The subject of an ``attr`` statement: a thread's IterVar defines its variable, as
        does the buffer variable of a ``storage_scope``; an expression compares as usual; an
        operation (``produce``) by its name."""
        if isinstance(a, IterVar) and isinstance(b, IterVar):
            return (self.var(a.var, b.var, define=True) and a.thread_tag == b.thread_tag
                    and self.eq(a.dom, b.dom))
        if isinstance(a, Var) and isinstance(b, Var):  # the buffer of the allocate inside
            return self.var(a, b, define=True)
        if isinstance(a, PrimExpr) or isinstance(b, PrimExpr):
            return self.eq(a, b)
        return getattr(a, "name", None) == getattr(b, "name", None)  # also a loaded OperationRef

    def primfunc(self, a: PrimFunc, b: PrimFunc) -> bool:
        if a.name != b.name or len(a.params) != len(b.params):
            return False
        for pa, pb in zip(a.params, b.params, strict=True):
            if not self.var(pa, pb, define=True):
                return False
            ba, bb = a.buffer_map.get(pa), b.buffer_map.get(pb)
            if (ba is None) != (bb is None):
                return False
            if ba is not None and not self.buffer_definition(ba, bb):
                return False
        return self.eq(a.body, b.body) and a.attrs == b.attrs

    def buffer_definition(self, a, b) -> bool:
        for x, y in zip(a.shape, b.shape, strict=False):
            if isinstance(x, Var) and isinstance(y, Var):
                self.var(x, y, define=True)
        return self.eq(a, b)


def structural_equal(a, b, map_free_vars: bool = False) -> bool:
    """True when ``a`` and ``b`` are the same tree up to renaming of defined variables (and of
    free ones with ``map_free_vars``); see the module docstring."""
    return _Equal(map_free_vars).eq(a, b)


def assert_structural_equal(lhs, rhs, map_free_vars: bool = False) -> None:
    """Raise ``ValueError`` showing both trees when they are not structurally equal."""
    if not structural_equal(lhs, rhs, map_free_vars):
        from .printer import to_text

        raise ValueError(f"StructuralEqual check failed:\nlhs:\n{to_text(lhs)}\n"
                         f"rhs:\n{to_text(rhs)}")


def structural_hash(a) -> int:
    """A hash consistent with ``structural_equal``: structurally equal trees hash alike
    (variables hash by dtype only, since defined ones compare up to renaming)."""
    if isinstance(a, Var):
        return hash(("Var", a.dtype))
    if isinstance(a, tuple | list):
        return hash(tuple(structural_hash(x) for x in a))
    if isinstance(a, dict):  # a PrimFunc's buffer_map and attrs
        return hash(tuple(sorted((structural_hash(k), structural_hash(v))
                                 for k, v in a.items())))
    if isinstance(a, Node):
        hints = ("node",) if isinstance(a, AttrStmt) else _HINTS.get(type(a), ())
        return hash((type(a).__name__, getattr(a, "dtype", None),
                     tuple(structural_hash(getattr(a, f)) for f in a._fields
                           if f not in hints)))
    try:
        return hash(a)
    except TypeError:
        return id(a)
