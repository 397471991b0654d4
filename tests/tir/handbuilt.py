"""Helpers for the pass tests: hand-built loop programs as PrimFuncs, run through the C backend.

A pass test builds its input IR from ``kiln.ir.stmt`` nodes over flat buffers (``Load`` /
``Store``), applies the pass directly, and checks the printed result against a golden file;
``run`` compiles a function with ``kiln.build`` and executes it on numpy arrays, so a test can
check that the pass kept the program's meaning.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import post_order_visit


def loop(var: E.Var, extent, body: S.Stmt, kind: S.ForKind = S.ForKind.SERIAL,
         lo=0) -> S.For:
    """``for (var, lo, extent) body``."""
    return S.For(var, lo, extent, kind, body)


def function(body: S.Stmt, *buffers: S.Buffer, name: str = "main") -> S.PrimFunc:
    """A PrimFunc taking ``buffers`` (in order) and running ``body``."""
    return S.PrimFunc([b.data for b in buffers], {b.data: b for b in buffers}, body, name)


def run(func: S.PrimFunc, *arrays: np.ndarray) -> list[np.ndarray]:
    """Build ``func`` for the CPU, call it on copies of ``arrays`` (one per parameter) and
    return them all after the call."""
    args = [kiln.nd.array(np.array(a)) for a in arrays]
    kiln.build(func)(*args)
    return [a.numpy() for a in args]


def find(node, cls: type) -> list:
    """Every node of class ``cls`` under ``node``."""
    found: list = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found
