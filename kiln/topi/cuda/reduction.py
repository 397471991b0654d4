"""CUDA schedule of reductions: a block of threads per output element when the reduction is
long, one thread per output element otherwise.

kiln's CUDA backend has no warp-shuffle all-reduce (TVM's ``tvm_thread_allreduce``); the
block reduction is built from schedule primitives alone (:func:`block_reduce`): ``rfactor``
splits the reduction into one partial per thread of the block, kept in shared memory, and
after the barrier every thread combines the partials into its own register copy of the
result::

    blockIdx.x: output element b
      threadIdx.x: t
        R.rf[t] = sum(A[b, k*T + t] for k)       // shared, one partial per thread
      __syncthreads()
      R.local = sum(R.rf[t'] for t' < T)        // every thread, in registers
      out[b] = epilogue(R.local)                // every thread stores the same value

Short reductions (fewer than :data:`BLOCK_REDUCE_MIN` elements, e.g. a 7x7 global pool),
multi-output reductions (argmax) and reductions to a scalar stay one thread per output
element (:func:`~kiln.topi.cuda.per_thread.schedule_per_thread`).
"""

from __future__ import annotations

from kiln import te
from kiln.te.tensor import ComputeOp, Operation

from ..utils import all_ops, as_list, get_const_int, traverse_inline
from .per_thread import schedule_per_thread

#: reductions over at least this many elements get a block of threads per output element
BLOCK_REDUCE_MIN = 128


def reduce_extent(op: ComputeOp) -> int:
    """The number of elements each output of ``op`` combines (constant shapes)."""
    n = 1
    for iv in op.reduce_axis:
        n *= get_const_int(iv.dom.extent)
    return n


def block_threads(extent: int) -> int:
    """Threads of a block reducing ``extent`` elements: 64, or 256 past 16384 elements."""
    return 64 if extent <= 16384 else 256


def block_reduce(s, red: Operation, stage, axis, threads: int) -> None:
    """Compute the reduction ``red`` (one output, its ``local`` result read only inside
    ``stage``) at ``axis`` of ``stage`` (a loop over blocks) with ``threads`` threads:
    partials in shared memory bound to ``threadIdx.x``, combined by every thread."""
    st = s[red]
    k = st.fuse(*st.op.reduce_axis) if len(st.op.reduce_axis) > 1 else st.op.reduce_axis[0]
    _, ki = st.split(k, factor=threads)
    rf = s.rfactor(red.output(0), ki)
    s[rf].set_scope("shared")
    s[rf].compute_at(stage, axis)
    s[rf].bind(s[rf].op.axis[0], te.thread_axis("threadIdx.x"))
    st.set_scope("local")
    st.compute_at(stage, axis)


def _block_reducible(op: Operation) -> bool:
    return (isinstance(op, ComputeOp) and bool(op.reduce_axis) and op.num_outputs == 1
            and bool(op.axis) and reduce_extent(op) >= BLOCK_REDUCE_MIN)


def schedule_reduce(outs):
    """sum / max / min / prod / mean (and a pooling reduction) over any axes: one output
    whose long reduction is :func:`block_reduce`-d, one block per output element; anything
    else one thread per output element."""
    outs = as_list(outs)
    s = te.create_schedule([t.op for t in outs])
    for t in outs:
        traverse_inline(s, t.op, lambda op: None)
    reductions = [op for op in all_ops(outs)
                  if isinstance(op, ComputeOp) and op.reduce_axis
                  and s[op].attach_type != "inline"]
    if len(outs) != 1 or len(reductions) != 1 or not _block_reducible(reductions[0]):
        return schedule_per_thread(outs)
    red, out = reductions[0], outs[0]
    if [str(d) for d in red.output(0).shape] != [str(d) for d in out.shape]:
        return schedule_per_thread(outs)  # e.g. a reshape after the reduction
    if red is out.op:  # the reduction is the output: accumulate in a register copy
        red = s.cache_write(out, "local").op
    stage = s[out.op]
    axes = list(stage.op.axis)
    bx = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    stage.bind(bx, te.thread_axis("blockIdx.x"))
    block_reduce(s, red, stage, bx, block_threads(reduce_extent(red)))
    return s


__all__ = ["BLOCK_REDUCE_MIN", "block_reduce", "block_threads", "reduce_extent",
           "schedule_reduce"]
