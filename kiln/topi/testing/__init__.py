"""Numpy reference implementations of topi's operators (TVM's ``tvm.topi.testing``).

Tests compare a compiled operator with these: each is plain numpy (no kiln expression, no
schedule), computed in float64 and returned in the input's dtype unless it says otherwise.
Names and signatures are TVM's, so classic topi tests run unchanged::

    from tvm import topi
    import tvm.topi.testing
    ref = tvm.topi.testing.conv2d_nchw_python(a_np, w_np, stride=1, padding=1)

``import kiln.topi`` does not import this package; ``import kiln.topi.testing`` (or
``tvm.topi.testing`` under the alias) does.
"""

from .conv import (
    conv1d_ncw_python,
    conv2d_nchw_python,
    conv2d_nhwc_python,
    conv2d_transpose_nchw_python,
    depthwise_conv2d_python_nchw,
    depthwise_conv2d_python_nhwc,
)
from .dilate import dilate_python
from .matmul import batch_matmul
from .norm import lrn_python
from .pool import poolnd_python
from .softmax import log_softmax_python, softmax_python

__all__ = [
    "conv1d_ncw_python", "conv2d_nchw_python", "conv2d_nhwc_python",
    "conv2d_transpose_nchw_python", "depthwise_conv2d_python_nchw",
    "depthwise_conv2d_python_nhwc", "dilate_python", "batch_matmul", "lrn_python",
    "poolnd_python", "softmax_python", "log_softmax_python",
]
