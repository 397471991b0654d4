"""The dense Jacobian of a reduction with any reducer, differentiated as TVM does.

A reduction ``Y[y] = R_r g(y, r)`` whose reducer is not sum, max or min (a product, a tuple
reducer such as argmax) is run together with its own derivative. Each value ``l_i`` of the
reducer gets a derivative slot ``dl_i``, and the new reducer combines

    (dl, l) (+) (dr, r) = (sum_i dl_i * df/dl_i + dr_i * df/dr_i,  f(l, r))

over the sources ``(dg/dX[x], g)``. Run for every output element ``y`` and input element
``x``, it gives the Jacobian ``J[y, x]`` (the compute ``<Y>_jacobian_<X>``), and the adjoint
is the contraction ``adj_X[p, x] = sum_y adj_Y[p, y] * J[y, x]``: correct for every reducer,
but dense, at a cost of ``|Y| * |X| * |r|``.
"""

from __future__ import annotations

import functools
import operator

from kiln.ir import expr as E
from kiln.ir.functor import substitute
from kiln.ir.op import cast, compare, make_const
from kiln.tir.op import all as all_of

from ..operation import compute, reduce_axis
from ..operation import sum as reduce_sum
from ..tensor import Tensor
from .derivative import derivative, is_zero, loads_as_vars

__all__ = ["reduction_vjp"]


def reduction_vjp(consumer: Tensor, adjoint: Tensor, tensor: Tensor) -> Tensor:
    """The adjoint that the reduction ``consumer`` sends to ``tensor`` given its own
    ``adjoint`` (shape ``prefix + consumer.shape``), through the dense Jacobian."""
    return _contract(adjoint, _jacobian(consumer, tensor), consumer, tensor)


def _sum_terms(terms: list[E.PrimExpr], dtype: str) -> E.PrimExpr:
    return functools.reduce(operator.add, terms) if terms else make_const(0, dtype)


def _derivative_reducer(combiner: E.CommReducer) -> E.CommReducer:
    """The reducer of ``(derivatives..., values...)`` pairs (see the module docstring)."""
    dlhs = [E.Var(f"{v.name}_jac", v.dtype) for v in combiner.lhs]
    drhs = [E.Var(f"{v.name}_jac", v.dtype) for v in combiner.rhs]
    slots = list(zip(dlhs + drhs, combiner.lhs + combiner.rhs, strict=True))
    derivatives = []
    for result in combiner.result:
        partials = [(d, derivative(result, v)) for d, v in slots]
        derivatives.append(_sum_terms([d * p for d, p in partials if not is_zero(p)],
                                      result.dtype))
    zeros = [make_const(0, e.dtype) for e in combiner.identity_element]
    return E.CommReducer(dlhs + list(combiner.lhs), drhs + list(combiner.rhs),
                         derivatives + list(combiner.result),
                         zeros + list(combiner.identity_element))


def _source_derivative(source: E.PrimExpr, tensor: Tensor, x: tuple) -> E.PrimExpr:
    """``d source / d tensor[x]``: each load's derivative where that load reads ``x``."""
    value, loads = loads_as_vars(source, tensor)
    back = {v: E.ProducerLoad(tensor, idx) for v, idx in loads}
    terms = []
    for var, indices in loads:
        local = derivative(value, var)
        if not is_zero(local):
            reads_x = all_of(*[compare(E.EQ, i, xi) for i, xi in zip(indices, x, strict=True)])
            terms.append(E.Select(reads_x, substitute(local, back),
                                  make_const(0, source.dtype)))
    return _sum_terms(terms, source.dtype)


def _jacobian(consumer: Tensor, tensor: Tensor) -> Tensor:
    """``J[y, x] = d consumer[y] / d tensor[x]``, a reduction with the derivative reducer."""
    op = consumer.op
    body = op.body[consumer.value_index]
    reducer = _derivative_reducer(body.combiner)

    def fcompute(*index):
        y, x = index[:len(op.axis)], index[len(op.axis):]
        axes = [reduce_axis(iv.dom, iv.var.name) for iv in body.axis]
        vmap = {iv.var: v for iv, v in zip(op.axis, y, strict=True)}
        vmap.update({old.var: new.var for old, new in zip(body.axis, axes, strict=True)})
        sources = [_source_derivative(s, tensor, x) for s in body.source] + list(body.source)
        sources = [substitute(s, vmap) for s in sources]
        condition = substitute(body.condition, vmap)
        return tuple(E.Reduce(reducer, sources, axes, condition, k)
                     for k in range(len(sources)))

    outputs = compute((*consumer.shape, *tensor.shape), fcompute,
                      name=f"{op.name}_jacobian_{tensor.op.name}")
    return outputs[consumer.value_index]


def _contract(adjoint: Tensor, jacobian: Tensor, consumer: Tensor, tensor: Tensor) -> Tensor:
    """``adj[p, x] = sum_y adjoint[p, y] * jacobian[y, x]``."""
    prefix_ndim = len(adjoint.shape) - len(consumer.shape)

    def fcompute(*index):
        p, x = index[:prefix_ndim], index[prefix_ndim:]
        axes = [reduce_axis(iv.dom, f"{iv.var.name}_r") for iv in consumer.op.axis]
        y = tuple(a.var for a in axes)
        value = cast(adjoint[(*p, *y)] * jacobian[(*y, *x)], adjoint.dtype)
        return reduce_sum(value, axis=axes) if axes else value

    return compute((*adjoint.shape[:prefix_ndim], *tensor.shape), fcompute,
                   name=f"{tensor.op.name}_grad_{consumer.op.name}")
