"""Normalization: batch norm (inference) and layer norm."""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.op import make_const

from .. import tag
from ..utils import get_const_int, normalize_axis


def batch_norm(data, gamma, beta, moving_mean, moving_var, axis=None, epsilon=1e-5,
               center=True, scale=True, training=False, momentum=0.1):
    """Inference batch normalization along ``axis`` (default 1, the channel axis):
    ``out = (data - mean[c]) / sqrt(var[c] + epsilon) * gamma[c] + beta[c]``.

    Returns ``[out, moving_mean, moving_var]`` as TVM does. The per-channel scale
    ``gamma / sqrt(var + eps)`` and shift ``beta - mean * scale`` are small stages of their
    own (``T_bn_scale``, ``T_bn_shift``), so the big stage is one multiply-add per element
    (tag ``"broadcast"``). ``center=False`` drops beta, ``scale=False`` drops gamma.
    """
    if training:
        raise NotImplementedError("topi.nn.batch_norm: only inference (training=False)")
    axis = normalize_axis(1 if axis is None else axis, data.ndim)[0]
    eps = make_const(epsilon, data.dtype)

    def fscale(c):
        r = tir.rsqrt(moving_var[c] + eps)
        return r * gamma[c] if scale else r

    sc = te.compute(moving_var.shape, fscale, name="T_bn_scale", tag=tag.ELEMWISE)

    def fshift(c):
        s = -moving_mean[c] * sc[c]
        return s + beta[c] if center else s

    sh = te.compute(moving_mean.shape, fshift, name="T_bn_shift", tag=tag.ELEMWISE)
    out = te.compute(data.shape, lambda *i: data(*i) * sc[i[axis]] + sh[i[axis]],
                     name="T_batch_norm", tag=tag.BROADCAST)
    return [out, moving_mean, moving_var]


def layer_norm(data, gamma, beta, axis, epsilon=1e-5):
    """``out = (data - mean) / sqrt(var + epsilon) * gamma + beta`` with mean and (biased)
    variance over ``axis``; ``gamma``/``beta`` have the shape of the normalized axes (either
    may be None). Two reductions (``T_layer_norm_sum``, ``T_layer_norm_var``), the
    reciprocal deviation, then the output (tag ``"layer_norm"``: opaque for fusion)."""
    axes = normalize_axis(axis, data.ndim)
    count = 1
    for a in axes:
        count *= get_const_int(data.shape[a])
    keep = [k for k in range(data.ndim) if k not in axes]
    red_shape = [data.shape[k] for k in keep]
    inv_n = make_const(1.0 / count, data.dtype)

    def full_index(i_keep, i_red):
        idx, a, b = [], 0, 0
        for k in range(data.ndim):
            if k in axes:
                idx.append(i_red[b])
                b += 1
            else:
                idx.append(i_keep[a])
                a += 1
        return idx

    r1 = [te.reduce_axis((0, data.shape[a]), name=f"k{a}") for a in axes]
    s1 = te.compute(red_shape or [1], lambda *i: te.sum(
        data(*full_index(i if red_shape else [], [r.var for r in r1])), axis=r1),
        name="T_layer_norm_sum", tag=tag.COMM_REDUCE)

    def mean(i_keep):
        return s1(*(i_keep if red_shape else [0])) * inv_n

    r2 = [te.reduce_axis((0, data.shape[a]), name=f"k{a}") for a in axes]

    def fvar(*i):
        ik = i if red_shape else []
        d = data(*full_index(ik, [r.var for r in r2])) - mean(ik)
        return te.sum(d * d, axis=r2)

    s2 = te.compute(red_shape or [1], fvar, name="T_layer_norm_var", tag=tag.COMM_REDUCE)
    eps = make_const(epsilon, data.dtype)
    rstd = te.compute(red_shape or [1], lambda *i: tir.rsqrt(s2(*i) * inv_n + eps),
                      name="T_layer_norm_rstd", tag=tag.ELEMWISE)

    def fout(*i):
        ik = [i[k] for k in keep]
        ir = [i[k] for k in axes]
        v = (data(*i) - mean(ik)) * rstd(*(ik if red_shape else [0]))
        if gamma is not None:
            v = v * gamma(*ir)
        if beta is not None:
            v = v + beta(*ir)
        return v

    return te.compute(data.shape, fout, name="T_layer_norm", tag="layer_norm",
                      attrs={"axis": tuple(axes), "epsilon": epsilon})


__all__ = ["batch_norm", "layer_norm"]
