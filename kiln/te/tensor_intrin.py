"""Tensor intrinsics: ``te.decl_tensor_intrin`` and ``TensorIntrin``.

A tensor intrinsic pairs a small computation (a ``te.compute`` over placeholders: what the
hardware instruction or hand-written kernel computes) with the statement that performs it
on buffers (usually one ``tir.call_extern`` of a C micro-kernel). ``s[T].tensorize(axis,
intrin)`` (kiln/te/tensorize.py) replaces the loops of ``T`` from ``axis`` inward by that
statement once their body matches the computation. Guarantees, as in classic TVM:

* one buffer per input and output of the computation, in that order (inputs first): the
  buffer given in ``binds``, else ``tir.decl_buffer(t.shape, t.dtype, t.op.name,
  **default_buffer_params)``; symbolic strides and ``elem_offset`` are bound where the
  intrinsic is used;
* ``intrin_func(ins, outs)`` returns a statement (or an expression, evaluated for its
  effect), or the triple ``(body, reduce_reset, reduce_update)`` for reductions: ``body``
  computes the whole result, ``reduce_reset`` sets the output to the reduction's identity,
  ``reduce_update`` accumulates into it (either of the three may be None);
* the inputs of the computation are placeholders (an intrinsic of a composed computation
  raises ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.ir.expr import PrimExpr
from kiln.ir.stmt import Buffer, Evaluate, Stmt, decl_buffer

from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """A computation and the statements that perform it (TVM's ``TensorIntrin``)."""

    name: str
    op: ComputeOp
    inputs: tuple[Tensor, ...]
    buffers: tuple[Buffer, ...]  # one per input, then one per output
    body: Stmt | None
    reduce_init: Stmt | None
    reduce_update: Stmt | None

    @property
    def input_buffers(self) -> tuple[Buffer, ...]:
        return self.buffers[:len(self.inputs)]

    @property
    def output_buffers(self) -> tuple[Buffer, ...]:
        return self.buffers[len(self.inputs):]

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def decl_tensor_intrin(op: Operation, intrin_func: Callable, name: str = "tensor_intrin",
                       binds: dict | None = None, scalar_params=None,
                       default_buffer_params: dict | None = None) -> TensorIntrin:
    """Declare a tensor intrinsic (``te.decl_tensor_intrin``): ``op`` is the computation
    (a ``te.compute``'s ``.op``), ``intrin_func(ins, outs)`` builds its statements over one
    Buffer per input and output (module docstring)."""
    if not isinstance(op, ComputeOp):
        raise TypeError(f"decl_tensor_intrin '{name}': op must be a te.compute operation "
                        f"(C.op), got {type(op).__name__}")
    if scalar_params:
        raise NotImplementedError(
            f"decl_tensor_intrin '{name}': scalar_params (used by tensor-intrinsic calls "
            f"inside te.compute) are not supported; tensorize binds no scalars")
    inputs = tuple(op.input_tensors)
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise ValueError(f"decl_tensor_intrin '{name}': input '{t.name}' is computed by "
                             f"'{t.op.name}'; the inputs of an intrinsic must be placeholders")
    binds = binds or {}
    params = default_buffer_params or {}
    buffers = tuple(binds[t] if t in binds else
                    decl_buffer(t.shape, t.dtype, t.op.name, **params)
                    for t in (*inputs, *op.outputs))
    n = len(inputs)
    result = intrin_func(list(buffers[:n]), list(buffers[n:]))
    body, reset, update = _three_statements(result, name)
    return TensorIntrin(name, op, inputs, buffers, body, reset, update)


def _three_statements(result, name: str) -> tuple[Stmt | None, Stmt | None, Stmt | None]:
    """``intrin_func``'s result as (body, reduce_init, reduce_update)."""
    parts = list(result) if isinstance(result, list | tuple) else [result]
    if len(parts) not in (1, 3):
        raise ValueError(f"decl_tensor_intrin '{name}': intrin_func must return a statement "
                         f"or (body, reduce_reset, reduce_update), got {len(parts)} values")
    parts += [None] * (3 - len(parts))
    out = []
    for part in parts:
        if isinstance(part, PrimExpr):
            part = Evaluate(part)
        if part is not None and not isinstance(part, Stmt):
            raise TypeError(f"decl_tensor_intrin '{name}': intrin_func returned "
                            f"{type(part).__name__}, not a statement or an expression")
        out.append(part)
    return out[0], out[1], out[2]


__all__ = ["TensorIntrin", "decl_tensor_intrin"]
