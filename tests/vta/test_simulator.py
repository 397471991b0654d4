"""The simulator on hand-written instruction streams (VTA's instruction tests), bit-exact
against numpy, and its timing (kiln/vta/simulator.py, kiln/vta/timing.py)."""

import numpy as np
import pytest

from kiln.errors import TVMError
from kiln.vta import get_env
from kiln.vta.isa import (
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    MemId,
    MemInsn,
    Opcode,
    Uop,
    encode,
    encode_uop,
)
from kiln.vta.simulator import Simulator
from kiln.vta.timing import LatencyModel, schedule

ENV = get_env()
RNG = np.random.default_rng(0)


def put(dev, arr) -> int:
    addr = dev.dram.alloc(arr.nbytes)
    dev.dram.write(addr, arr)
    return addr


def get(dev, addr, shape, dtype):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return dev.dram.read(addr, n).view(dtype).reshape(shape)


def load(mem, addr, nbytes, sram=0, y=1, x=1, stride=None, **kw):
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram,
                   dram_base=addr // nbytes, y_size=y, x_size=x,
                   x_stride=x if stride is None else stride, **kw)


def store(addr, sram=0, y=1, x=1, stride=None, **kw):
    return MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=sram,
                   dram_base=addr // ENV.OUT_ELEM_BYTES, y_size=y, x_size=x,
                   x_stride=x if stride is None else stride, **kw)


def uop_load(dev, uops, **kw):
    words = np.array([encode_uop(u, ENV) for u in uops], np.uint32)
    return load(MemId.UOP, put(dev, words), 4, x=len(uops), **kw)


def acc_tiles(n):
    return RNG.integers(-(2**20), 2**20, (n, ENV.BATCH, ENV.BLOCK_OUT), dtype=np.int32)


def run_alu_program(a, b, alu_insns):
    """Load ``a`` (and ``b`` after it) into the accumulator, run ``alu_insns`` over the
    tiles of ``a``, store; return the int8 result."""
    dev = Simulator(ENV)
    n = len(a)
    src = np.concatenate([a, b]) if b is not None else a
    a_addr = put(dev, src)
    out_addr = dev.dram.alloc(n * ENV.OUT_ELEM_BYTES)
    uops = [Uop(i, n + i) for i in range(n)]
    prog = [load(MemId.ACC, a_addr, ENV.ACC_ELEM_BYTES, x=len(src)), uop_load(dev, uops)]
    prog += alu_insns(n)
    prog[-1].push_next = True
    prog += [store(out_addr, x=n, pop_prev=True), FinishInsn()]
    dev.run(b"".join(encode(i, ENV) for i in prog))
    return get(dev, out_addr, a.shape, np.int8), dev


def test_save_load_out():
    dev = Simulator(ENV)
    x = acc_tiles(8)
    addr, out = put(dev, x), dev.dram.alloc(8 * ENV.OUT_ELEM_BYTES)
    prog = [load(MemId.ACC, addr, ENV.ACC_ELEM_BYTES, x=8, push_next=True),
            store(out, x=8, pop_prev=True), FinishInsn()]
    dev.run_insns(prog)
    np.testing.assert_array_equal(get(dev, out, x.shape, np.int8), x.astype(np.int8))
    s = dev.stats()
    assert s["acc_load_nbytes"] == 8 * 64 and s["out_store_nbytes"] == 8 * 16


def test_padded_load_2d_strided():
    """A 3x4 block of a 5x6 tile grid, padded by (1, 2) rows and (2, 1) columns."""
    dev = Simulator(ENV)
    grid = acc_tiles(30).reshape(5, 6, 1, 16)
    addr = put(dev, grid)
    y_pad, x_pad, rows, cols = (1, 2), (2, 1), 3, 4
    height, width = rows + sum(y_pad), cols + sum(x_pad)
    out = dev.dram.alloc(height * width * ENV.OUT_ELEM_BYTES)
    first = 1 * 6 + 1  # tile (1, 1)
    prog = [load(MemId.ACC, addr + first * 64, 64, y=rows, x=cols, stride=6,
                 y_pad_0=1, y_pad_1=2, x_pad_0=2, x_pad_1=1, push_next=True),
            store(out, x=height * width, pop_prev=True), FinishInsn()]
    dev.run_insns(prog)
    expect = np.zeros((height, width, 1, 16), np.int32)
    expect[1:1 + rows, 2:2 + cols] = grid[1:4, 1:5]
    np.testing.assert_array_equal(get(dev, out, expect.shape, np.int8), expect.astype(np.int8))


