"""Injective data movement (tag ``"injective"``): reshape, transpose, squeeze, expand_dims,
concatenate, stack, split, strided_slice, take, flip, tile, repeat, where,
layout_transform; and ``matmul``."""

from __future__ import annotations

import re

from kiln import te, tir
from kiln.ir import dtype as dt
from kiln.ir.op import convert, floordiv, floormod
from kiln.te.tensor import Tensor

from . import tag
from .broadcast import _broadcast_indices, broadcast_shape
from .utils import (
    const_shape,
    get_const_int,
    get_const_tuple,
    is_const_int,
    normalize_axis,
    prod,
    ravel_index,
    unravel_index,
)


def _check(x, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"topi.{name} expects a te.Tensor, got {type(x).__name__}")
    return x


def reshape(a, newshape):
    """``a`` with shape ``newshape`` (row-major; one entry may be -1)."""
    a = _check(a, "reshape")
    newshape = list(newshape) if isinstance(newshape, list | tuple) else [newshape]
    total = prod(a.shape)
    if any(is_const_int(s) and get_const_int(s) == -1 for s in newshape):
        known = prod([s for s in newshape if not (is_const_int(s) and get_const_int(s) == -1)])
        total_c, known_c = get_const_int(total), get_const_int(known)
        if known_c == 0 or total_c % known_c:
            raise ValueError(f"cannot reshape {list(a.shape)} into {newshape}")
        newshape = [total_c // known_c if is_const_int(s) and get_const_int(s) == -1 else s
                    for s in newshape]
    if is_const_int(total) and all(is_const_int(s) for s in newshape):
        if get_const_int(total) != get_const_int(prod(newshape)):
            raise ValueError(
                f"cannot reshape {list(get_const_tuple(a.shape))} ({get_const_int(total)} "
                f"elements) into {list(get_const_tuple(newshape))}")

    def f(*i):
        return a(*unravel_index(ravel_index(i, newshape), a.shape))

    return te.compute(newshape, f, name="T_reshape", tag=tag.INJECTIVE)


def transpose(a, axes=None):
    """Permute the axes of ``a`` (reverse them when ``axes`` is None)."""
    a = _check(a, "transpose")
    n = a.ndim
    axes = list(range(n - 1, -1, -1)) if axes is None else [int(x) % n for x in axes]
    if sorted(axes) != list(range(n)):
        raise ValueError(f"transpose: axes {axes} is not a permutation of {n} axes")
    shape = [a.shape[k] for k in axes]

    def f(*i):
        idx = [None] * n
        for k, ax in enumerate(axes):
            idx[ax] = i[k]
        return a(*idx)

    return te.compute(shape, f, name="T_transpose", tag=tag.INJECTIVE)


def squeeze(a, axis=None):
    """Remove axes of size 1 (all of them, or those in ``axis``)."""
    a = _check(a, "squeeze")
    shape = get_const_tuple(a.shape)
    if axis is None:
        axes = [k for k, s in enumerate(shape) if isinstance(s, int) and s == 1]
    else:
        axes = normalize_axis(axis, a.ndim)
        for k in axes:
            if shape[k] != 1:
                raise ValueError(f"squeeze: axis {k} has size {shape[k]}, not 1")
    keep = [k for k in range(a.ndim) if k not in axes]
    out_shape = [a.shape[k] for k in keep]

    def f(*i):
        idx = [0] * a.ndim
        for o, k in enumerate(keep):
            idx[k] = i[o]
        return a(*idx)

    return te.compute(out_shape, f, name="T_squeeze", tag=tag.INJECTIVE)


def expand_dims(a, axis, num_newaxis=1):
    """Insert ``num_newaxis`` axes of size 1 at position ``axis``."""
    a = _check(a, "expand_dims")
    n = a.ndim
    if not -n - 1 <= axis <= n:
        raise ValueError(f"expand_dims: axis {axis} out of range for {n} dimensions")
    axis = axis % (n + 1) if axis < 0 else axis
    shape = list(a.shape[:axis]) + [1] * num_newaxis + list(a.shape[axis:])

    def f(*i):
        return a(*(list(i[:axis]) + list(i[axis + num_newaxis:])))

    return te.compute(shape, f, name="T_expand_dims", tag=tag.INJECTIVE)


