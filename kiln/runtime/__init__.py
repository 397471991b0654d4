"""kiln runtime: devices, NDArrays, compiled modules and the C compiler driver.

The TVM-compatible surface: ``Device``/``cpu``/``cuda``/``device``, ``NDArray``, ``Module``,
``PackedFunc``, ``load_module`` and ``BenchmarkResult``.
"""

import os as _os

# OpenMP threads of compiled code sleep between parallel regions instead of spinning: with
# spinning, a machine with other work on its cores made every parallel call wait milliseconds
# for its second thread (measured: 13 ms vs 0.26 ms for a 2^20 vector add on 2 busy cores).
# Set OMP_WAIT_POLICY=active yourself to trade that robustness for lower wake-up latency.
_os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from .convert import convert  # noqa: E402
from .device import Device, context, cpu, cuda, device, gpu  # noqa: E402
from .module import BenchmarkResult, Module, PackedFunc, load_module  # noqa: E402
from .ndarray import NDArray, array, empty  # noqa: E402

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
    "convert",
]
