"""CUDA schedules of pooling.

* ``schedule_pool`` (``pool2d``, max or average, any layout): one thread per output element,
  the padding read through (inlined) and the window a loop in the thread; an average's
  division and any elementwise epilogue are fused into the store.
* ``schedule_adaptive_pool`` (``adaptive_pool``, ``global_pool``): a reduction
  (:func:`~kiln.topi.cuda.reduction.schedule_reduce`): a window of at least
  :data:`~kiln.topi.cuda.reduction.BLOCK_REDUCE_MIN` elements (a global pool over 16x16 or
  more) is reduced by a block of threads per output element, a smaller one (ResNet's and
  MobileNet's 7x7) by one thread per output element.
"""

from __future__ import annotations

from .per_thread import schedule_per_thread
from .reduction import schedule_reduce


def schedule_pool(outs, layout: str = "NCHW"):
    """pool2d / pool for CUDA: one thread per output element (``layout`` is not needed)."""
    del layout
    return schedule_per_thread(outs)


def schedule_adaptive_pool(outs, layout: str = "NCHW"):
    """adaptive_pool and global_pool for CUDA: a block reduction for large windows."""
    del layout
    return schedule_reduce(outs)


schedule_global_pool = schedule_adaptive_pool

__all__ = ["schedule_pool", "schedule_adaptive_pool", "schedule_global_pool"]
