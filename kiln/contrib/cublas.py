"""``tvm.contrib.cublas``: not available (kiln links no cuBLAS); each function raises
TVMError."""

from .vendor_stub import unavailable

__all__ = ["matmul", "batch_matmul"]

_INSTEAD = ("write the product with te.compute and schedule it for CUDA (topi.nn.matmul, "
            "topi.nn.batch_matmul), or use tvm.contrib.cblas on the CPU")
matmul = unavailable("cublas", "matmul", _INSTEAD)
batch_matmul = unavailable("cublas", "batch_matmul", _INSTEAD)
