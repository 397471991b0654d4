"""The GEMM tensor intrinsic ``env.gemm``: one ``BATCH x BLOCK_IN`` by ``BLOCK_OUT x
BLOCK_IN`` int8 product accumulated into a ``BATCH x BLOCK_OUT`` int32 tile.

``s[C_buf].tensorize(axis, env.gemm)`` replaces the loops from ``axis`` inward (a batch, an
output-channel and an input-channel block) by ``vta.uop_push(mode=0, reset, dst, src,
wgt)``: one micro-op whose operands are ``tvm_access_ptr`` addresses into the accumulator,
input and weight buffers (element offsets; the code generator divides them by the tile
size). Reductions split around the tensorized block use the reset form (``reset=1``) where
the accumulator is initialised, as TVM's ``vta.environment`` declares it.
"""

from __future__ import annotations

from kiln import te, tir

from .env import Environment

__all__ = ["gemm_intrin", "UOP_PUSH"]

#: the intrinsic the GEMM body calls (TVM's ``tir.vta.uop_push``)
UOP_PUSH = "vta.uop_push"


def gemm_intrin(env: Environment) -> te.TensorIntrin:
    """``env.gemm`` for configuration ``env``."""
    wgt = te.placeholder((env.BLOCK_OUT, env.BLOCK_IN), dtype=env.wgt_dtype, name=env.wgt_scope)
    inp = te.placeholder((env.BATCH, env.BLOCK_IN), dtype=env.inp_dtype, name=env.inp_scope)
    k = te.reduce_axis((0, env.BLOCK_IN), name="k")
    out = te.compute(
        (env.BATCH, env.BLOCK_OUT),
        lambda i, j: te.sum(inp[i, k].astype(env.acc_dtype) * wgt[j, k].astype(env.acc_dtype),
                            axis=[k]),
        name="out")
    layouts = {
        t: tir.decl_buffer(t.shape, t.dtype, scope, scope=scope,
                           offset_factor=int(t.shape[0]) * int(t.shape[1]))
        for t, scope in ((inp, env.inp_scope), (wgt, env.wgt_scope), (out, env.acc_scope))}

    def intrin_func(ins, outs):
        dinp, dwgt = ins
        dout = outs[0]

        def push(reset: int):
            src = dinp.access_ptr("r", "int32") if not reset else 0
            wgt_ptr = dwgt.access_ptr("r", "int32") if not reset else 0
            return tir.Evaluate(tir.call_intrin("int32", UOP_PUSH, 0, reset,
                                                dout.access_ptr("rw", "int32"), src, wgt_ptr,
                                                0, 0, 0))

        return push(0), push(1), push(0)

    return te.decl_tensor_intrin(out.op, intrin_func, name="GEMM", binds=layouts)
