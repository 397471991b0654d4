"""Softmax (exact, and with the vectorizable exponential) and log-softmax along one axis."""

from __future__ import annotations

from kiln import te, tir

from ..fast_math import fast_exp_expr
from ..utils import normalize_axis


def _stages(x, axis):
    axis = normalize_axis(axis, x.ndim)[0]
    red_shape = [s for k, s in enumerate(x.shape) if k != axis] or [1]
    k1 = te.reduce_axis((0, x.shape[axis]), name="k")
    k2 = te.reduce_axis((0, x.shape[axis]), name="k")

    def at(i_red, kvar):
        idx = list(i_red) if x.ndim > 1 else []
        idx.insert(axis, kvar)
        return idx

    def red_index(i):
        return [v for k, v in enumerate(i) if k != axis] if x.ndim > 1 else [0]

    maxelem = te.compute(red_shape, lambda *i: te.max(x(*at(i, k1)), axis=k1),
                         name="T_softmax_maxelem", tag="softmax_maxelem")
    return axis, k2, at, red_index, maxelem


def softmax(x, axis=-1):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``: stages ``T_softmax_maxelem``,
    ``T_softmax_exp``, ``T_softmax_expsum`` and ``T_softmax_norm`` (tag
    ``"softmax_output"``)."""
    return _softmax(x, axis, tir.exp)


def fast_softmax(x, axis=-1):
    """:func:`softmax` with the vectorizable exponential :func:`kiln.topi.fast_exp`
    (relative error below 2e-7; the same stages)."""
    return _softmax(x, axis, fast_exp_expr)


def _softmax(x, axis, exp_fn):
    axis, k2, at, red_index, maxelem = _stages(x, axis)
    exp = te.compute(x.shape, lambda *i: exp_fn(x(*i) - maxelem(*red_index(i))),
                     name="T_softmax_exp", tag="softmax_exp")
    red_shape = maxelem.shape
    expsum = te.compute(red_shape, lambda *i: te.sum(exp(*at(i, k2)), axis=k2),
                        name="T_softmax_expsum", tag="softmax_expsum")
    return te.compute(x.shape, lambda *i: exp(*i) / expsum(*red_index(i)),
                      name="T_softmax_norm", tag="softmax_output", attrs={"axis": axis})


def log_softmax(x, axis=-1):
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (tag ``"log_softmax_output"``)."""
    axis, k2, at, red_index, maxelem = _stages(x, axis)
    red_shape = maxelem.shape
    expsum = te.compute(
        red_shape, lambda *i: te.sum(tir.exp(x(*at(i, k2)) - maxelem(*i)), axis=k2),
        name="T_softmax_expsum", tag="softmax_expsum")
    return te.compute(
        x.shape, lambda *i: x(*i) - maxelem(*red_index(i)) - tir.log(expsum(*red_index(i))),
        name="T_log_softmax", tag="log_softmax_output", attrs={"axis": axis})


__all__ = ["softmax", "fast_softmax", "log_softmax"]