def concatenate(a_tuple, axis=0):
    """Join tensors along ``axis`` (the other dimensions must agree)."""
    ts = [_check(t, "concatenate") for t in a_tuple]
    if not ts:
        raise ValueError("concatenate needs at least one tensor")
    n = ts[0].ndim
    axis = normalize_axis(axis, n)[0]
    for t in ts[1:]:
        if t.ndim != n:
            raise ValueError("concatenate: all tensors must have the same number of dims")
    offsets = [0]
    for t in ts:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = list(ts[0].shape)
    shape[axis] = offsets[-1]
    if len(ts) == 1:
        return te.compute(shape, lambda *i: ts[0](*i), name="T_concat", tag=tag.INJECTIVE)

    def f(*i):
        def part(k):
            idx = list(i)
            idx[axis] = i[axis] - offsets[k]
            return ts[k](*idx)

        out = part(len(ts) - 1)
        for k in range(len(ts) - 2, -1, -1):
            out = tir.if_then_else(i[axis] < offsets[k + 1], part(k), out)
        return out

    return te.compute(shape, f, name="T_concat", tag=tag.INJECTIVE)


def stack(a_tuple, axis=0):
    """Join tensors of equal shape along a new axis."""
    return concatenate([expand_dims(t, axis) for t in a_tuple], axis)


def strided_slice(a, begin, end, strides=None, axes=None, slice_mode="end"):
    """``a[begin:end:strides]`` per axis (numpy semantics, constant bounds)."""
    a = _check(a, "strided_slice")
    shape = const_shape(a.shape, "strided_slice input shape")
    n = len(shape)
    axes = list(range(len(begin))) if axes is None else [int(x) % n for x in axes]
    strides = [1] * len(axes) if strides is None else list(strides)
    strides = strides + [1] * (len(axes) - len(strides))
    starts, steps, sizes = [0] * n, [1] * n, list(shape)
    for k, ax in enumerate(axes):
        dim, st = shape[ax], int(strides[k])
        if st == 0:
            raise ValueError("strided_slice: stride must not be 0")
        b = int(begin[k]) if k < len(begin) and begin[k] is not None else None
        e = int(end[k]) if k < len(end) and end[k] is not None else None
        if slice_mode == "size":
            b = 0 if b is None else b
            e = dim if e is None or e < 0 else b + e
            st = 1
        rng = range(dim)[slice(b, e, st)]
        starts[ax], steps[ax], sizes[ax] = (rng.start if len(rng) else 0), st, len(rng)

    def f(*i):
        return a(*[starts[k] + i[k] * steps[k] for k in range(n)])

    return te.compute(sizes, f, name="T_strided_slice", tag=tag.INJECTIVE)


def split(ary, indices_or_sections, axis=0):
    """Split ``ary`` along ``axis`` into equal sections or at the given indices."""
    ary = _check(ary, "split")
    shape = const_shape(ary.shape, "split input shape")
    axis = normalize_axis(axis, len(shape))[0]
    dim = shape[axis]
    if isinstance(indices_or_sections, int):
        if dim % indices_or_sections:
            raise ValueError(f"split: {dim} is not divisible into {indices_or_sections}")
        step = dim // indices_or_sections
        points = [step * k for k in range(1, indices_or_sections)]
    else:
        points = [int(p) for p in indices_or_sections]
    bounds = [0] + points + [dim]
    outs = []
    for b, e in zip(bounds[:-1], bounds[1:], strict=True):
        begin = [0] * len(shape)
        end = list(shape)
        begin[axis], end[axis] = b, e
        outs.append(strided_slice(ary, begin, end))
    return outs


