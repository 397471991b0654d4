"""Fingerprints of plain data: the keys of relay's caches (operator types, compiled kernels).

:func:`fingerprint` turns operator attributes, shapes or a PassContext config into JSON
text that is equal exactly when the data is: dict keys sorted, tuples as lists, numpy
arrays by dtype, shape and the SHA-256 of their bytes, numpy scalars by dtype and value.
Anything else (a function, a symbolic dimension, an object) raises :class:`NotPlainData`:
a key cannot tell such values apart, so the caller does not cache.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

__all__ = ["NotPlainData", "fingerprint"]


class NotPlainData(TypeError):
    """A value a fingerprint cannot describe (not JSON data nor a numpy value)."""


def fingerprint(value: Any) -> str:
    """``value`` as canonical JSON text; :class:`NotPlainData` when it is not plain data."""
    return json.dumps(_canonical(value), allow_nan=True)


def _canonical(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise NotPlainData("a dict with keys that are not strings")
        return {k: _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, np.ndarray):
        return ["ndarray", value.dtype.str, list(value.shape),
                hashlib.sha256(np.ascontiguousarray(value).data).hexdigest()]
    if isinstance(value, np.generic):
        return ["scalar", value.dtype.str, value.item()]
    raise NotPlainData(type(value).__name__)
