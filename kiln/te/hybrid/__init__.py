"""Hybrid script (``te.hybrid.script``): operators written as Python loops.

A function decorated with ``@te.hybrid.script`` is two things, as in TVM:

- called with numpy arrays (and numbers), it runs as plain Python (``runtime``): loops are
  ``range``, ``output_tensor`` / ``allocate`` give numpy arrays, intrinsics are numpy's;
- called with te Tensors (and numbers or ``te.var`` scalars), its source is parsed into loop
  IR (``parser``) and it returns the output Tensor(s) of a ``HybridOp`` (``operation``): a
  stage of a schedule whose loops (``op.axis``) take ``split``, ``fuse``, ``reorder``,
  ``parallel``, ``vectorize``, ``unroll`` and ``bind`` (``loop_schedule``), and whose
  outputs other operations (``te.compute``) may read.

See docs/hybrid.md for the language.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from kiln.ir.expr import PrimExpr

from ..tensor import Tensor
from .operation import HybridOp
from .parser import parse_to_op
from .runtime import run_in_python


def script(pyfunc: Callable) -> Callable:
    """Decorate a hybrid-script function: run it on numpy arrays, or build a ``HybridOp``
    from it when it is called with te Tensors."""

    @functools.wraps(pyfunc)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if any(isinstance(a, Tensor | PrimExpr) for a in (*args, *kwargs.values())):
            if kwargs:
                raise TypeError(f"hybrid function '{pyfunc.__name__}': pass tensors and "
                                f"scalars positionally")
            return parse_to_op(pyfunc, *_syntax_tree(pyfunc), args, _free_constants(pyfunc))
        return run_in_python(pyfunc, args, kwargs)

    return wrapped


def _syntax_tree(func: Callable) -> tuple[ast.FunctionDef, int]:
    """``func``'s definition (decorators dropped) and the line it starts on in its file."""
    lines, first_line = inspect.getsourcelines(func)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        raise TypeError(f"te.hybrid.script decorates a function definition, not "
                        f"{type(definition).__name__}")
    return definition, first_line


def _free_constants(func: Callable) -> dict[str, Any]:
    """The values of the names ``func`` reads from its closure and module globals."""
    free = inspect.getclosurevars(func)
    return {**free.globals, **free.nonlocals}


__all__ = ["script", "HybridOp"]