@pytest.mark.parametrize("iters", [(1, 1), (2, 3)])
def test_gemm_with_micro_op_loops(iters):
    """acc[o] += sum_k inp[k] @ wgt[o, k]^T for a 2-tile reduction, as a micro-op kernel
    of two micro-ops in an ``iter_out x iter_in`` loop over output tiles."""
    dev = Simulator(ENV)
    n_out = iters[0] * iters[1]
    inp = RNG.integers(-128, 128, (2, 1, 16), dtype=np.int8)
    wgt = RNG.integers(-128, 128, (n_out, 2, 16, 16), dtype=np.int8)
    inp_addr, wgt_addr = put(dev, inp), put(dev, wgt)
    out = dev.dram.alloc(n_out * 16)
    loops = dict(iter_out=iters[0], iter_in=iters[1], dst_factor_out=iters[1],
                 dst_factor_in=1, wgt_factor_out=2 * iters[1], wgt_factor_in=2)
    prog = [load(MemId.INP, inp_addr, 16, x=2),
            load(MemId.WGT, wgt_addr, 256, x=2 * n_out, push_next=True),
            uop_load(dev, [Uop(0, 0, 0)]),
            GemmInsn(reset_reg=True, uop_bgn=0, uop_end=1, **loops),
            uop_load(dev, [Uop(0, 0, 0), Uop(0, 1, 1)], sram=1),
            GemmInsn(uop_bgn=1, uop_end=3, pop_prev=True, push_next=True, **loops),
            store(out, x=n_out, pop_prev=True), FinishInsn()]
    dev.run_insns(prog)
    acc = np.einsum("kbi,okji->obj", inp.astype(np.int32), wgt.astype(np.int32))
    np.testing.assert_array_equal(get(dev, out, acc.shape, np.int8), acc.astype(np.int8))
    assert dev.stats()["gemm_counter"] == 2 * n_out


@pytest.mark.parametrize("op, ref", [
    (AluOp.ADD, lambda a, b: a + b), (AluOp.MIN, np.minimum), (AluOp.MAX, np.maximum),
    (AluOp.MUL, lambda a, b: a * b)])
def test_alu_tensor(op, ref):
    a, b = acc_tiles(4), acc_tiles(4)
    out, dev = run_alu_program(a, b, lambda n: [AluInsn(alu_opcode=op, uop_bgn=0, uop_end=n)])
    expect = ref(a.astype(np.int64), b.astype(np.int64)).astype(np.int32).astype(np.int8)
    np.testing.assert_array_equal(out, expect)
    assert dev.stats()["alu_counter"] == 4


@pytest.mark.parametrize("op, imm, ref", [
    (AluOp.ADD, -77, lambda a: a - 77), (AluOp.MAX, 3, lambda a: np.maximum(a, 3)),
    (AluOp.SHR, 5, lambda a: a >> 5), (AluOp.SHR, -3, lambda a: a << 3)])
def test_alu_immediate(op, imm, ref):
    a = acc_tiles(3)
    out, _ = run_alu_program(a, None, lambda n: [
        AluInsn(alu_opcode=op, use_imm=True, imm=imm, uop_bgn=0, uop_end=n)])
    np.testing.assert_array_equal(out, ref(a.astype(np.int64)).astype(np.int32).astype(np.int8))


