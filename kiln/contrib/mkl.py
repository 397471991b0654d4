"""``tvm.contrib.mkl``: not available (kiln links no MKL); each function raises TVMError."""

from .vendor_stub import unavailable

__all__ = ["matmul", "matmul_u8s8s32", "batch_matmul"]

_INSTEAD = ("use tvm.contrib.cblas (the same API, numpy's BLAS through a packed function) or "
            "a te.compute matmul")
matmul = unavailable("mkl", "matmul", _INSTEAD)
matmul_u8s8s32 = unavailable("mkl", "matmul_u8s8s32", _INSTEAD)
batch_matmul = unavailable("mkl", "batch_matmul", _INSTEAD)
