"""CUDA schedules (``topi.cuda``), under TVM's names.

Each ``schedule_*(outs)`` takes the output tensor(s) of an operator, possibly followed by an
elementwise epilogue, and returns a ``te.Schedule`` for target ``cuda``: one GPU thread per
output element, threads per block from the current target (``with
tvm.target.Target("cuda -max_num_threads=256"):``, 1024 outside one). They are correct for
every topi operator and not tuned (see :mod:`kiln.topi.cuda.per_thread`), except these,
which have schedules of their own: depthwise convolution (:mod:`.depthwise`: output tiles,
input window in shared memory), long reductions, global pooling and softmax
(:mod:`.reduction`, :mod:`.pooling`, :mod:`.softmax`: a block of threads per output),
and the AutoTVM templates ``conv2d_nchw.cuda`` (:mod:`.conv2d`, direct),
``conv2d_nchw_implicit_gemm.cuda`` (:mod:`.conv2d_gemm`), ``dense_large_batch.cuda``
and ``matmul.cuda`` (:mod:`.dense`), scheduled with a tuned config inside
``autotvm.apply_history_best`` and with their fallback config elsewhere.
"""

from __future__ import annotations

from .conv2d import conv2d_nchw, schedule_conv2d_nchw
from .conv2d_gemm import conv2d_nchw_implicit_gemm
from .dense import dense, schedule_dense
from .depthwise import depthwise_conv2d_nchw, schedule_depthwise_conv2d_nchw
from .injective import bind_flat, max_threads, schedule_injective_from_existing
from .per_thread import schedule_per_thread
from .pooling import schedule_adaptive_pool, schedule_global_pool, schedule_pool
from .reduction import schedule_reduce
from .softmax import schedule_softmax


def _named(name: str, what: str):
    def schedule(outs):
        return schedule_per_thread(outs)

    schedule.__name__ = schedule.__qualname__ = name
    schedule.__doc__ = f"{what}: one GPU thread per output element (``schedule_per_thread``)."
    return schedule


schedule_injective = _named("schedule_injective",
                            "Injective operators (elementwise, broadcast, reshape, pad ...)")
schedule_elemwise = schedule_injective
schedule_broadcast = schedule_injective
schedule_concatenate = schedule_injective
schedule_batch_norm = schedule_injective
schedule_dense_small_batch = _named("schedule_dense_small_batch", "dense")
schedule_dense_large_batch = schedule_dense
schedule_matmul = _named("schedule_matmul", "matmul")
schedule_batch_matmul = _named("schedule_batch_matmul", "batch_matmul")
schedule_conv2d_nhwc = _named("schedule_conv2d_nhwc", "conv2d_nhwc (padding inlined)")
schedule_group_conv2d_nchw = _named("schedule_group_conv2d_nchw", "group_conv2d_nchw")
schedule_conv2d_NCHWc = _named("schedule_conv2d_NCHWc", "conv2d_NCHWc")  # noqa: N816
schedule_depthwise_conv2d_NCHWc = _named(  # noqa: N816
    "schedule_depthwise_conv2d_NCHWc", "depthwise_conv2d_NCHWc")
schedule_layer_norm = _named("schedule_layer_norm", "layer_norm")
schedule_auto = _named("schedule_auto", "Any topi operator")
schedule_extern = _named("schedule_extern", "Opaque operators")

__all__ = [
    "max_threads", "bind_flat", "schedule_per_thread", "schedule_injective_from_existing",
    "schedule_injective", "schedule_elemwise", "schedule_broadcast", "schedule_concatenate",
    "schedule_reduce", "schedule_softmax", "schedule_dense_small_batch",
    "schedule_dense_large_batch", "schedule_dense", "schedule_matmul", "schedule_batch_matmul",
    "schedule_pool", "schedule_adaptive_pool", "schedule_global_pool", "schedule_conv2d_nchw",
    "schedule_conv2d_nhwc", "schedule_group_conv2d_nchw", "schedule_depthwise_conv2d_nchw",
    "depthwise_conv2d_nchw", "conv2d_nchw", "conv2d_nchw_implicit_gemm", "dense",
    "schedule_conv2d_NCHWc", "schedule_depthwise_conv2d_NCHWc", "schedule_layer_norm",
    "schedule_batch_norm", "schedule_extern", "schedule_auto",
]
