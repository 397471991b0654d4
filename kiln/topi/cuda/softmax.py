"""CUDA schedule of softmax and log_softmax over the last axis: one kernel, a block per row.

The row's maximum and sum of exponentials are block reductions
(:func:`~kiln.topi.cuda.reduction.block_reduce`: per-thread partials in shared memory, then
every thread combines them in registers); the exponential is recomputed where it is read
rather than stored; the output row is written by the block's threads, consecutive threads
consecutive elements::

    blockIdx.x: row r
      M.rf[t] = max(x[r, k*T + t] for k);      __syncthreads();  M = max(M.rf[:])
      S.rf[t] = sum(exp(x[r, k*T + t] - M));   __syncthreads();  S = sum(S.rf[:])
      for k: out[r, k*T + t] = exp(x[r, k*T + t] - M) / S      // threadIdx.x: t

Softmax over another axis, or over fewer than
:data:`~kiln.topi.cuda.reduction.BLOCK_REDUCE_MIN` elements, is one thread per output
element with a kernel per stage (:func:`~kiln.topi.cuda.per_thread.schedule_per_thread`).
"""

from __future__ import annotations

from kiln import te

from ..utils import all_ops, as_list, get_const_int
from .per_thread import schedule_per_thread
from .reduction import BLOCK_REDUCE_MIN, block_reduce, block_threads

_REDUCTIONS = ("T_softmax_maxelem", "T_softmax_expsum")


def schedule_softmax(outs):
    """softmax / log_softmax (``topi.nn.softmax``, ``topi.nn.log_softmax``) for CUDA."""
    outs = as_list(outs)
    out = outs[0]
    axis = (out.op.attrs or {}).get("axis")
    ops = {op.name: op for op in all_ops(outs)}
    extent = get_const_int(out.shape[axis]) if axis is not None else 0
    if (len(outs) != 1 or axis != len(out.shape) - 1 or extent < BLOCK_REDUCE_MIN
            or any(name not in ops for name in _REDUCTIONS)):
        return schedule_per_thread(outs)
    s = te.create_schedule(out.op)
    if "T_softmax_exp" in ops:
        s[ops["T_softmax_exp"]].compute_inline()
    threads = block_threads(extent)
    stage = s[out.op]
    *rows, col = stage.op.axis
    row = stage.fuse(*rows) if len(rows) > 1 else rows[0] if rows else None
    if row is None:  # a 1-D softmax: one block
        row, col = stage.split(col, nparts=1)
    _, tx = stage.split(col, factor=threads)
    stage.bind(row, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))
    for name in _REDUCTIONS:
        block_reduce(s, ops[name], stage, row, threads)
    return s


__all__ = ["schedule_softmax"]
