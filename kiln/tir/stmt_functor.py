"""TVM's ``tvm.tir.stmt_functor``: visit and rewrite loop IR with Python callbacks.

``post_order_visit(stmt, f)`` calls ``f`` on every node, children first. ``pre_order_visit
(stmt, f)`` calls it parents first and skips a node's children when ``f`` returns False.
``ir_transform(stmt, preorder, postorder, only_enable)`` rebuilds the tree as in TVM:
``preorder(node)`` runs before the children and, when it returns a node, replaces the whole
subtree; otherwise the children are transformed and then ``postorder(node)`` may return a
replacement. ``only_enable`` restricts the callbacks to nodes of the given type keys (TVM's
names: ``"tir.For"``, ``"tir.Store"``, ``"tir.Add"``, ``"IntImm"`` ...; the bare class name
works too). ``substitute(node, {var: expr})`` replaces variables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kiln.ir.expr import Node
from kiln.ir.functor import Mutator, Visitor, post_order_visit, substitute


def type_key(node: Node) -> str:
    """TVM's type key of ``node``: ``"tir.For"``, ``"tir.Add"``, ``"IntImm"`` ..."""
    return node.type_key()


def _enabled(only_enable: Iterable[str] | None) -> Callable[[Node], bool]:
    if only_enable is None:
        return lambda node: True
    keys = set(only_enable)
    return lambda node: type_key(node) in keys or type(node).__name__ in keys


class _Transformer(Mutator):
    def __init__(self, preorder, postorder, enabled):
        super().__init__()
        self.preorder, self.postorder, self.enabled = preorder, postorder, enabled

    def visit(self, node):
        if not isinstance(node, Node) or isinstance(node, tuple):
            return super().visit(node)
        on = self.enabled(node)
        if on and self.preorder is not None:
            out = self.preorder(node)
            if out is not None:
                return out
        new = super().visit(node)
        if on and self.postorder is not None:
            out = self.postorder(new)
            if out is not None:
                return out
        return new


def ir_transform(stmt, preorder: Callable | None, postorder: Callable | None,
                 only_enable: Iterable[str] | None = None):
    """``stmt`` rebuilt with the callbacks' replacements (module docstring)."""
    return _Transformer(preorder, postorder, _enabled(only_enable)).visit(stmt)


class _PreOrder(Visitor):
    def __init__(self, fvisit):
        super().__init__()
        self.fvisit = fvisit

    def visit(self, node) -> None:
        if isinstance(node, Node) and self.fvisit(node) is False:
            return
        super().visit(node)


def pre_order_visit(stmt, fvisit: Callable[[Node], bool | None]) -> None:
    """Call ``fvisit`` on every node, parents first; a False result skips the children."""
    _PreOrder(fvisit).visit(stmt)


__all__ = ["ir_transform", "post_order_visit", "pre_order_visit", "substitute", "type_key"]
