"""Neural-network operators (``topi.nn``): convolutions, dense, pooling, normalization,
activations, softmax, padding."""

from .conv2d import conv2d, conv2d_nchw, conv2d_NCHWc, conv2d_nhwc, group_conv2d_nchw
from .dense import batch_matmul, dense, matmul
from .depthwise_conv2d import depthwise_conv2d_nchw, depthwise_conv2d_NCHWc
from .elemwise import bias_add, gelu, leaky_relu, prelu, relu
from .flatten import flatten
from .norm import batch_norm, layer_norm
from .pad import pad, pad_masked
from .pooling import adaptive_pool, global_pool, pool, pool2d
from .softmax import fast_softmax, log_softmax, softmax
from .utils import conv_out_size, get_pad_tuple
from .winograd import conv2d_winograd_NCHWc, winograd_tile, winograd_weight_transform

__all__ = [
    "conv2d", "conv2d_nchw", "conv2d_nhwc", "group_conv2d_nchw", "conv2d_NCHWc",
    "depthwise_conv2d_nchw", "depthwise_conv2d_NCHWc", "dense", "matmul", "batch_matmul", "relu",
    "leaky_relu", "prelu", "gelu", "bias_add", "flatten", "batch_norm", "layer_norm", "pad",
    "pad_masked", "pool2d",
    "pool", "global_pool", "adaptive_pool", "softmax", "fast_softmax", "log_softmax",
    "get_pad_tuple",
    "conv_out_size", "conv2d_winograd_NCHWc", "winograd_weight_transform", "winograd_tile",
]
