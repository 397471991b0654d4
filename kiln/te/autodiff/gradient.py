"""``te.gradient``: reverse-mode automatic differentiation of tensor expressions.

``gradient(output, inputs, head)`` returns, for each input X, the tensor
``adj_X[p, x] = sum_o head[p, o] * d output[o] / d X[x]``: the vector-Jacobian product with
``head`` (shape ``prefix + output.shape``), or with ``head=None`` the identity, which makes
``adj_X`` the Jacobian (shape ``output.shape + X.shape``), as ``tvm.te.gradient``.

The adjoints are built backwards over the operation DAG: ``adj_output = head``, and the
adjoint of every tensor on a path from an input to ``output`` is the sum of the terms its
consumers send back (the chain rule; :mod:`.adjoint` builds one consumer's terms). An input
that ``output`` does not read gets zeros. Every result is an ordinary compute tensor:
schedule it with ``create_schedule([g.op for g in grads])`` and build it like any other.

    x = te.placeholder((n,), name="x"); y = te.compute((n,), lambda i: te.exp(x[i]))
    [dx] = te.gradient(y, [x], head)    # dx[i] = head[i] * exp(x[i])
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir.functor import post_order_visit
from kiln.ir.op import compare, make_const
from kiln.ir.structural import structural_equal
from kiln.tir.op import all as all_of

from ..operation import compute
from ..tensor import ComputeOp, Tensor
from .adjoint import vector_jacobian_products

__all__ = ["gradient"]


def gradient(output: Tensor, inputs: Tensor | Sequence[Tensor],
             head: Tensor | None = None) -> list[Tensor]:
    """The adjoint of each of ``inputs`` for ``output`` with the adjoint ``head`` (see the
    module docstring): one tensor per input, in order, of shape ``prefix + input.shape``
    where ``head.shape == prefix + output.shape`` (``prefix = output.shape`` when ``head``
    is None)."""
    inputs = _checked_inputs(output, inputs, head)
    head = _identity(output) if head is None else head
    prefix = tuple(head.shape[:len(head.shape) - output.ndim])
    order, on_path = _reverse_topological(output, inputs)
    adjoints: dict[Tensor, Tensor] = {}
    terms: dict[Tensor, list[Tensor]] = {t: [] for t in order}
    for tensor in order:  # each tensor's consumers come before it
        adjoints[tensor] = head if tensor == output else _sum(
            terms[tensor], (*prefix, *tensor.shape), head.dtype, f"{tensor.op.name}_grad")
        reads = [r for r in _reads(tensor) if on_path.get(r)]
        if reads:
            for read, read_terms in vector_jacobian_products(tensor, adjoints[tensor],
                                                             reads).items():
                terms[read].extend(read_terms)
    # an input that output does not read gets zeros (an empty sum)
    return [adjoints[x] if x in adjoints
            else _sum([], (*prefix, *x.shape), head.dtype, f"{x.op.name}_grad")
            for x in inputs]


def _checked_inputs(output, inputs, head) -> list[Tensor]:
    """``inputs`` as a list, after checking the arguments' kinds and shapes."""
    if not isinstance(output, Tensor):
        raise TypeError(f"te.gradient: output must be a te.Tensor, got {type(output).__name__}")
    if not dt.is_float(output.dtype):
        raise TypeError(f"te.gradient: output '{output.name}' has dtype {output.dtype}; only "
                        f"float tensors are differentiated")
    inputs = [inputs] if isinstance(inputs, Tensor) else inputs
    if not isinstance(inputs, list | tuple):
        raise TypeError(f"te.gradient: inputs must be a te.Tensor or a list of them, got "
                        f"{type(inputs).__name__}")
    for k, x in enumerate(inputs):
        if not isinstance(x, Tensor):
            raise TypeError(f"te.gradient: inputs[{k}] is a {type(x).__name__}, not a "
                            f"te.Tensor; differentiate with respect to a placeholder or a "
                            f"compute tensor")
    if head is not None:
        _check_head(output, head)
    return list(inputs)


def _check_head(output: Tensor, head) -> None:
    if not isinstance(head, Tensor):
        raise TypeError(f"te.gradient: head must be a te.Tensor or None, got "
                        f"{type(head).__name__}")
    tail = head.shape[len(head.shape) - output.ndim:] if output.ndim else []
    if len(head.shape) < output.ndim or not structural_equal(list(tail), list(output.shape)):
        raise ValueError(f"te.gradient: head has shape {head.shape}, which must end with the "
                         f"output's shape {output.shape}")


def _identity(output: Tensor) -> Tensor:
    """The identity of shape ``output.shape + output.shape`` (the head giving Jacobians)."""
    n = output.ndim

    def fcompute(*index):
        pairs = [compare(E.EQ, i, j) for i, j in zip(index[:n], index[n:], strict=True)]
        same = all_of(*pairs) if pairs else make_const(True, "bool")
        return E.Select(same, make_const(1, output.dtype), make_const(0, output.dtype))

    return compute((*output.shape, *output.shape), fcompute, name=f"{output.op.name}_identity")


def _reads(tensor: Tensor) -> list[Tensor]:
    """The tensors that ``tensor``'s own value reads."""
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return list(op.input_tensors)
    found: list[Tensor] = []

    def visit(node):
        if isinstance(node, E.ProducerLoad) and node.producer not in found:
            found.append(node.producer)

    post_order_visit(op.body[tensor.value_index], visit)
    return found


def _reverse_topological(output: Tensor, inputs: list[Tensor]):
    """The tensors on a path from an input to ``output`` (inputs included), each after all
    its consumers; and whether each tensor ``output`` reads is on such a path."""
    post_order: list[Tensor] = []
    on_path: dict[Tensor, bool] = {}
    stack: list[tuple[Tensor, bool]] = [(output, False)]
    while stack:
        tensor, reads_done = stack.pop()
        if reads_done:
            on_path[tensor] = tensor in inputs or any(on_path[r] for r in _reads(tensor))
            post_order.append(tensor)
        elif tensor not in on_path:
            on_path[tensor] = False
            stack.append((tensor, True))
            stack.extend((r, False) for r in _reads(tensor) if r not in on_path)
    return [t for t in reversed(post_order) if on_path[t]], on_path


def _sum(terms: list[Tensor], shape: tuple, dtype: str, name: str) -> Tensor:
    """The elementwise sum of ``terms``; zeros when there are none."""
    if len(terms) == 1:
        return terms[0]

    def fcompute(*index):
        values = [t[index] for t in terms]
        return functools.reduce(operator.add, values) if values else make_const(0, dtype)

    return compute(shape, fcompute, name=name)
