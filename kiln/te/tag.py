"""``te.tag_scope``: a default tag for the operations declared inside it.

As in TVM, ``with te.tag_scope("elemwise"):`` (or ``@te.tag_scope(tag="elemwise")`` on a
function that declares operations) gives every ``te.compute`` and ``te.extern`` made inside
it that tag; naming another tag there as well is an error, scopes do not nest, and a scope
whose tag no operation took warns when it closes (unless an exception closes it). The
current scope is per thread.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable

_local = threading.local()


class TagScope:
    """The scope of one tag (``te.tag_scope(tag)``): a context manager and a decorator."""

    def __init__(self, tag: str):
        self.tag = tag
        self.accessed = False

    def __enter__(self) -> TagScope:
        if current() is not None:
            raise ValueError(f"te.tag_scope('{self.tag}'): tag scopes do not nest (inside "
                             f"te.tag_scope('{current().tag}'))")
        self.accessed = False
        _local.scope = self
        return self

    def __exit__(self, exc_type, *exc) -> None:
        _local.scope = None
        if exc_type is None and not self.accessed:
            warnings.warn(f"Tag '{self.tag}' declared via TagScope was not used.", stacklevel=2)

    def __call__(self, fdecl: Callable) -> Callable:
        @functools.wraps(fdecl)
        def tagged(*args, **kwargs):
            with self:
                return fdecl(*args, **kwargs)

        return tagged


def tag_scope(tag: str) -> TagScope:
    """The scope giving ``tag`` to the operations declared inside it (``te.tag_scope``)."""
    return TagScope(tag)


def current() -> TagScope | None:
    """This thread's open tag scope, if any."""
    return getattr(_local, "scope", None)


def scoped_tag(tag: str, primitive: str) -> str:
    """The tag of an operation being declared: ``tag``, or the open scope's when ``tag`` is
    empty; both at once is an error, as in TVM."""
    scope = current()
    if scope is None:
        return tag
    if tag:
        raise ValueError(f"{primitive}: tag '{tag}' given inside te.tag_scope('{scope.tag}'); "
                         f"nested tags are not allowed")
    scope.accessed = True
    return scope.tag


__all__ = ["TagScope", "tag_scope"]
