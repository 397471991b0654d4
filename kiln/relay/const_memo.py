"""Weight transforms remembered per process: a model built again transforms no weight again.

:func:`memo_transform` returns ``fn(*arrays, **params)``: computed on the first call, and
for a later call with the same transform, the same parameters and input arrays of the same
dtype, shape and bytes (their :func:`~kiln.relay.fingerprint.fingerprint`) the array
computed then. The arrays it returns are read-only (shared by every build that asks;
``graph.const`` copies them into the graph). ``fn`` must be a pure function of its inputs.
The memo keeps at most :data:`MEMO_BYTES` of results, dropping the least recently used.
Used by batch-norm folding (``transform.fold_batch_norm``) and the layout pass's Winograd
weight transform (``alter_layout``): hashing a weight reads it once, where the transforms
compute in float64 (issue 23: a cached ResNet-18 rebuild spent a quarter of its Python on
them).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from .fingerprint import fingerprint

__all__ = ["MEMO_BYTES", "memo_transform"]

#: the most bytes of transformed weights kept (ResNet-18 and MobileNetV2 together: 75 MB)
MEMO_BYTES = 512 << 20

_MEMO: OrderedDict[str, np.ndarray] = OrderedDict()


def memo_transform(fn: Callable[..., np.ndarray], *arrays: np.ndarray,
                   **params) -> np.ndarray:
    """``fn(*arrays, **params)`` (read-only), remembered under the inputs' fingerprint."""
    key = fingerprint([f"{fn.__module__}.{fn.__qualname__}", list(arrays), params])
    out = _MEMO.get(key)
    if out is not None:
        _MEMO.move_to_end(key)
        return out
    out = np.asarray(fn(*arrays, **params))
    out.flags.writeable = False
    _MEMO[key] = out
    size = sum(v.nbytes for v in _MEMO.values())
    while size > MEMO_BYTES and len(_MEMO) > 1:
        size -= _MEMO.popitem(last=False)[1].nbytes
    return out