def take(a, indices, axis=None, mode="clip"):
    """Gather elements of ``a`` at ``indices`` along ``axis`` (flattened ``a`` when None).

    ``mode``: ``"clip"`` clamps indices into range, ``"wrap"`` wraps them (negative indices
    count from the end), ``"fast"`` trusts them.
    """
    a = _check(a, "take")
    if axis is None:
        a = reshape(a, [prod(a.shape)])
        axis = 0
    axis = normalize_axis(axis, a.ndim)[0]
    n = a.shape[axis]
    if isinstance(indices, Tensor):
        ishape = list(indices.shape)
    else:
        ishape = []
    shape = list(a.shape[:axis]) + ishape + list(a.shape[axis + 1:])
    ni = len(ishape)

    def f(*i):
        if isinstance(indices, Tensor):
            raw = indices(*i[axis:axis + ni])
        else:
            raw = convert(indices)
        raw = raw if raw.dtype == "int32" else raw.astype("int32")
        if mode == "clip":
            k = tir.min(tir.max(raw, 0), n - 1)
        elif mode == "wrap":
            k = floormod(raw, n)
        elif mode == "fast":
            k = raw
        else:
            raise ValueError(f"take: unknown mode {mode!r}")
        return a(*(list(i[:axis]) + [k] + list(i[axis + ni:])))

    return te.compute(shape, f, name="T_take", tag=tag.INJECTIVE)


def flip(a, axis=0):
    """Reverse ``a`` along ``axis``."""
    a = _check(a, "flip")
    axis = normalize_axis(axis, a.ndim)[0]

    def f(*i):
        idx = list(i)
        idx[axis] = a.shape[axis] - 1 - i[axis]
        return a(*idx)

    return te.compute(a.shape, f, name="T_reverse", tag=tag.INJECTIVE)


def tile(a, reps):
    """Repeat the whole of ``a`` ``reps`` times per axis (numpy.tile)."""
    a = _check(a, "tile")
    reps = list(reps)
    n = max(a.ndim, len(reps))
    reps = [1] * (n - len(reps)) + reps
    ashape = [1] * (n - a.ndim) + list(a.shape)
    shape = [s * r for s, r in zip(ashape, reps, strict=True)]

    def f(*i):
        idx = [floormod(i[k], ashape[k]) for k in range(n)]
        return a(*idx[n - a.ndim:])

    return te.compute(shape, f, name="T_tile", tag=tag.INJECTIVE)


def repeat(a, repeats, axis):
    """Repeat each element of ``a`` ``repeats`` times along ``axis`` (numpy.repeat)."""
    a = _check(a, "repeat")
    axis = normalize_axis(axis, a.ndim)[0]
    shape = list(a.shape)
    shape[axis] = shape[axis] * repeats

    def f(*i):
        idx = list(i)
        idx[axis] = floordiv(i[axis], repeats)
        return a(*idx)

    return te.compute(shape, f, name="T_repeat", tag=tag.INJECTIVE)


def where(condition, x, y):
    """``x`` where ``condition`` is true, else ``y`` (all three broadcast)."""
    parts = [condition, x, y]
    tensors = [p for p in parts if isinstance(p, Tensor)]
    if not tensors:
        return tir.if_then_else(condition, x, y)
    shape: list = []
    for t in tensors:
        shape = broadcast_shape(shape, t.shape)

    def val(p, i):
        return p(*_broadcast_indices(p, shape, i)) if isinstance(p, Tensor) else convert(p)

    def f(*i):
        c = val(condition, i)
        if not dt.is_bool(c.dtype):
            c = c != 0
        return tir.if_then_else(c, val(x, i), val(y, i))

    return te.compute(shape, f, name="T_where", tag=tag.BROADCAST)


_LAYOUT_PART = re.compile(r"(\d*)([A-Za-z])")


