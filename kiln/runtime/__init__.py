"""kiln runtime: devices, NDArrays, compiled modules and the C compiler driver.

The TVM-compatible surface: ``Device``/``cpu``/``cuda``/``device``, ``NDArray``, ``Module``,
``PackedFunc``, ``load_module`` and ``BenchmarkResult``.
"""

import os as _os

# OpenMP threads of compiled code spin briefly after a parallel region, then sleep.
# - Sleeping at once (OMP_WAIT_POLICY=passive alone) makes every region wait for its second
#   thread to wake up: ~65 us on a 2-core VM, against 2.6 us for a whole 25K-element pooling
#   kernel; a model of 25-56 kernels ran 1.5x slower (MobileNetV2 9.5-13.8 vs 5.7-8.5 ms,
#   ResNet-18 39 vs 26 ms, alternating processes).
# - Spinning long (libgomp's default 300000, milliseconds) made a machine with other work on
#   its cores wait milliseconds per region (2^20 vector add beside two busy processes: 8.0 ms,
#   against 0.36 ms sleeping and 1.05 ms with 10000 spins).
# Set either variable yourself to choose otherwise (GOMP_SPINCOUNT=0: sleep at once).
_os.environ.setdefault("OMP_WAIT_POLICY", "passive")
_os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from .convert import convert  # noqa: E402
from .device import Device, context, cpu, cuda, device, ext_dev, gpu  # noqa: E402
from .module import BenchmarkResult, Module, PackedFunc, load_module  # noqa: E402
from .ndarray import NDArray, array, empty  # noqa: E402
from .registry import (  # noqa: E402
    get_global_func,
    list_global_func_names,
    register_func,
    remove_global_func,
)

__all__ = [
    "register_func",
    "get_global_func",
    "list_global_func_names",
    "remove_global_func",
    "Device",
    "cpu",
    "cuda",
    "gpu",
    "device",
    "ext_dev",
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
