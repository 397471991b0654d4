"""The vector-Jacobian product of one compute stage: the adjoint it sends back to one input.

A stage ``Y[y] = sum_r g(y, r)`` (a body without reduction is a sum over no ``r``) that reads
the tensor X at the distinct indices ``f_1 .. f_K`` contributes

    adj_X[p, x] = sum_k  sum_{(y, r) : f_k(y, r) == x}  adj_Y[p, y] * dg/dX[f_k](y, r)

to X's adjoint, where ``p`` are the leading axes of the head (the Jacobian's output axes
when the head is the identity). Each load's term is one compute in *gather* form:
:mod:`.index_solve` eliminates the loop variables that ``f_k(y, r) == x`` determines, so an
elementwise read gives an elementwise adjoint, a broadcast read a sum over the broadcast
axes, a matmul a matmul and a strided conv2d a transposed convolution. Indices it cannot
invert (``i // 2``) stay summed over with an equality condition: the dense Jacobian form,
correct but slower.

A max (min) reduction passes the adjoint only to the point it selected: the first maximum in
iteration order, as TVM's derivative of ``max(lhs, rhs)`` is ``select(lhs >= rhs, dlhs,
drhs)``. A second compute records each output's selected point (an argmax over the reduce
axes, named ``<Y>_argmax``), and every term is masked by it. Other reducers (a product,
tuple reducers) take the dense route of :mod:`.jacobian`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.ir import expr as E
from kiln.ir.functor import substitute
from kiln.ir.op import cast, compare, make_const, max_value, min_value
from kiln.tir.op import all as all_of
from kiln.tir.op import if_then_else

from ..operation import comm_reducer, compute, reduce_axis
from ..operation import sum as reduce_sum
from ..tensor import ComputeOp, Tensor
from .derivative import derivative, is_zero, loads_as_vars
from .index_solve import solve_indices
from .jacobian import reduction_vjp

__all__ = ["vector_jacobian_products"]


@dataclass
class _Summation:
    """A stage's value at ``y`` as a sum of ``value`` over the points of ``reduce_axes``
    where ``condition`` holds; ``selected`` (max/min reductions) is the argmax tensor that
    says which single point receives the adjoint."""

    value: E.PrimExpr
    reduce_axes: list[E.IterVar]
    condition: E.PrimExpr
    selected: Tensor | None = None


def vector_jacobian_products(consumer: Tensor, adjoint: Tensor,
                             tensors: list[Tensor]) -> dict[Tensor, list[Tensor]]:
    """The terms that ``consumer`` (an output of a ComputeOp) adds to the adjoint of each of
    ``tensors`` (tensors it reads), given ``consumer``'s own ``adjoint`` of shape ``prefix +
    consumer.shape``. A tensor's terms have shape ``prefix + tensor.shape`` and
    ``adjoint``'s dtype; their sum is its vector-Jacobian product."""
    op = consumer.op
    if not isinstance(op, ComputeOp):
        raise NotImplementedError(
            f"te.gradient: cannot differentiate through {type(op).__name__} '{op.name}' "
            f"(only compute operations)")
    body = op.body[consumer.value_index]
    if isinstance(body, E.Reduce) and body.init:
        raise NotImplementedError(
            f"te.gradient: the reduction of '{op.name}' has an init value; only reductions "
            f"starting from their reducer's identity are differentiated")
    if isinstance(body, E.Reduce) and _reducer_kind(body.combiner) is None:
        return {t: [reduction_vjp(consumer, adjoint, t)] for t in tensors}
    summation = _summation(consumer)
    return {t: _tensor_terms(consumer, adjoint, summation, t) for t in tensors}


def _tensor_terms(consumer: Tensor, adjoint: Tensor, summation: _Summation,
                  tensor: Tensor) -> list[Tensor]:
    """One gather term per distinct load of ``tensor`` whose derivative is not zero."""
    value, loads = loads_as_vars(summation.value, tensor)
    terms = []
    for var, indices in loads:
        local = derivative(value, var)
        if is_zero(local):
            continue
        local = substitute(local, {v: E.ProducerLoad(tensor, idx) for v, idx in loads})
        if summation.selected is not None:
            local = _masked(local, summation, consumer.op)
        name = f"{tensor.op.name}_grad_{consumer.op.name}" + (f"_{len(terms)}" if terms else "")
        terms.append(_gather(consumer, adjoint, summation, indices, local, tensor, name))
    return terms


