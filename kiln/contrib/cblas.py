"""``tvm.contrib.cblas``: matrix products as extern operations that call a BLAS.

``matmul(lhs, rhs, transa, transb)`` and ``batch_matmul(...)`` return the tensor of a
``te.extern`` whose body is ``tvm.tir.call_packed("tvm.contrib.cblas.matmul", A, B, C,
transa, transb)``, as in classic TVM; the stage can be read by any ``te.compute``.
kiln links no C BLAS: the packed functions, registered when this module is imported, call
numpy's ``matmul`` (which runs numpy's BLAS) on the buffers the compiled code passes. The
functions are those of this process: a module exported and loaded elsewhere needs
``kiln.contrib.cblas`` imported there too (as TVM's needs a runtime built with cblas).
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.runtime.ndarray import NDArray
from kiln.runtime.registry import register_func

__all__ = ["matmul", "batch_matmul"]

MATMUL = "tvm.contrib.cblas.matmul"
BATCH_MATMUL = "tvm.contrib.cblas.batch_matmul"
BATCH_MATMUL_ITERATIVE = "tvm.contrib.cblas.batch_matmul_iterative"


def matmul(lhs: te.Tensor, rhs: te.Tensor, transa: bool = False, transb: bool = False,
           **kwargs) -> te.Tensor:
    """``C = op(lhs) @ op(rhs)`` where ``op`` transposes when ``transa`` / ``transb``;
    ``kwargs`` go to ``te.extern`` (``name`` defaults to ``"C"``, ``dtype`` to the inputs')."""
    n = lhs.shape[1] if transa else lhs.shape[0]
    m = rhs.shape[0] if transb else rhs.shape[1]
    return _extern(MATMUL, (n, m), lhs, rhs, transa, transb, kwargs)


def batch_matmul(lhs: te.Tensor, rhs: te.Tensor, transa: bool = False, transb: bool = False,
                 iterative: bool = False, **kwargs) -> te.Tensor:
    """``C[b] = op(lhs[b]) @ op(rhs[b])`` over the batch (a batch of 1 broadcasts); TVM's
    ``iterative`` variant (one GEMM per batch) computes the same."""
    batch = te.max(lhs.shape[0], rhs.shape[0])
    n = lhs.shape[2] if transa else lhs.shape[1]
    m = rhs.shape[1] if transb else rhs.shape[2]
    func = BATCH_MATMUL_ITERATIVE if iterative else BATCH_MATMUL
    return _extern(func, (batch, n, m), lhs, rhs, transa, transb, kwargs)


def _extern(func: str, shape: tuple, lhs: te.Tensor, rhs: te.Tensor, transa: bool,
            transb: bool, kwargs: dict) -> te.Tensor:
    kwargs.setdefault("name", "C")
    return te.extern(shape, [lhs, rhs], lambda ins, outs: tir.call_packed(
        func, ins[0], ins[1], outs[0], bool(transa), bool(transb)), **kwargs)


def _product(a: NDArray, b: NDArray, c: NDArray, transa: int, transb: int) -> None:
    """The packed function: ``c = op(a) @ op(b)`` over the last two axes, by numpy."""
    x, y = a.numpy(), b.numpy()
    if transa:
        x = np.swapaxes(x, -1, -2)
    if transb:
        y = np.swapaxes(y, -1, -2)
    c.copyfrom(np.matmul(x, y).astype(c.dtype, copy=False))


for _name in (MATMUL, BATCH_MATMUL, BATCH_MATMUL_ITERATIVE):
    register_func(_name, _product, override=True)
