"""Assertions that compare results: arrays within tolerance, IR up to renaming."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir import assert_structural_equal

__all__ = ["assert_allclose", "assert_prim_func_equal"]


def _as_numpy(x: Any) -> np.ndarray:
    """Return ``x`` as a numpy array: kiln NDArrays via ``.numpy()``/``.asnumpy()``."""
    for method in ("numpy", "asnumpy"):
        fn = getattr(x, method, None)
        if callable(fn) and not isinstance(x, np.ndarray):
            return np.asarray(fn())
    return np.asarray(x)


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """Assert that two arrays have the same shape and equal values within tolerance.

    Each argument may be a kiln NDArray, a numpy array or anything ``np.asarray`` accepts. The
    check is ``|actual - desired| <= atol + rtol * |desired|`` element-wise, with TVM's
    defaults; unlike ``np.testing.assert_allclose`` a shape mismatch is never broadcast away.
    """
    actual, desired = _as_numpy(actual), _as_numpy(desired)
    if actual.shape != desired.shape:
        raise AssertionError(f"shape mismatch: actual {actual.shape} vs desired {desired.shape}")
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, verbose=True)


def assert_prim_func_equal(actual: Any, expected: Any) -> None:
    """Assert two PrimFuncs (or any IR) are the same tree up to renaming of the variables and
    buffers they define (a PrimFunc's parameters included); raises ``ValueError`` showing both
    when not. ``tvm.ir.assert_structural_equal`` with TVM's defaults."""
    assert_structural_equal(actual, expected)
