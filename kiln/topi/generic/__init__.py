"""Default schedules (``topi.generic``): correct on every target, no optimization.

Each ``schedule_*(outs)`` takes the output tensor(s) of an operator (a tensor or a list) and
returns a ``te.Schedule`` in which every stage is computed at the root in its natural loop
order. The injective and reduction schedules also inline injective intermediate stages
(``AutoInlineInjective``); the others leave the stages as the compute defines them (a
convolution's padding stays a separate stage).
"""

from __future__ import annotations

from kiln import te
from kiln.te.tensor import ComputeOp

from ..utils import as_list


def schedule_default(outs, auto_inline: bool = False):
    """``te.create_schedule`` of ``outs``; with ``auto_inline`` the injective intermediate
    stages are inlined."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    if auto_inline:
        te.schedule.AutoInlineInjective(s)
    return s


default_schedule = schedule_default  # TVM's name


def schedule_injective_from_existing(sch, out):
    """The injective stage of ``out`` in ``sch`` with its axes fused into one loop."""
    st = sch[out.op]
    if len(st.op.axis) > 1:
        st.fuse(*st.op.axis)
    return sch


def schedule_injective(outs):
    """Injective operators (elementwise, broadcast, reshape, transpose, pad ...)."""
    return schedule_default(outs, auto_inline=True)


def schedule_reduce(outs):
    """Reductions (sum, max, min, mean, argmax ...)."""
    return schedule_default(outs, auto_inline=True)


def _plain(doc: str):
    def f(outs):
        return schedule_default(outs, auto_inline=False)

    f.__doc__ = doc
    return f


schedule_elemwise = schedule_injective
schedule_broadcast = schedule_injective
schedule_concatenate = schedule_injective
schedule_conv2d_nchw = _plain("conv2d_nchw.")
schedule_conv2d_nhwc = _plain("conv2d_nhwc.")
schedule_conv2d_NCHWc = _plain("conv2d_NCHWc.")  # noqa: N816
schedule_group_conv2d_nchw = _plain("group_conv2d_nchw.")
schedule_depthwise_conv2d_nchw = _plain("depthwise_conv2d_nchw.")
schedule_depthwise_conv2d_NCHWc = _plain("depthwise_conv2d_NCHWc.")  # noqa: N816
schedule_dense = _plain("dense.")
schedule_matmul = _plain("matmul.")
schedule_batch_matmul = _plain("batch_matmul.")
schedule_pool = _plain("pool2d / pool.")
schedule_adaptive_pool = _plain("adaptive_pool and global_pool.")
schedule_global_pool = schedule_adaptive_pool
schedule_softmax = _plain("softmax and log_softmax.")
schedule_layer_norm = _plain("layer_norm.")
schedule_batch_norm = _plain("batch_norm.")
schedule_extern = _plain("extern / opaque operators.")


def schedule_auto(outs):
    """Default schedule for any topi operator (injective stages inlined unless they feed a
    reduction-like stage that reads them several times)."""
    outs = as_list(outs)
    ops = [t.op for t in outs]
    if all(isinstance(op, ComputeOp) and not op.reduce_axis for op in ops):
        return schedule_default(outs, auto_inline=True)
    return schedule_default(outs, auto_inline=False)


__all__ = [
    "schedule_default", "default_schedule", "schedule_injective_from_existing",
    "schedule_injective", "schedule_elemwise", "schedule_broadcast", "schedule_concatenate",
    "schedule_reduce", "schedule_conv2d_nchw", "schedule_conv2d_nhwc", "schedule_conv2d_NCHWc",
    "schedule_group_conv2d_nchw", "schedule_depthwise_conv2d_nchw",
    "schedule_depthwise_conv2d_NCHWc", "schedule_dense", "schedule_matmul",
    "schedule_batch_matmul", "schedule_pool", "schedule_adaptive_pool", "schedule_global_pool",
    "schedule_softmax", "schedule_layer_norm", "schedule_batch_norm", "schedule_extern",
    "schedule_auto",
]