def test_relu():
    a = acc_tiles(5) >> 10
    out, _ = run_alu_program(a, None, lambda n: [
        AluInsn(alu_opcode=AluOp.MAX, use_imm=True, imm=0, uop_bgn=0, uop_end=n),
        AluInsn(alu_opcode=AluOp.MIN, use_imm=True, imm=127, uop_bgn=0, uop_end=n)])
    np.testing.assert_array_equal(out, np.clip(a, 0, 127).astype(np.int8))


def test_shift_and_scale():
    a = acc_tiles(2)
    out, _ = run_alu_program(a, None, lambda n: [
        AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=17, uop_bgn=0, uop_end=n),
        AluInsn(alu_opcode=AluOp.SHR, use_imm=True, imm=4, uop_bgn=0, uop_end=n)])
    np.testing.assert_array_equal(out, ((a + 17) >> 4).astype(np.int8))


def test_alu_in_place_chain_runs_in_micro_op_order():
    """Micro-ops acc[1] += acc[0]; acc[2] += acc[1] in one instruction: the second reads
    the first one's result."""
    dev = Simulator(ENV)
    a = acc_tiles(3) >> 8
    addr, out = put(dev, a), dev.dram.alloc(3 * 16)
    prog = [load(MemId.ACC, addr, 64, x=3), uop_load(dev, [Uop(1, 0), Uop(2, 1)]),
            AluInsn(alu_opcode=AluOp.ADD, uop_bgn=0, uop_end=2, push_next=True),
            store(out, x=3, pop_prev=True), FinishInsn()]
    dev.run_insns(prog)
    expect = a.copy()
    expect[1] += expect[0]
    expect[2] += expect[1]
    np.testing.assert_array_equal(get(dev, out, a.shape, np.int8), expect.astype(np.int8))


# -- timing -------------------------------------------------------------------------------
def _loads(n, push, addr=0):
    return [MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, dram_base=addr // 16,
                    y_size=1, x_size=64, x_stride=64, push_next=push) for _ in range(n)]


def test_tokens_order_modules_and_modules_overlap():
    model = LatencyModel()
    gemm = GemmInsn(uop_bgn=0, uop_end=1, iter_out=200, pop_prev=True)
    prog = [*_loads(1, True), gemm, *_loads(1, False), FinishInsn()]
    t = schedule(prog, ENV, model)
    assert t.start[1] >= t.end[0]          # the GEMM waited for its load's token
    assert t.start[2] < t.end[1]           # the second load overlaps the GEMM
    assert t.cycles == max(t.end)
    assert t.gemm_cycles == 200
    assert t.busy["load"] == (t.end[0] - t.start[0]) + (t.end[2] - t.start[2])


def test_latency_model_of_a_load():
    model = LatencyModel()
    insn = MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, y_size=2, x_size=4, x_stride=9,
                   x_pad_0=1, y_pad_1=1)
    # setup + 2 rows + 2*4*16 bytes / 8 per cycle + pads (1*5 + 2*1 tiles)
    assert model.cycles(insn, ENV) == 64 + 2 * 4 + 16 + 7


def test_deadlock_is_reported():
    prog = [GemmInsn(uop_bgn=0, uop_end=0, pop_prev=True), FinishInsn()]
    with pytest.raises(TVMError, match="deadlock.*compute: instruction 0"):
        schedule(prog, ENV)


def test_flag_without_neighbour_is_an_error():
    with pytest.raises(TVMError, match="no 'prev' neighbour"):
        schedule([MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, pop_prev=True)], ENV)


def test_trace_and_clear_stats():
    dev = Simulator(ENV)
    dev.trace_enabled = True
    addr = put(dev, np.zeros((64, 16), np.int8))
    dev.run_insns([*_loads(2, False, addr), FinishInsn()])
    assert [e.module for e in dev.trace] == ["load", "load", "compute"]
    assert "LOAD INP" in str(dev.trace[0])
    assert dev.stats()["inp_load_nbytes"] == 2 * 64 * 16
    assert dev.stats()["cycles"] > 0
    dev.clear_stats()
    assert set(dev.stats().values()) == {0}
