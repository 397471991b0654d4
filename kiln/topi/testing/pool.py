"""``poolnd_python``: max/avg pooling over the spatial axes of a channels-first array,
window by window (the reference of ``topi.nn.pool1d/pool2d/pool3d``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def _out_size(size: int, k: int, s: int, d: int, before: int, after: int,
              ceil_mode: bool) -> int:
    """Output length along one axis; in ceil mode the last window must start inside the
    input or its leading padding (TVM's rule)."""
    span = size + before + after - ((k - 1) * d + 1)
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    return out - 1 if (out - 1) * s >= size + before else out


def poolnd_python(np_data: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
                  dilation: Sequence[int], padding_before: Sequence[int],
                  padding_after: Sequence[int], pool_type: str, count_include_pad: bool = True,
                  ceil_mode: bool = False, dtype: str = "float32",
                  layout: str | None = None) -> np.ndarray:
    """Pool ``np_data`` ``[N, C, *spatial]`` (layout ``NCW``/``NCHW``/``NCDHW`` or None).

    ``pool_type`` is ``"max"`` (padding never wins) or ``"avg"`` (the sum over the input
    elements of the window divided by their count, or, with ``count_include_pad``, by the
    count of window positions inside the input and its explicit padding; positions added by
    ``ceil_mode`` never count)."""
    if layout is not None and not (layout.startswith("NC") and layout[2:].isalpha()
                                   and layout[2:].isupper()):
        raise ValueError(f"poolnd_python supports channels-first layouts only, got {layout!r}")
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    spatial = np_data.shape[2:]
    params = list(zip(spatial, kernel, strides, dilation, padding_before, padding_after,
                      strict=True))
    out_shape = [_out_size(*p, ceil_mode) for p in params]
    data = np_data.astype(np.float64)
    out = np.zeros(np_data.shape[:2] + tuple(out_shape))
    for pos in itertools.product(*(range(o) for o in out_shape)):
        taps = [[o * s - b + t * d for t in range(k)]
                for o, (_, k, s, d, b, _) in zip(pos, params, strict=True)]
        inside = [[i for i in axis if 0 <= i < n] for axis, n in zip(taps, spatial, strict=True)]
        window = data[(..., *np.ix_(*inside))] if all(inside) else None
        if pool_type == "max":
            val = window.max(axis=tuple(range(2, data.ndim))) if window is not None else -np.inf
        else:
            counted = inside if not count_include_pad else [
                [i for i in axis if -b <= i < n + a]
                for axis, (n, _, _, _, b, a) in zip(taps, params, strict=True)]
            count = int(np.prod([len(c) for c in counted]))
            total = window.sum(axis=tuple(range(2, data.ndim))) if window is not None else 0.0
            val = total / max(count, 1)
        out[(..., *pos)] = val
    return out.astype(dtype)
