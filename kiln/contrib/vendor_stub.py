"""Classic TVM's vendor-library offloads that kiln does not have (MKL, cuBLAS, cuDNN).

kiln generates its own CPU and CUDA code and links no vendor library, so these entry points
exist only to fail clearly at the user's call, naming what to use instead. As in a TVM build
without the library, ``tvm.get_global_func("tvm.contrib.cublas.matmul", True)`` is None,
which is how TVM's own tests decide to skip.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.errors import TVMError


def unavailable(library: str, func: str, instead: str) -> Callable:
    """A function that raises TVMError: ``tvm.contrib.<library>.<func>`` is not available,
    use ``instead``."""

    def stub(*args, **kwargs):
        raise TVMError(
            f"tvm.contrib.{library}.{func} is not available: kiln links no vendor library "
            f"({library}); {instead}")

    stub.__name__ = func
    stub.__qualname__ = func
    stub.__doc__ = f"Not available in kiln (no {library}): raises TVMError. {instead}."
    return stub
