"""Reductions over axes: sum, max, min, prod, mean, all, any, argmax, argmin.

``axis`` is an int, a list of ints or None (all axes); negative axes count from the end.
``keepdims=True`` keeps each reduced axis with size 1. The reducing stage has tag
``"comm_reduce"`` (``"comm_reduce_idx"`` for argmax/argmin).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import dtype as dt
from kiln.ir.expr import Select
from kiln.ir.op import cast, make_const
from kiln.te.tensor import Tensor

from . import tag
from .utils import normalize_axis


def _reduce_shape(data: Tensor, axes: list[int], keepdims: bool) -> list:
    out = []
    for k, s in enumerate(data.shape):
        if k in axes:
            if keepdims:
                out.append(1)
        else:
            out.append(s)
    return out


def _data_index(data: Tensor, axes: list[int], keepdims: bool, out_idx, red_vars) -> list:
    idx, oi, ri = [], 0, 0
    for k in range(data.ndim):
        if k in axes:
            idx.append(red_vars[ri])
            ri += 1
            if keepdims:
                oi += 1
        else:
            idx.append(out_idx[oi])
            oi += 1
    return idx


def _reduce(data: Tensor, axis, keepdims: bool, reducer, name: str, atleast1d: bool = False):
    if not isinstance(data, Tensor):
        raise TypeError(f"topi.{name} expects a te.Tensor, got {type(data).__name__}")
    axes = normalize_axis(axis, data.ndim)
    shape = _reduce_shape(data, axes, keepdims)
    if atleast1d and not shape:
        shape = [1]
    raxes = [te.reduce_axis((0, data.shape[k]), name=f"k{k}") for k in axes]

    def f(*i):
        idx = _data_index(data, axes, keepdims, i, [r.var for r in raxes])
        return reducer(data(*idx), axis=raxes)

    return te.compute(shape, f, name=f"T_{name}", tag=tag.COMM_REDUCE)


def sum(data, axis=None, keepdims=False):  # noqa: A001
    """Sum of ``data`` over ``axis``."""
    return _reduce(data, axis, keepdims, te.sum, "sum")


def max(data, axis=None, keepdims=False):  # noqa: A001
    """Maximum of ``data`` over ``axis``."""
    return _reduce(data, axis, keepdims, te.max, "max")


def min(data, axis=None, keepdims=False):  # noqa: A001
    """Minimum of ``data`` over ``axis``."""
    return _reduce(data, axis, keepdims, te.min, "min")


_prod = te.comm_reducer(lambda x, y: x * y, lambda t: make_const(1, t), name="prod")


def prod(data, axis=None, keepdims=False):
    """Product of ``data`` over ``axis``."""
    return _reduce(data, axis, keepdims, _prod, "prod")


_all = te.comm_reducer(lambda x, y: tir.logical_and(x, y), lambda t: make_const(1, t),
                       name="all")
_any = te.comm_reducer(lambda x, y: tir.logical_or(x, y), lambda t: make_const(0, t),
                       name="any")


def _as_bool(data: Tensor, name: str) -> Tensor:
    if dt.is_bool(data.dtype):
        return data
    return te.compute(data.shape, lambda *i: data(*i) != make_const(0, data.dtype),
                      name=f"T_{name}_cond", tag=tag.ELEMWISE)


def all(data, axis=None, keepdims=False):  # noqa: A001
    """True where every element over ``axis`` is true (non-zero)."""
    return _reduce(_as_bool(data, "all"), axis, keepdims, _all, "all")


def any(data, axis=None, keepdims=False):  # noqa: A001
    """True where some element over ``axis`` is true (non-zero)."""
    return _reduce(_as_bool(data, "any"), axis, keepdims, _any, "any")


def mean(data, axis=None, keepdims=False):
    """Arithmetic mean of ``data`` over ``axis`` (a sum, then one division)."""
    axes = normalize_axis(axis, data.ndim)
    count = 1
    for k in axes:
        count = count * data.shape[k]
    s = sum(data, axes, keepdims)
    out_dtype = data.dtype if dt.is_float(data.dtype) else "float32"

    def f(*i):
        return cast(s(*i), out_dtype) / cast(count, out_dtype)

    return te.compute(s.shape, f, name="T_mean", tag=tag.ELEMWISE)


def _arg_reducer(better, name: str):
    """(index, value) reducer keeping the first index of the best value."""

    def fcombine(*args):
        x, y = (args[0], args[1]) if len(args) == 2 else (args[:2], args[2:])
        take_x = tir.any(better(x[1], y[1]),
                         tir.all(x[1] == y[1], x[0] <= y[0]))
        return Select(take_x, x[0], y[0]), Select(take_x, x[1], y[1])

    def fidentity(t_idx, t_val):
        worst = tir.min_value(t_val) if name == "argmax" else tir.max_value(t_val)
        return make_const(-1, t_idx), worst

    return te.comm_reducer(fcombine, fidentity, name=name)


_argmax = _arg_reducer(lambda a, b: a > b, "argmax")
_argmin = _arg_reducer(lambda a, b: a < b, "argmin")


def _arg(data: Tensor, axis, keepdims: bool, reducer, name: str, select_last_index=False):
    if select_last_index:
        raise NotImplementedError(f"topi.{name}: select_last_index=True is not supported")
    axes = normalize_axis(axis, data.ndim)
    shape = _reduce_shape(data, axes, keepdims)
    raxes = [te.reduce_axis((0, data.shape[k]), name=f"k{k}") for k in axes]

    def f(*i):
        rv = [r.var for r in raxes]
        flat = rv[0]
        for r, k in zip(rv[1:], axes[1:], strict=True):
            flat = flat * data.shape[k] + r
        idx = _data_index(data, axes, keepdims, i, rv)
        return reducer((flat, data(*idx)), axis=raxes)

    pair = te.compute(shape, f, name=f"T_{name}_red", tag=tag.COMM_REDUCE_IDX)
    return te.compute(shape, lambda *i: pair[0](*i), name=f"T_{name}", tag=tag.INJECTIVE)


def argmax(data, axis=None, keepdims=False, select_last_index=False):
    """Index of the (first) maximum over ``axis`` (int32; flat index when several axes)."""
    return _arg(data, axis, keepdims, _argmax, "argmax", select_last_index)


def argmin(data, axis=None, keepdims=False, select_last_index=False):
    """Index of the (first) minimum over ``axis`` (int32; flat index when several axes)."""
    return _arg(data, axis, keepdims, _argmin, "argmin", select_last_index)


__all__ = ["sum", "max", "min", "prod", "all", "any", "mean", "argmax", "argmin"]
