"""VTA's getting-started tutorial: a vector add on the accumulator's ALU.

``vector_add(env)`` returns ``s, [A, B, C]``: A and B (int32) are copied into the
accumulator buffer (``env.dma_copy``), added by the ALU (``env.alu``) and stored as int8.
``python examples/vta/getting_started.py`` builds it, runs it on the simulator and prints
the instruction stream (docs/vta.md).
"""

from kiln import te


def vector_add(env, m=4, n=2):
    """VTA's getting-started tutorial: C = int8(A + B), A and B int32 in the accumulator."""
    A = te.placeholder((m, n, env.BATCH, env.BLOCK_OUT), name="A", dtype=env.acc_dtype)
    B = te.placeholder((m, n, env.BATCH, env.BLOCK_OUT), name="B", dtype=env.acc_dtype)
    A_buf = te.compute((m, n, env.BATCH, env.BLOCK_OUT), lambda *i: A(*i), "A_buf")
    B_buf = te.compute((m, n, env.BATCH, env.BLOCK_OUT), lambda *i: B(*i), "B_buf")
    C_buf = te.compute((m, n, env.BATCH, env.BLOCK_OUT),
                       lambda *i: A_buf(*i).astype(env.acc_dtype) + B_buf(*i).astype(env.acc_dtype),
                       name="C_buf")
    C = te.compute((m, n, env.BATCH, env.BLOCK_OUT),
                   lambda *i: C_buf(*i).astype(env.inp_dtype), name="C")
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(env.acc_scope)
    s[B_buf].set_scope(env.acc_scope)
    s[C_buf].set_scope(env.acc_scope)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    s[B_buf].pragma(s[B_buf].op.axis[0], env.dma_copy)
    s[C_buf].pragma(C_buf.op.axis[0], env.alu)
    s[C].pragma(s[C].op.axis[0], env.dma_copy)
    return s, [A, B, C]


if __name__ == "__main__":
    import numpy as np

    import kiln as tvm
    import kiln.vta as vta

    env = vta.get_env()
    s, (A, B, C) = vector_add(env)
    f = vta.build(s, [A, B, C], "ext_dev", env.target_host, name="my_vadd")
    print(f.get_source())
    ctx = tvm.ext_dev(0)
    a = np.random.randint(-128, 128, size=A.shape).astype(A.dtype)
    b = np.random.randint(-128, 128, size=B.shape).astype(B.dtype)
    c = tvm.nd.array(np.zeros(C.shape, C.dtype), ctx)
    f(tvm.nd.array(a, ctx), tvm.nd.array(b, ctx), c)
    np.testing.assert_equal(c.numpy(), (a + b).astype(C.dtype))
    print("correct;", vta.testing.simulator.stats())
