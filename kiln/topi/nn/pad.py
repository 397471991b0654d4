"""Constant padding (tag ``"injective,pad"``)."""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import PrimExpr, make_const

from ..utils import get_const_int, is_const_int


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


__all__ = ["pad"]