def _summation(consumer: Tensor) -> _Summation:
    """``consumer``'s body read as a summation (a sum, max or min reduction, or none)."""
    op = consumer.op
    body = op.body[consumer.value_index]
    if not isinstance(body, E.Reduce):
        return _Summation(body, [], make_const(True, "bool"))
    summation = _Summation(body.source[0], list(body.axis), body.condition)
    kind = _reducer_kind(body.combiner)
    if kind != "sum":
        summation.selected = _selected_point(consumer, body, kind)
    return summation


def _reducer_kind(combiner: E.CommReducer) -> str | None:
    """``"sum"``, ``"max"`` or ``"min"`` for those reducers of one value, else None."""
    if len(combiner.result) != 1:
        return None
    (result,), (lhs,), (rhs,) = combiner.result, combiner.lhs, combiner.rhs
    kinds = {E.Add: "sum", E.Max: "max", E.Min: "min"}
    kind = kinds.get(type(result))
    if kind is None or {id(result.a), id(result.b)} != {id(lhs), id(rhs)}:
        return None
    return kind


def _flat_position(axes: list[E.IterVar]) -> E.PrimExpr:
    """The row-major position of a point of ``axes`` (0 at the first point)."""
    position = make_const(0, "int32")
    for iv in axes:
        position = position * iv.dom.extent + (iv.var - iv.dom.min)
    return position


def _selected_point(consumer: Tensor, reduce: E.Reduce, kind: str) -> Tensor:
    """An int32 tensor of ``consumer``'s shape: the flat position over the reduce axes of
    the point a max (min) reduction selects, the first one on ties; -1 where no point
    satisfies the reduction's condition."""
    op = consumer.op
    better = (lambda a, b: a >= b) if kind == "max" else (lambda a, b: a <= b)
    worst = min_value if kind == "max" else max_value

    def combine(x, y):
        take_x = better(x[1], y[1])
        return E.Select(take_x, x[0], y[0]), E.Select(take_x, x[1], y[1])

    arg_reducer = comm_reducer(combine, lambda t0, t1: (make_const(-1, t0), worst(t1)),
                               name=f"arg{kind}")

    def fcompute(*y):
        axes = [reduce_axis(iv.dom, iv.var.name) for iv in reduce.axis]
        vmap = {iv.var: v for iv, v in zip(op.axis, y, strict=True)}
        vmap.update({old.var: new.var for old, new in zip(reduce.axis, axes, strict=True)})
        value = substitute(reduce.source[0], vmap)
        return arg_reducer((_flat_position(axes), value), axis=axes,
                           where=substitute(reduce.condition, vmap))

    position, _ = compute(consumer.shape, fcompute, name=f"{op.name}_arg{kind}")
    return position


def _masked(local: E.PrimExpr, summation: _Summation, op: ComputeOp) -> E.PrimExpr:
    """``local`` where the reduction point is the selected one, else 0."""
    selected = summation.selected[tuple(iv.var for iv in op.axis)]
    is_selected = compare(E.EQ, _flat_position(summation.reduce_axes), selected)
    return if_then_else(is_selected, local, make_const(0, local.dtype))


def _gather(consumer: Tensor, adjoint: Tensor, summation: _Summation,
            indices: tuple[E.PrimExpr, ...], local: E.PrimExpr, tensor: Tensor,
            name: str) -> Tensor:
    """The term ``adj[p, x] = sum over (y, r) with indices(y, r) == x of adj_Y[p, y] *
    local(y, r)``, summing only over the loop variables the equations leave free."""
    op = consumer.op
    domain = {iv.var: iv.dom for iv in list(op.axis) + summation.reduce_axes}
    prefix_ndim = len(adjoint.shape) - len(consumer.shape)

    def fcompute(*index):
        p, x = index[:prefix_ndim], index[prefix_ndim:]
        solution = solve_indices(list(indices), list(x), domain, list(tensor.shape))
        taken = {i.name for i in index}
        axes = {v: reduce_axis(dom, f"{v.name}_r" if v.name in taken else v.name)
                for v, dom in solution.free.items()}
        renamed = {v: iv.var for v, iv in axes.items()}
        vmap = {v: substitute(e, renamed) for v, e in solution.values.items()} | renamed
        y = tuple(vmap[iv.var] for iv in op.axis)
        value = cast(adjoint[(*p, *y)] * substitute(local, vmap), adjoint.dtype)
        conditions = [substitute(c, renamed) for c in solution.conditions]
        condition = all_of(*conditions, substitute(summation.condition, vmap))
        if axes:
            return reduce_sum(value, axis=list(axes.values()), where=condition)
        return if_then_else(condition, value, make_const(0, value.dtype))

    return compute((*adjoint.shape[:prefix_ndim], *tensor.shape), fcompute, name=name)
