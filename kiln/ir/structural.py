"""Structural equality and hashing of IR trees (variables compare by identity)."""

from __future__ import annotations

from .expr import Node, Var


def structural_equal(a, b, map_free_vars: bool = False) -> bool:
    """True when ``a`` and ``b`` are the same tree; with ``map_free_vars`` variables may be
    renamed consistently (a bijection is built on first meeting)."""
    return _eq(a, b, {} if map_free_vars else None)


def _eq(a, b, vmap) -> bool:
    if a is b:
        return True
    if isinstance(a, Var) and isinstance(b, Var):
        if vmap is None:
            return False
        if a in vmap:
            return vmap[a] is b
        if a.dtype != b.dtype:
            return False
        vmap[a] = b
        return True
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_eq(x, y, vmap) for x, y in zip(a, b, strict=True))
    if not isinstance(a, Node) or not isinstance(b, Node):
        return a == b if not (isinstance(a, Node) or isinstance(b, Node)) else False
    if type(a) is not type(b) or getattr(a, "dtype", None) != getattr(b, "dtype", None):
        return False
    return all(_eq(getattr(a, f), getattr(b, f), vmap) for f in a._fields)


def structural_hash(a) -> int:
    """A hash consistent with ``structural_equal`` (without free-variable mapping)."""
    if isinstance(a, Var):
        return id(a)
    if isinstance(a, tuple | list):
        return hash(tuple(structural_hash(x) for x in a))
    if isinstance(a, Node):
        return hash((type(a).__name__, getattr(a, "dtype", None),
                     tuple(structural_hash(getattr(a, f)) for f in a._fields)))
    try:
        return hash(a)
    except TypeError:
        return id(a)
