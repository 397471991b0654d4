"""``batch_matmul``: the reference of ``topi.nn.batch_matmul`` (a batch of 1 broadcasts)."""

from __future__ import annotations

import numpy as np


def batch_matmul(x: np.ndarray, y: np.ndarray, out_dtype: str | None = None,
                 trans_x: bool = False, trans_y: bool = True) -> np.ndarray:
    """``out[b] = op(x[b]) @ op(y[b])`` where ``op`` transposes the last two axes when
    ``trans_x``/``trans_y`` say so: ``x`` is ``[B, M, K]`` (``[B, K, M]`` transposed), ``y``
    is ``[B, N, K]`` by default (TVM's ``trans_y=True``) or ``[B, K, N]``."""
    xt = np.swapaxes(x, 1, 2) if trans_x else x
    yt = np.swapaxes(y, 1, 2) if trans_y else y
    if xt.shape[0] != yt.shape[0] and 1 not in (xt.shape[0], yt.shape[0]):
        raise ValueError(f"batch sizes {xt.shape[0]} and {yt.shape[0]} do not broadcast")
    return np.matmul(xt, yt).astype(out_dtype or x.dtype)
