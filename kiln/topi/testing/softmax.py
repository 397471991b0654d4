"""``softmax_python`` and ``log_softmax_python`` (references of ``topi.nn.softmax`` and
``topi.nn.log_softmax``), numerically stable: the maximum along ``axis`` is subtracted first."""

from __future__ import annotations

import numpy as np


def _shifted(a_np: np.ndarray, axis: int) -> np.ndarray:
    a = a_np.astype(np.float64)
    return a - a.max(axis=axis, keepdims=True)


def softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """``exp(a) / sum(exp(a))`` along ``axis`` (TVM's default: axis 1, the class axis)."""
    e = np.exp(_shifted(a_np, axis))
    return (e / e.sum(axis=axis, keepdims=True)).astype(a_np.dtype)


def log_softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """``a - log(sum(exp(a)))`` along ``axis``."""
    s = _shifted(a_np, axis)
    return (s - np.log(np.exp(s).sum(axis=axis, keepdims=True))).astype(a_np.dtype)
