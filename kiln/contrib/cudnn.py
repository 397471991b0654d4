"""``tvm.contrib.cudnn``: not available (kiln links no cuDNN); each function raises
TVMError."""

from .vendor_stub import unavailable

__all__ = ["conv_forward", "softmax"]

_INSTEAD = "use topi.cuda.conv2d_nchw / topi.nn.softmax, which kiln schedules for CUDA itself"
conv_forward = unavailable("cudnn", "conv_forward", _INSTEAD)
softmax = unavailable("cudnn", "softmax", _INSTEAD)
