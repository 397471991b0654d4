"""Constant padding (tag ``"injective,pad"``)."""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import PrimExpr
from kiln.ir.op import cast, make_const

from ..utils import get_const_int, get_const_tuple, is_const_int


def pad(data, pad_before, pad_after=None, pad_value=0.0, name="PadInput"):
    """``data`` with ``pad_before[k]``/``pad_after[k]`` elements of ``pad_value`` added
    before/after axis ``k`` (``pad_after`` defaults to ``pad_before``)."""
    n = data.ndim
    pad_before = list(pad_before)
    pad_after = list(pad_after) if pad_after is not None else list(pad_before)
    if len(pad_before) != n or len(pad_after) != n:
        raise ValueError(
            f"pad: {n}-dimensional input needs {n} pad_before and pad_after values, got "
            f"{len(pad_before)} and {len(pad_after)}")
    for p in pad_before + pad_after:
        if is_const_int(p) and get_const_int(p) < 0:
            raise ValueError(f"pad: negative padding {get_const_int(p)}")
    shape = [data.shape[k] + pad_before[k] + pad_after[k] for k in range(n)]
    value = pad_value if isinstance(pad_value, PrimExpr) else make_const(pad_value, data.dtype)

    def _zero(p) -> bool:
        return is_const_int(p) and get_const_int(p) == 0

    def f(*i):
        conds, idx = [], []
        for k in range(n):
            b, a = pad_before[k], pad_after[k]
            if _zero(b) and _zero(a):
                idx.append(i[k])
                continue
            idx.append(i[k] - b)
            if not _zero(b):
                conds.append(i[k] >= b)
            if not _zero(a):
                conds.append(i[k] < data.shape[k] + b)
        if not conds:
            return data(*idx)
        return tir.if_then_else(tir.all(*conds), data(*idx), value)

    return te.compute(shape, f, name=name, tag="injective,pad")


def pad_masked(data, pad_before, pad_after=None, name="PadInput"):
    """Zero padding without a per-element branch: ``data`` read at the index clamped into
    its bounds, times a 0/1 factor of the border test. The test depends only on the padded
    axes, so when the innermost axis is not padded (a packed channel block) the stage
    vectorizes as a plain copy. Equal to :func:`pad` with zeros for finite inputs; an
    ``inf``/``nan`` on the input's edge makes the border next to it ``nan`` (a window that
    reads the border also reads that edge element, so such outputs are not finite either
    way)."""
    n = data.ndim
    pad_before = [get_const_int(p) for p in pad_before]
    pad_after = [get_const_int(p) for p in (pad_after if pad_after is not None else pad_before)]
    if len(pad_before) != n or len(pad_after) != n or min(pad_before + pad_after) < 0:
        raise ValueError(f"pad_masked: bad padding {pad_before} / {pad_after} for a "
                         f"{n}-dimensional input")
    sizes = list(get_const_tuple(data.shape))  # an axis without padding may be symbolic
    shape = [sizes[k] + pad_before[k] + pad_after[k] if pad_before[k] or pad_after[k]
             else sizes[k] for k in range(n)]

    def f(*i):
        conds, idx = [], []
        for k in range(n):
            b, a = pad_before[k], pad_after[k]
            if b == 0 and a == 0:
                idx.append(i[k])
                continue
            idx.append(tir.min(tir.max(i[k] - b, 0), sizes[k] - 1))
            if b:
                conds.append(i[k] >= b)
            if a:
                conds.append(i[k] < sizes[k] + b)
        if not conds:
            return data(*idx)
        return data(*idx) * cast(tir.all(*conds), data.dtype)

    return te.compute(shape, f, name=name, tag="injective,pad", attrs={"masked": True})


__all__ = ["pad", "pad_masked"]
