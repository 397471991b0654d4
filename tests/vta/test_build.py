"""vta.build on VTA's tutorial programs, bit-exact on the simulator, through the ``tvm`` /
``vta`` alias (kiln/vta/build_module.py, codegen.py, passes/)."""

import numpy as np
import pytest

from kiln import alias, te
from kiln.vta.isa import GemmInsn, MemId, MemInsn, Opcode

from . import ports

RNG = np.random.default_rng(7)


@pytest.fixture
def tvm_vta():
    alias.install_as_tvm()
    import tvm
    import vta

    yield tvm, vta
    alias.uninstall_as_tvm()


def test_getting_started_vector_add(tvm_vta):
    tvm, vta = tvm_vta
    env = vta.get_env()
    s, (A, B, C) = ports.vector_add(env)
    f = vta.build(s, [A, B, C], "ext_dev", env.target_host, name="my_vadd")
    ctx = tvm.ext_dev(0)
    a = RNG.integers(-128, 128, A.shape).astype(A.dtype)
    b = RNG.integers(-128, 128, B.shape).astype(B.dtype)
    a_nd, b_nd = tvm.nd.array(a, ctx), tvm.nd.array(b, ctx)
    c_nd = tvm.nd.array(np.zeros(C.shape, C.dtype), ctx)
    vta.testing.simulator.clear_stats()
    f(a_nd, b_nd, c_nd)
    np.testing.assert_equal(c_nd.numpy(), (a + b).astype(C.dtype))
    stats = vta.testing.simulator.stats()
    assert stats["acc_load_nbytes"] == a.nbytes + b.nbytes
    assert stats["out_store_nbytes"] == c_nd.numpy().nbytes
    assert stats["alu_counter"] > 0 and stats["cycles"] > 0


@pytest.mark.parametrize("ko_factor", [1, 2])
def test_blocked_matmul(tvm_vta, ko_factor):
    tvm, vta = tvm_vta
    env = vta.get_env()
    s, (A, B, C) = ports.matmul(env, o=1, n=4, m=3, ko_factor=ko_factor)
    f = vta.build(s, [A, B, C], "ext_dev", env.target_host)
    a, b = ports.random_int8(A.shape, RNG), ports.random_int8(B.shape, RNG)
    ctx = tvm.ext_dev(0)
    c_nd = tvm.nd.array(np.zeros(C.shape, "int8"), ctx)
    vta.testing.simulator.clear_stats()
    f(tvm.nd.array(a, ctx), tvm.nd.array(b, ctx), c_nd)
    np.testing.assert_equal(c_nd.numpy(), ports.matmul_reference(env, a, b))
    stats = vta.testing.simulator.stats()
    assert stats["gemm_counter"] == 1 * 4 * 3  # one micro-op per (batch, in, out) block
    assert stats["wgt_load_nbytes"] == b.nbytes and stats["inp_load_nbytes"] == a.nbytes


@pytest.mark.parametrize("vthreads", [1, 2])
def test_matmul_shift_to_int8_with_virtual_threads(tvm_vta, vthreads):
    """int8 x int8 -> int32 -> (>> 5) -> int8, output blocks over virtual threads."""
    tvm, vta = tvm_vta
    env = vta.get_env()
    s, (A, B, C) = ports.matmul(env, o=1, n=4, m=4, shift=5, ko_factor=2, vthreads=vthreads)
    f = vta.build(s, [A, B, C], "ext_dev", env.target_host)
    a, b = ports.random_int8(A.shape, RNG), ports.random_int8(B.shape, RNG)
    c = np.zeros(C.shape, "int8")
    f(a, b, c)  # host arrays are copied in and out
    np.testing.assert_equal(c, ports.matmul_reference(env, a, b, shift=5))


def test_virtual_threads_overlap_load_and_compute(tvm_vta):
    """With two virtual threads a GEMM of one thread runs while the other thread's next
    tiles load: the tokens let the modules overlap."""
    _, vta = tvm_vta
    env = vta.get_env()
    s, args = ports.matmul(env, o=1, n=4, m=4, shift=5, ko_factor=1, vthreads=2)
    prog = vta.build(s, args, "ext_dev").program
    from kiln.vta.timing import schedule

    t = schedule(prog.insns, env)
    gemms = [i for i, x in enumerate(prog.insns) if isinstance(x, GemmInsn)
             and not x.reset_reg and x.uop_end > x.uop_bgn]
    loads = [i for i, x in enumerate(prog.insns) if isinstance(x, MemInsn)
             and x.opcode == Opcode.LOAD and x.memory_type in (MemId.INP, MemId.WGT)]
    assert any(t.start[ld] < t.end[g] and t.start[g] < t.end[ld] for g in gemms for ld in loads)


