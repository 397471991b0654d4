"""``kiln.nd``: the NDArray API under TVM's ``tvm.nd`` name."""

from .runtime.device import cpu, cuda, device, gpu
from .runtime.dlpack import from_dlpack
from .runtime.ndarray import NDArray, array, empty

__all__ = ["array", "empty", "from_dlpack", "NDArray", "cpu", "cuda", "gpu", "device"]
