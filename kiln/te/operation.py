"""The tensor-expression language: placeholder, compute, var, reduce_axis and reducers."""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable

from kiln.errors import ComputeDefinitionError
from kiln.ir import dtype as dt
from kiln.ir.expr import CommReducer, IterVar, PrimExpr, Range, Reduce, SizeVar, Var
from kiln.ir.functor import post_order_visit
from kiln.ir.op import (
    convert,
    emax,
    emin,
    index_dtype,
    make_const,
    match_types,
    max_value,
    min_value,
)

from .tag import scoped_tag
from .tensor import ComputeOp, PlaceholderOp, Tensor


def var(name: str = "tindex", dtype: str = "int32") -> Var:
    """A symbolic scalar variable (``te.var``), e.g. an unknown shape dimension."""
    return Var(name, dtype)


def size_var(name: str = "size", dtype: str = "int32") -> SizeVar:
    """A symbolic variable known to be non-negative."""
    return SizeVar(name, dtype)


def placeholder(shape, dtype: str | None = None, name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` (ints and/or vars); dtype defaults to float32."""
    shape = _shape_tuple(shape, "te.placeholder")
    return PlaceholderOp(name, shape, dt.normalize(dtype or "float32")).output(0)


def _shape_tuple(shape, primitive: str) -> tuple[PrimExpr, ...]:
    """``shape`` as integer expressions. As in TVM, a Python float that is a whole number
    (``N / bn`` with ``bn`` dividing ``N``) is taken as that integer."""
    if isinstance(shape, numbers.Real | PrimExpr):
        shape = (shape,)
    return tuple(_shape_dim(s, primitive) for s in shape)


def _shape_dim(size, primitive: str) -> PrimExpr:
    if isinstance(size, numbers.Real) and not isinstance(size, numbers.Integral):
        if not float(size).is_integer():
            raise TypeError(
                f"{primitive}: shape size {size} is not a whole number; a shape size must be "
                f"an integer (use // for an integer division, e.g. N // bn)")
        size = int(size)
    e = convert(size)
    if not dt.is_integer(e.dtype):
        raise TypeError(f"{primitive}: shape dimensions must be integers, got {e} ({e.dtype})")
    return e


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "",
            attrs: dict | None = None):
    """A tensor whose element at index ``i`` is ``fcompute(*i)``; returns a Tensor (or a list
    of Tensors when fcompute returns several values)."""
    shape = _shape_tuple(shape, "te.compute")
    tag = scoped_tag(tag, "te.compute")
    arg_names = _arg_names(fcompute, len(shape))
    # int64 axes for a tensor whose size does not fit in int32, as its flat index needs
    index_type = index_dtype(*shape)
    axis = [IterVar(Range(0, extent), Var(n, index_type), IterVar.DataPar)
            for n, extent in zip(arg_names, shape, strict=True)]
    body = fcompute(*[iv.var for iv in axis])
    bodies = list(body) if isinstance(body, list | tuple) else [body]
    bodies = [convert(b) for b in bodies]
    _check_reduces(bodies, name)
    op = ComputeOp(name, tag, attrs, axis, bodies)
    return op.outputs if len(op.outputs) > 1 else op.output(0)


def _arg_names(fcompute: Callable, ndim: int) -> list[str]:
    code = getattr(fcompute, "__code__", None)
    if code is None:
        return [f"i{k}" for k in range(ndim)]
    params = inspect.signature(fcompute).parameters.values()
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if varargs and not names:
        return [f"i{k}" for k in range(ndim)]
    if len(names) != ndim and not varargs:
        raise ValueError(
            f"te.compute: the lambda takes {len(names)} index arguments but the shape has "
            f"{ndim} dimensions")
    return names + [f"i{k}" for k in range(len(names), ndim)]


def _check_reduces(bodies: list[PrimExpr], name: str) -> None:
    """As in TVM: a reduction is a whole output expression, never part of one (nor of
    another reduction), and either every output is one or none is."""
    for b in bodies:
        inside = [b.source, b.condition] if isinstance(b, Reduce) else [b]
        if _contains_reduce(inside):
            raise ComputeDefinitionError(
                f"compute {name}: reductions are only allowed at the top level of compute; "
                f"compute the reduction as a tensor of its own and use it in another compute, "
                f"e.g. S = te.compute(..., lambda i: te.sum(A[i, k], axis=k)); "
                f"te.compute(..., lambda i: S[i] / n)")
    reduces = [b for b in bodies if isinstance(b, Reduce)]
    if reduces and len(reduces) != len(bodies):
        raise ComputeDefinitionError(
            f"compute {name}: either all outputs are reductions or none is")


def _contains_reduce(exprs: list) -> bool:
    found: list[Reduce] = []
    post_order_visit(exprs, lambda n: found.append(n) if isinstance(n, Reduce) else None)
    return bool(found)


def reduce_axis(dom, name: str = "rv", thread_tag: str = "") -> IterVar:
    """A reduction axis over ``dom`` = (begin, end) or a Range."""
    if not isinstance(dom, Range):
        if isinstance(dom, list | tuple):
            if len(dom) != 2:
                raise ValueError("reduce_axis domain must be (begin, end)")
            dom = Range(dom[0], dom[1])
        else:
            dom = Range(0, dom)
    index_type = index_dtype(dom.min + dom.extent)  # the largest value must fit
    return IterVar(dom, Var(name, index_type), IterVar.CommReduce, thread_tag)


def thread_axis(dom=None, tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis such as ``te.thread_axis("threadIdx.x")``."""
    if isinstance(dom, str):
        tag, dom = dom, None
    if not tag:
        raise ValueError("thread_axis needs a tag such as 'threadIdx.x' or 'blockIdx.x'")
    if dom is not None and not isinstance(dom, Range):
        dom = Range(dom[0], dom[1]) if isinstance(dom, list | tuple) else Range(0, dom)
    kind = IterVar.ThreadIndex
    return IterVar(dom, Var(name or tag, "int32"), kind, tag)


class _Reducer:
    """A commutative reducer usable as ``r(expr, axis=k)`` (and ``r(a, b)`` elementwise)."""

    def __init__(self, fcombine: Callable, fidentity: Callable, name: str):
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name

    def __call__(self, expr, axis=None, where=None, init=None, *args):
        if axis is not None and not isinstance(axis, IterVar | list | tuple):
            # two expressions: the elementwise combination (te.max(a, b))
            a, b = match_types(expr, axis)
            return self.fcombine(a, b)
        if axis is None:
            raise ValueError(f"{self.name}: missing the reduction axis (axis=...)")
        axes = [axis] if isinstance(axis, IterVar) else list(axis)
        for a in axes:
            if not isinstance(a, IterVar) or a.iter_type != IterVar.CommReduce:
                raise ValueError(f"{self.name}: axis must be te.reduce_axis, got {a!r}")
        exprs = list(expr) if isinstance(expr, list | tuple) else [expr]
        exprs = [convert(e) for e in exprs]
        dtypes = [e.dtype for e in exprs]
        lhs = [Var("x", d) for d in dtypes]
        rhs = [Var("y", d) for d in dtypes]
        # TVM's convention: a tuple reducer's fcombine takes the two tuples (lhs, rhs)
        res = self.fcombine(lhs, rhs) if len(exprs) > 1 else self.fcombine(lhs[0], rhs[0])
        res = list(res) if isinstance(res, list | tuple) else [res]
        ident = self.fidentity(*dtypes) if len(exprs) > 1 else self.fidentity(dtypes[0])
        ident = list(ident) if isinstance(ident, list | tuple) else [ident]
        ident = [convert(x) for x in ident]
        combiner = CommReducer(lhs, rhs, [convert(r) for r in res], ident)
        cond = convert(True) if where is None else convert(where)
        inits = () if init is None else tuple(convert(x) for x in
                                             (init if isinstance(init, list | tuple) else [init]))
        if len(exprs) == 1:
            return Reduce(combiner, exprs, axes, cond, 0, inits)
        return tuple(Reduce(combiner, exprs, axes, cond, k, inits) for k in range(len(exprs)))

    def __repr__(self) -> str:
        return f"comm_reducer({self.name})"


def comm_reducer(fcombine: Callable, fidentity: Callable, name: str = "reduce") -> _Reducer:
    """A custom commutative reducer from ``fcombine(a, b)`` and ``fidentity(dtype)``."""
    return _Reducer(fcombine, fidentity, name)


sum = comm_reducer(lambda x, y: x + y, lambda t: make_const(0, t), name="sum")  # noqa: A001
min = comm_reducer(emin, max_value, name="min")  # noqa: A001
max = comm_reducer(emax, min_value, name="max")  # noqa: A001