def test_source_shows_dependence_tokens(tvm_vta):
    _, vta = tvm_vta
    env = vta.get_env()
    s, args = ports.matmul(env, n=2, m=1)
    text = vta.build(s, args, "ext_dev").get_source()
    assert "LOAD WGT" in text and "GEMM" in text and "STORE OUT" in text
    assert "---U LOAD WGT" in text            # the load pushes to compute ...
    assert "p-u- GEMM" in text or "p--U GEMM" in text   # ... the GEMM pops it
    assert text.rstrip().endswith("FINISH")


def test_padded_dma_load(tvm_vta):
    """A 2-D load with zero padding (as a convolution's input): padding is written by the
    DMA engine, not read from DRAM."""
    tvm, vta = tvm_vta
    env = vta.get_env()
    h, w, pad = 3, 4, 1
    A = te.placeholder((h, w, env.BATCH, env.BLOCK_OUT), name="A", dtype=env.acc_dtype)
    A_buf = te.compute(
        (h + 2 * pad, w + 2 * pad, env.BATCH, env.BLOCK_OUT),
        lambda i, j, b, c: tvm.tir.if_then_else(
            tvm.tir.all(i >= pad, i < h + pad, j >= pad, j < w + pad),
            A[i - pad, j - pad, b, c], tvm.tir.const(0, env.acc_dtype)), name="A_buf")
    C = te.compute(A_buf.shape, lambda *i: A_buf(*i).astype(env.out_dtype), name="C")
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(env.acc_scope)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    s[C].pragma(s[C].op.axis[0], env.dma_copy)
    f = vta.build(s, [A, C], "ext_dev")
    loads = [x for x in f.program.insns if isinstance(x, MemInsn) and x.opcode == Opcode.LOAD]
    assert len(loads) == 1
    assert (loads[0].y_pad_0, loads[0].y_pad_1, loads[0].x_pad_0, loads[0].x_pad_1) == \
        (1, 1, 1, 1)
    a = RNG.integers(-1000, 1000, A.shape).astype(A.dtype)
    c = np.zeros(C.shape, "int8")
    vta.testing.simulator.clear_stats()
    f(a, c)
    np.testing.assert_equal(c, np.pad(a, ((1, 1), (1, 1), (0, 0), (0, 0))).astype("int8"))
    assert vta.testing.simulator.stats()["acc_load_nbytes"] == a.nbytes


@pytest.mark.parametrize("op, ref", [
    (lambda x: te.max(x, 0), lambda a: np.maximum(a, 0)),
    (lambda x: te.min(x, 100), lambda a: np.minimum(a, 100)),
    (lambda x: x >> 3, lambda a: a >> 3),
    (lambda x: x + 1000, lambda a: a + 1000),
    (lambda x: x * 3, lambda a: a * 3),
])
def test_alu_stages(tvm_vta, op, ref):
    """relu, clip, shift and scale as ALU stages on the accumulator."""
    _, vta = tvm_vta
    env = vta.get_env()
    shape = (2, 3, env.BATCH, env.BLOCK_OUT)
    A = te.placeholder(shape, name="A", dtype=env.acc_dtype)
    A_buf = te.compute(shape, lambda *i: A(*i), "A_buf")
    R = te.compute(shape, lambda *i: op(A_buf(*i)), "R")
    C = te.compute(shape, lambda *i: R(*i).astype(env.out_dtype), "C")
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(env.acc_scope)
    s[R].set_scope(env.acc_scope)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    s[R].pragma(s[R].op.axis[0], env.alu)
    s[C].pragma(s[C].op.axis[0], env.dma_copy)
    f = vta.build(s, [A, C], "ext_dev")
    a = RNG.integers(-5000, 5000, shape).astype("int32")
    c = np.zeros(shape, "int8")
    f(a, c)
    np.testing.assert_equal(c, ref(a.astype(np.int64)).astype(np.int32).astype(np.int8))


def _copy_program(env, scope_of_buf, pragma=True):
    A = te.placeholder((2, env.BATCH, env.BLOCK_OUT), name="A", dtype=env.acc_dtype)
    A_buf = te.compute(A.shape, lambda *i: A(*i) + 1, "A_buf")
    C = te.compute(A.shape, lambda *i: A_buf(*i).astype(env.out_dtype), "C")
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(scope_of_buf)
    if pragma:
        s[C].pragma(s[C].op.axis[0], env.dma_copy)
    return s, [A, C]


