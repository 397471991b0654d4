"""Fully connected layers and batched matrix products."""

from __future__ import annotations

from kiln import te
from kiln.ir import dtype as dt

from .. import tag
from ..utils import get_const_int, is_const_int
from .conv2d import _cast


def _check_2d(what: str, a, b) -> None:
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"{what}: both tensors must be 2-D")


def _check_reduction(what: str, ka, kb) -> None:
    if is_const_int(ka) and is_const_int(kb) and get_const_int(ka) != get_const_int(kb):
        raise ValueError(f"{what}: inner dimensions differ ({get_const_int(ka)} vs "
                         f"{get_const_int(kb)})")


def _add_bias(out, bias, out_dtype: str):
    """``out[i, j] + bias[j]`` as a ``"broadcast"`` stage (``out`` itself without a bias)."""
    if bias is None:
        return out
    m, n = out.shape
    return te.compute((m, n), lambda i, j: out[i, j] + _cast(bias[j], out_dtype),
                      name="T_add", tag=tag.BROADCAST)


def matmul(tensor_a, tensor_b, bias=None, out_dtype=None, transpose_a=False,
           transpose_b=False):
    """``out = op(a) @ op(b) (+ bias)`` for 2-D tensors, where ``op`` transposes its operand
    when ``transpose_a``/``transpose_b`` ask (TVM's ``topi.nn.matmul``; tag ``"matmul"``, the
    bias add a ``"broadcast"`` stage). ``a`` is ``[M, K]`` (``[K, M]`` transposed), ``b``
    ``[K, N]`` (``[N, K]`` transposed)."""
    a, b = tensor_a, tensor_b
    _check_2d("matmul", a, b)
    out_dtype = dt.normalize(out_dtype or a.dtype)
    m, ka = (a.shape[1], a.shape[0]) if transpose_a else (a.shape[0], a.shape[1])
    kb, n = (b.shape[1], b.shape[0]) if transpose_b else (b.shape[0], b.shape[1])
    _check_reduction("matmul", ka, kb)
    k = te.reduce_axis((0, ka), name="k")

    def f(i, j):
        x = a[k, i] if transpose_a else a[i, k]
        y = b[j, k] if transpose_b else b[k, j]
        return te.sum(_cast(x, out_dtype) * _cast(y, out_dtype), axis=k)

    out = te.compute((m, n), f, name="T_matmul", tag="matmul",
                     attrs={"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)})
    return _add_bias(out, bias, out_dtype)


def dense(data, weight, bias=None, out_dtype=None):
    """``out[i, j] = sum_k data[i, k] * weight[j, k] (+ bias[j])`` with data ``[M, K]``,
    weight ``[N, K]`` (tag ``"dense"``; the bias add is a ``"broadcast"`` stage)."""
    _check_2d("dense", data, weight)
    out_dtype = dt.normalize(out_dtype or data.dtype)
    m, kd = data.shape
    n, kw = weight.shape
    _check_reduction("dense", kd, kw)
    k = te.reduce_axis((0, kd), name="k")
    out = te.compute(
        (m, n), lambda i, j: te.sum(_cast(data[i, k], out_dtype) * _cast(weight[j, k],
                                                                          out_dtype), axis=k),
        name="T_dense", tag="dense", attrs={"transpose_a": False, "transpose_b": True,
                                            "layout_free_placeholders": [weight]})
    return _add_bias(out, bias, out_dtype)


def batch_matmul(tensor_a, tensor_b, oshape=None, out_dtype=None, transpose_a=False,
                 transpose_b=True):
    """``out[b, i, j] = sum_k A[b, i, k] * B[b, j, k]`` (the default ``transpose_b=True``;
    ``transpose_a``/``transpose_b`` choose ``[B, K, M]``/``[B, K, N]`` instead). A batch of 1
    broadcasts (tag ``"batch_matmul"``)."""
    a, b = tensor_a, tensor_b
    if a.ndim != 3 or b.ndim != 3:
        raise ValueError("batch_matmul: both tensors must be 3-D")
    out_dtype = dt.normalize(out_dtype or a.dtype)
    ba, m, ka = (a.shape[0], a.shape[2], a.shape[1]) if transpose_a else a.shape
    bb, n, kb = (b.shape[0], b.shape[1], b.shape[2]) if transpose_b else (
        b.shape[0], b.shape[2], b.shape[1])
    for x, y, what in ((ka, kb, "reduction"), (ba, bb, "batch")):
        if is_const_int(x) and is_const_int(y):
            xv, yv = get_const_int(x), get_const_int(y)
            if xv != yv and not (what == "batch" and 1 in (xv, yv)):
                raise ValueError(f"batch_matmul: {what} dimensions differ ({xv} vs {yv})")
    a_one = is_const_int(ba) and get_const_int(ba) == 1
    b_one = is_const_int(bb) and get_const_int(bb) == 1
    batch = bb if a_one else ba
    if oshape is not None:
        batch, m, n = oshape
    k = te.reduce_axis((0, ka), name="k")

    def f(bi, i, j):
        ia = 0 if a_one else bi
        ib = 0 if b_one else bi
        x = a[ia, k, i] if transpose_a else a[ia, i, k]
        y = b[ib, j, k] if transpose_b else b[ib, k, j]
        return te.sum(_cast(x, out_dtype) * _cast(y, out_dtype), axis=k)

    return te.compute((batch, m, n), f, name="T_batch_matmul", tag="batch_matmul",
                      attrs={"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)})


__all__ = ["dense", "matmul", "batch_matmul"]