def _parse_layout(layout: str) -> list[tuple[str, int | None]]:
    """``"NCHW16c"`` -> [("N", None), ("C", None), ("H", None), ("W", None), ("c", 16)]."""
    parts = []
    pos = 0
    for m in _LAYOUT_PART.finditer(layout):
        if m.start() != pos:
            raise ValueError(f"bad layout string {layout!r}")
        pos = m.end()
        num, ch = m.group(1), m.group(2)
        if ch.isupper():
            if num:
                raise ValueError(f"bad layout string {layout!r}: factor before a primal axis")
            parts.append((ch, None))
        else:
            if not num:
                raise ValueError(f"bad layout string {layout!r}: sub-axis {ch} needs a factor")
            parts.append((ch, int(num)))
    if pos != len(layout):
        raise ValueError(f"bad layout string {layout!r}")
    return parts


def layout_transform(data, src_layout: str, dst_layout: str):
    """Move ``data`` from ``src_layout`` to ``dst_layout`` (e.g. ``"NCHW"`` -> ``"NCHW16c"``,
    ``"OIHW"`` -> ``"OIHW16i16o"``). A primal axis (upper case) may be split by one
    sub-axis (lower case with its factor); its size must be divisible by the factor."""
    data = _check(data, "layout_transform")
    src, dst = _parse_layout(src_layout), _parse_layout(dst_layout)
    if len(src) != data.ndim:
        raise ValueError(f"layout {src_layout!r} has {len(src)} axes, data has {data.ndim}")
    primal = sorted(c for c, f in src if f is None)
    if primal != sorted(c for c, f in dst if f is None):
        raise ValueError(f"layouts {src_layout!r} and {dst_layout!r} have different axes")
    # full size of every primal axis
    full: dict[str, object] = {}
    for (c, f), s in zip(src, data.shape, strict=True):
        if f is None:
            full[c] = s
    for c, f in src:
        if f is not None:
            full[c.upper()] = full[c.upper()] * f
    factors_dst = {c.upper(): f for c, f in dst if f is not None}
    for c, f in factors_dst.items():
        if is_const_int(full[c]) and get_const_int(full[c]) % f:
            raise ValueError(f"layout_transform: axis {c} of size {get_const_int(full[c])} is "
                             f"not divisible by {f}")
    shape = []
    for c, f in dst:
        if f is not None:
            shape.append(f)
        elif c in factors_dst:
            shape.append(floordiv(full[c], factors_dst[c]) if not is_const_int(full[c])
                         else get_const_int(full[c]) // factors_dst[c])
        else:
            shape.append(full[c])
    factors_src = {c.upper(): f for c, f in src if f is not None}

    def f(*i):
        value = {}
        for (c, fac), x in zip(dst, i, strict=True):
            if fac is None:
                value[c] = value.get(c, 0) + x * factors_dst.get(c, 1)
        for (c, fac), x in zip(dst, i, strict=True):
            if fac is not None:
                value[c.upper()] = value[c.upper()] + x
        idx = []
        for c, fac in src:
            if fac is None:
                v = value[c]
                idx.append(floordiv(v, factors_src[c]) if c in factors_src else v)
            else:
                idx.append(floormod(value[c.upper()], fac))
        return data(*idx)

    return te.compute(shape, f, name=f"T_layout_trans_{src_layout}_{dst_layout}",
                      tag=tag.INJECTIVE)


def matmul(a, b, transp_a=False, transp_b=False):
    """2-D matrix product ``op(a) @ op(b)`` where op transposes when asked (tag "matmul"):
    ``topi.nn.matmul`` without bias."""
    from .nn.dense import matmul as nn_matmul  # nn imports this module (layouts)

    return nn_matmul(_check(a, "matmul"), _check(b, "matmul"), transpose_a=transp_a,
                     transpose_b=transp_b)


__all__ = [
    "reshape", "transpose", "squeeze", "expand_dims", "concatenate", "stack",
    "strided_slice", "split", "take", "flip", "tile", "repeat", "where", "layout_transform",
    "matmul",
]