def test_host_computation_is_not_implemented(tvm_vta):
    _, vta = tvm_vta
    env = vta.get_env()
    s, args = _copy_program(env, env.acc_scope)
    with pytest.raises(NotImplementedError, match="host computation is not supported"):
        vta.build(s, args, "ext_dev")


def test_buffer_in_another_scope_is_not_implemented(tvm_vta):
    _, vta = tvm_vta
    env = vta.get_env()
    s, args = _copy_program(env, "local")
    with pytest.raises(NotImplementedError, match="scope 'local'"):
        vta.build(s, args, "ext_dev")


def test_on_chip_buffer_overflow(tvm_vta):
    _, vta = tvm_vta
    env = vta.get_env()
    big = env.INP_DEPTH + 1
    A = te.placeholder((big, env.BATCH, env.BLOCK_IN), name="A", dtype=env.inp_dtype)
    A_buf = te.compute(A.shape, lambda *i: A(*i), "A_buf")
    C = te.compute(A.shape, lambda *i: A_buf(*i), "C")
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(env.inp_scope)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    with pytest.raises(tvm_vta[0].TVMError, match="inp buffer overflow"):
        vta.build(s, [A, C], "ext_dev")


def test_wrong_target_is_an_error(tvm_vta):
    _, vta = tvm_vta
    s, args = ports.vector_add(vta.get_env())
    with pytest.raises(tvm_vta[0].TVMError, match="compiles for 'ext_dev'"):
        vta.build(s, args, "llvm")


def test_ext_dev_arrays_round_trip(tvm_vta):
    tvm, _ = tvm_vta
    x = RNG.integers(-100, 100, (3, 16)).astype("int8")
    nd = tvm.nd.array(x, tvm.ext_dev(0))
    assert nd.device == tvm.ext_dev(0) and tvm.ext_dev(0).exist
    np.testing.assert_equal(nd.numpy(), x)


@pytest.mark.parametrize("vthreads", [1, 2])
def test_conv2d_with_virtual_threads(tvm_vta, vthreads):
    """VTA's convolution tutorial (small): padded input loads, GEMM micro-op kernels over
    the 3x3 window, >> 8, relu and clip on the ALU."""
    _, vta = tvm_vta
    env = vta.get_env()
    s, (data, weight, res) = ports.conv2d(env, in_channels=32, out_channels=32, height=8,
                                          width=8, vthreads=vthreads)
    f = vta.build(s, [data, weight, res], "ext_dev", env.target_host)
    d = ports.random_int8(data.shape, RNG)
    w = ports.random_int8(weight.shape, RNG)
    out = np.zeros(res.shape, "int8")
    f(d, w, out)
    np.testing.assert_equal(out, ports.conv2d_reference(env, d, w))


def test_another_configuration(tvm_vta):
    """BLOCK 8 with smaller buffers (a JSON override): the same tutorial, bit-exact."""
    _, vta = tvm_vta
    env = vta.get_env({"LOG_BLOCK": 3, "LOG_INP_BUFF_SIZE": 13, "LOG_WGT_BUFF_SIZE": 16,
                       "LOG_ACC_BUFF_SIZE": 15})
    vta.set_env(env)
    try:
        s, (A, B, C) = ports.matmul(env, o=1, n=3, m=2, shift=3, ko_factor=1, vthreads=2)
        f = vta.build(s, [A, B, C], "ext_dev")
        a, b = ports.random_int8(A.shape, RNG), ports.random_int8(B.shape, RNG)
        c = np.zeros(C.shape, "int8")
        f(a, b, c)
        np.testing.assert_equal(c, ports.matmul_reference(env, a, b, shift=3))
    finally:
        vta.set_env(None)


def test_configuration_whose_micro_ops_do_not_fit(tvm_vta):
    _, vta = tvm_vta
    from kiln.vta.isa import Uop, encode_uop

    env = vta.get_env({"LOG_BLOCK": 3})
    with pytest.raises(tvm_vta[0].TVMError, match="32-bit micro-op"):
        encode_uop(Uop(0, 0, 0), env)


def test_dma_of_the_wrong_element_width(tvm_vta):
    tvm, vta = tvm_vta
    env = vta.get_env()
    A = te.placeholder((2, env.BATCH, env.BLOCK_OUT), name="A", dtype="int8")
    A_buf = te.compute(A.shape, lambda *i: A(*i).astype("int32"), "A_buf")
    C = te.compute(A.shape, lambda *i: A_buf(*i).astype("int8"), "C")
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(env.acc_scope)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    s[C].pragma(s[C].op.axis[0], env.dma_copy)
    with pytest.raises(tvm.TVMError, match="LOAD into acc moves 32-bit elements, but the "
                                           "DRAM tensor is int8"):
        vta.build(s, [A, C], "ext_dev")
