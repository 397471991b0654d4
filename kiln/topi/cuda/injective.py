"""CUDA schedule of one injective stage: every element its own GPU thread.

The stage's axes are fused into one loop, split by the threads per block, and the two parts
bound to ``blockIdx.x`` and ``threadIdx.x`` (TVM's ``topi.cuda.schedule_injective``)::

    for (i, 0, 64) for (j, 0, 100)       s[C]         blockIdx.x (25) / threadIdx.x (256)
      C[i, j] = A[i, j] + B[i, j]   -->  schedule   if (likely(bx*256 + tx < 6400)) C[...] = ...
"""

from __future__ import annotations

from kiln import te
from kiln.target import Target
from kiln.te.tensor import ComputeOp, Tensor

#: threads per block outside a ``with tvm.target.Target("cuda")`` scope (TVM's default)
DEFAULT_THREADS = 1024


def max_threads() -> int:
    """Threads per block: the current CUDA target's ``max_num_threads`` (1024 by default,
    ``cuda -max_num_threads=N`` to change it)."""
    target = Target.current()
    if target is None or target.is_cpu:
        return DEFAULT_THREADS
    return target.max_num_threads


def bind_flat(stage, axes=None) -> tuple:
    """Fuse ``axes`` (the stage's data axes by default), split the fused loop by
    :func:`max_threads` and bind it to ``blockIdx.x``/``threadIdx.x``; returns
    ``(block axis, thread axis)``. A stage without data axes (a reduction to a scalar)
    cannot be spread over threads without a cross-thread reduction, which kiln's CUDA
    backend does not have."""
    axes = list(stage.op.axis if axes is None else axes)
    if not axes:
        raise NotImplementedError(
            f"topi.cuda: stage '{stage.op.name}' has no data axis to bind to GPU threads (a "
            f"reduction to a scalar needs a cross-thread reduction, which kiln's CUDA backend "
            f"does not have yet); reduce with keepdims=True")
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = stage.split(fused, factor=max_threads())
    stage.bind(bx, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))
    return bx, tx


def schedule_injective_from_existing(sch, out):
    """Bind the stage of ``out`` in ``sch`` one element per thread; returns ``sch``."""
    op = out.op if isinstance(out, Tensor) else out
    if isinstance(op, ComputeOp):
        bind_flat(sch[op])
    return sch
