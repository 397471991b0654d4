"""VTA's matrix-multiply tutorials: int8 x int8 -> int32 on the GEMM core, blocked along
the reduction, optionally shifted back to int8 by the ALU, with output blocks over virtual
threads (the optimized tutorial).

``matmul(env, ...)`` returns ``s, [A, B, C]`` in VTA's tiled layouts (A: ``o x n x BATCH x
BLOCK_IN``, B: ``m x n x BLOCK_OUT x BLOCK_IN``); ``matmul_reference`` is numpy's answer.
"""

import numpy as np

from kiln import te


def matmul(env, o=1, n=4, m=4, shift=0, ko_factor=None, vthreads=1):
    """VTA's matrix-multiply tutorial: C = int8((A @ B^T) >> shift), blocked along the
    reduction (``ko_factor`` input blocks per load) and, with ``vthreads`` > 1, over output
    blocks bound to virtual threads (the optimized tutorial)."""
    A = te.placeholder((o, n, env.BATCH, env.BLOCK_IN), name="A", dtype=env.inp_dtype)
    B = te.placeholder((m, n, env.BLOCK_OUT, env.BLOCK_IN), name="B", dtype=env.wgt_dtype)
    A_buf = te.compute((o, n, env.BATCH, env.BLOCK_IN), lambda *i: A(*i), "A_buf")
    B_buf = te.compute((m, n, env.BLOCK_OUT, env.BLOCK_IN), lambda *i: B(*i), "B_buf")
    ko = te.reduce_axis((0, n), name="ko")
    ki = te.reduce_axis((0, env.BLOCK_IN), name="ki")
    C_buf = te.compute(
        (o, m, env.BATCH, env.BLOCK_OUT),
        lambda bo, co, bi, ci: te.sum(
            A_buf[bo, ko, bi, ki].astype(env.acc_dtype)
            * B_buf[co, ko, ci, ki].astype(env.acc_dtype), axis=[ko, ki]),
        name="C_buf")
    last = C_buf
    if shift:
        last = te.compute(C_buf.shape, lambda *i: C_buf(*i) >> shift, name="C_shr")
    C = te.compute((o, m, env.BATCH, env.BLOCK_OUT),
                   lambda *i: last(*i).astype(env.inp_dtype), name="C")
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(env.inp_scope)
    s[B_buf].set_scope(env.wgt_scope)
    s[C_buf].set_scope(env.acc_scope)
    bo, co, bi, ci = s[C_buf].op.axis
    if vthreads > 1 or shift:
        b, oc, _, _ = s[C].op.axis
        tx, oc_out = s[C].split(oc, nparts=vthreads)
        s[C].reorder(tx, b, oc_out)
        if vthreads > 1:
            s[C].bind(tx, te.thread_axis("cthread"))
        s[C_buf].compute_at(s[C], tx)
        s[C].pragma(oc_out, env.dma_copy)
    else:
        s[C].pragma(s[C].op.axis[0], env.dma_copy)
    if shift:
        s[last].set_scope(env.acc_scope)
        s[last].compute_at(s[C], tx)
        s[last].pragma(s[last].op.axis[0], env.alu)
    ko_out, ko_in = s[C_buf].split(ko, factor=ko_factor or 1)
    s[C_buf].reorder(ko_out, bo, co, ko_in, bi, ci, ki)
    s[A_buf].compute_at(s[C_buf], ko_out)
    s[B_buf].compute_at(s[C_buf], ko_out)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    s[B_buf].pragma(s[B_buf].op.axis[0], env.dma_copy)
    s[C_buf].tensorize(bi, env.gemm)
    return s, [A, B, C]


def matmul_reference(env, a, b, shift=0):
    o, n, m = a.shape[0], a.shape[1], b.shape[0]
    a2 = a.transpose(0, 2, 1, 3).reshape(o * env.BATCH, n * env.BLOCK_IN).astype(np.int32)
    b2 = b.transpose(0, 2, 1, 3).reshape(m * env.BLOCK_OUT, n * env.BLOCK_IN).astype(np.int32)
    c = ((a2 @ b2.T) >> shift).astype(np.int8)
    return c.reshape(o, env.BATCH, m, env.BLOCK_OUT).transpose(0, 2, 1, 3)


def random_int8(shape, rng):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)
