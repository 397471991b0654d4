"""``lrn_python``: local response normalization across one axis (reference of ``topi.nn.lrn``)."""

from __future__ import annotations

import numpy as np


def lrn_python(a_np: np.ndarray, size: int, axis: int, bias: float, alpha: float,
               beta: float) -> np.ndarray:
    """``a / (bias + alpha / size * sum(a^2 over the size-long window centred on each
    element along axis)) ** beta``; the window is cut at the ends of the axis."""
    a = np.moveaxis(a_np.astype(np.float64), axis, -1)
    sq = np.square(a)
    radius = size // 2
    n = a.shape[-1]
    sqr_sum = np.stack([sq[..., max(0, i - radius):min(n, i + radius + 1)].sum(axis=-1)
                        for i in range(n)], axis=-1)
    out = a / np.power(bias + alpha * sqr_sum / size, beta)
    return np.moveaxis(out, -1, axis).astype(a_np.dtype)
