"""Optimized CPU schedules (``topi.x86``).

Each ``schedule_*(outs)`` takes the output tensor(s) of an operator — possibly followed by
elementwise operators fused after it (bias, relu, residual add), as a graph compiler's fused
group — and returns a ``te.Schedule``: outer loops parallel (OpenMP), inner loops vectorized,
reductions register-blocked. :func:`schedule_auto` picks the schedule from the tags of the
operations it finds.
"""

from __future__ import annotations

from ..utils import all_ops, as_list
from ._common import lanes, vector_registers
from .batch_matmul import schedule_batch_matmul, schedule_matmul
from .bf16 import schedule_conv2d_bf16
from .conv2d import (
    schedule_conv2d_nchw,
    schedule_conv2d_NCHWc,
    schedule_conv2d_nhwc,
    schedule_depthwise_conv2d_nchw,
    schedule_depthwise_conv2d_NCHWc,
    schedule_group_conv2d_nchw,
)
from .dense import schedule_dense
from .dense_bf16 import schedule_dense_bf16
from .injective import (
    schedule_batch_norm,
    schedule_broadcast,
    schedule_elemwise,
    schedule_injective,
    schedule_injective_from_existing,
)
from .int8 import schedule_conv2d_int8, schedule_dense_int8
from .packed_dense import dense_pack, schedule_dense_pack
from .pooling import schedule_adaptive_pool, schedule_global_pool, schedule_pool
from .reduction import schedule_reduce
from .softmax import schedule_layer_norm, schedule_softmax
from .winograd import schedule_conv2d_winograd_NCHWc

#: tag of the anchor operation -> its schedule, in order of precedence.
SCHEDULE_BY_TAG = (
    ("conv2d_int8", schedule_conv2d_int8),
    ("conv2d_bf16", schedule_conv2d_bf16),
    ("dense_bf16", schedule_dense_bf16),
    ("dense_int8", schedule_dense_int8),
    ("conv2d_NCHWc_winograd", schedule_conv2d_winograd_NCHWc),
    ("conv2d_NCHWc", schedule_conv2d_NCHWc),
    ("depthwise_conv2d_NCHWc", schedule_depthwise_conv2d_NCHWc),
    ("conv2d_nchw", schedule_conv2d_nchw),
    ("group_conv2d_nchw", schedule_group_conv2d_nchw),
    ("depthwise_conv2d_nchw", schedule_depthwise_conv2d_nchw),
    ("conv2d_nhwc", schedule_conv2d_nhwc),
    ("dense_pack", schedule_dense_pack),
    ("dense", schedule_dense),
    ("matmul", schedule_matmul),
    ("batch_matmul", schedule_batch_matmul),
    ("pool_max", schedule_pool),
    ("pool_sum", schedule_pool),
    ("adaptive_pool_max", schedule_adaptive_pool),
    ("adaptive_pool_sum", schedule_adaptive_pool),
    ("global_pool_max", schedule_adaptive_pool),
    ("global_pool_sum", schedule_adaptive_pool),
    ("softmax_output", schedule_softmax),
    ("log_softmax_output", schedule_softmax),
    ("layer_norm", schedule_layer_norm),
)


def schedule_auto(outs):
    """The x86 schedule for whatever topi computation produces ``outs``: the schedule of the
    most complex tagged operation found (convolution, dense, pooling, softmax ...), else the
    reduction schedule when there is a reduction, else the injective one."""
    outs = as_list(outs)
    tags = {getattr(op, "tag", "") or "" for op in all_ops(outs)}
    for t, fn in SCHEDULE_BY_TAG:
        if t in tags:
            return fn(outs)
    if any(getattr(op, "reduce_axis", None) for op in all_ops(outs)):
        return schedule_reduce(outs)
    return schedule_injective(outs)


schedule_concatenate = schedule_injective
schedule_dense_nopack = schedule_dense


def schedule_extern(outs):
    """Opaque operators: the default schedule with injective stages inlined."""
    from ..generic import schedule_default

    return schedule_default(outs, auto_inline=True)


__all__ = [
    "schedule_injective", "schedule_injective_from_existing", "schedule_elemwise",
    "schedule_broadcast", "schedule_concatenate", "schedule_batch_norm", "schedule_reduce",
    "schedule_dense_nopack", "schedule_dense_pack", "schedule_conv2d_nchw",
    "schedule_group_conv2d_nchw", "schedule_conv2d_nhwc", "schedule_conv2d_NCHWc",
    "schedule_depthwise_conv2d_nchw", "schedule_depthwise_conv2d_NCHWc", "schedule_dense",
    "schedule_matmul", "schedule_batch_matmul", "schedule_pool", "schedule_adaptive_pool",
    "schedule_global_pool", "schedule_softmax", "schedule_layer_norm", "schedule_auto",
    "schedule_extern", "SCHEDULE_BY_TAG", "lanes", "vector_registers",
    "schedule_conv2d_winograd_NCHWc", "schedule_conv2d_int8", "schedule_dense_int8",
    "schedule_conv2d_bf16", "schedule_dense_bf16", "dense_pack",
]
