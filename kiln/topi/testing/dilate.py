"""``dilate_python``: spread an array's elements apart (the reference of ``topi.nn.dilate``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def dilate_python(input_np: np.ndarray, strides: Sequence[int],
                  dilation_value: float = 0.0) -> np.ndarray:
    """Insert ``strides[i] - 1`` copies of ``dilation_value`` between neighbours along axis
    ``i``: an axis of length ``n`` becomes ``(n - 1) * strides[i] + 1`` long."""
    if len(strides) != input_np.ndim:
        raise ValueError(f"{len(strides)} strides for an array of rank {input_np.ndim}")
    shape = tuple((n - 1) * s + 1 for n, s in zip(input_np.shape, strides, strict=True))
    out = np.full(shape, dilation_value, dtype=input_np.dtype)
    out[tuple(slice(None, None, s) for s in strides)] = input_np
    return out
