"""kiln runtime: devices, NDArrays, compiled modules and the C compiler driver.

The TVM-compatible surface: ``Device``/``cpu``/``cuda``/``device``, ``NDArray``, ``Module``,
``PackedFunc``, ``load_module`` and ``BenchmarkResult``.
"""

from .device import Device, context, cpu, cuda, device, gpu
from .module import BenchmarkResult, Module, PackedFunc, load_module
from .ndarray import NDArray, array, empty

__all__ = [
    "Device",
    "cpu",
    "cuda",
    "gpu",
    "device",
    "context",
    "NDArray",
    "array",
    "empty",
    "Module",
    "PackedFunc",
    "load_module",
    "BenchmarkResult",
]
