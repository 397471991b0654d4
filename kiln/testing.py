"""Test helpers, available as ``tvm.testing`` under the alias.

Small on purpose: the closeness assertion the book uses (``tvm.testing.assert_allclose``) and
pytest decorators for tests that need a GPU or a C compiler. pytest is imported only by the
decorators, so importing this module never needs it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "assert_allclose",
    "has_gpu",
    "has_c_compiler",
    "requires_gpu",
    "uses_gpu",
    "requires_llvm",
    "requires_cuda",
    "device_enabled",
    "enabled_targets",
    "parameter",
    "fixture",
]

F = TypeVar("F", bound=Callable[..., Any])


def _as_numpy(x: Any) -> np.ndarray:
    """Return ``x`` as a numpy array: kiln NDArrays via ``.numpy()``/``.asnumpy()``."""
    for method in ("numpy", "asnumpy"):
        fn = getattr(x, method, None)
        if callable(fn) and not isinstance(x, np.ndarray):
            return np.asarray(fn())
    return np.asarray(x)


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 0) -> None:
    """Assert that two arrays have the same shape and equal values within tolerance.

    Each argument may be a kiln NDArray, a numpy array or anything ``np.asarray`` accepts. The
    check is ``|actual - desired| <= atol + rtol * |desired|`` element-wise, as in numpy;
    unlike ``np.testing.assert_allclose`` a shape mismatch is never broadcast away.
    """
    actual, desired = _as_numpy(actual), _as_numpy(desired)
    if actual.shape != desired.shape:
        raise AssertionError(f"shape mismatch: actual {actual.shape} vs desired {desired.shape}")
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, verbose=True)


def has_gpu() -> bool:
    """Return True when an NVIDIA GPU is usable from this process."""
    try:
        import kiln

        return bool(kiln.cuda(0).exist)
    except Exception:  # kiln's CUDA runtime missing or broken: fall back to the driver files
        return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


def has_c_compiler() -> bool:
    """Return True when the C compiler kiln's CPU backend uses ($CC, gcc, clang or cc) exists."""
    names = [os.environ["CC"].split()[0]] if os.environ.get("CC") else []
    return any(shutil.which(n) for n in [*names, "gcc", "clang", "cc"])


def uses_gpu(func: F) -> F:
    """Mark a test as exercising the GPU path (``gpu`` marker); it still runs without a GPU."""
    import pytest

    return pytest.mark.gpu(func)


def requires_gpu(func: F) -> F:
    """Mark a test ``gpu`` and skip it where no NVIDIA GPU is available."""
    import pytest

    func = pytest.mark.gpu(func)
    return pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")(func)


def requires_llvm(func: F) -> F:
    """Skip a test where kiln's CPU target cannot compile (no C compiler found).

    Named after TVM's decorator: kiln's ``llvm`` target is its C backend.
    """
    import pytest

    return pytest.mark.skipif(not has_c_compiler(), reason="needs a C compiler")(func)


requires_cuda = requires_gpu


def device_enabled(target: str) -> bool:
    """Whether tests may run on ``target`` here: ``llvm``/``c`` need a C compiler, ``cuda`` a
    GPU; anything else is not enabled."""
    kind = str(target).split()[0] if str(target).strip() else ""
    if kind in ("llvm", "c"):
        return has_c_compiler()
    if kind in ("cuda", "nvptx"):
        return has_gpu()
    return False


def enabled_targets() -> list[tuple[str, Any]]:
    """``[(target, device), ...]`` for every target enabled here (``llvm`` first)."""
    import kiln

    found = []
    if device_enabled("llvm"):
        found.append(("llvm", kiln.cpu(0)))
    if device_enabled("cuda"):
        found.append(("cuda", kiln.cuda(0)))
    return found


def parameter(*values: Any, ids: Any = None) -> Any:
    """A pytest fixture taking each of ``values`` in turn, named by the variable it is
    assigned to in a test module: ``size = tvm.testing.parameter(1, 10, 100)``."""
    import pytest

    def _param(request):
        return request.param

    return pytest.fixture(params=list(values), ids=ids)(_param)


def fixture(func: F | None = None, *, cache_return_value: bool = False) -> Any:
    """``@tvm.testing.fixture``: a pytest fixture (``cache_return_value`` is accepted; kiln
    does not cache across parametrizations)."""
    import pytest

    del cache_return_value
    if func is None:
        return pytest.fixture
    return pytest.fixture(func)
