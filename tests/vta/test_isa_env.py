"""vta.get_env() and the instruction encoding (kiln/vta/env.py, kiln/vta/isa.py)."""

import json

import pytest

from kiln.errors import TVMError
from kiln.vta import get_env
from kiln.vta.isa import (
    INSN_BYTES,
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    MemId,
    MemInsn,
    Opcode,
    Uop,
    decode,
    decode_uop,
    encode,
    encode_uop,
)


def test_default_env_is_the_published_design():
    env = get_env()
    assert (env.BATCH, env.BLOCK_IN, env.BLOCK_OUT) == (1, 16, 16)
    assert (env.inp_dtype, env.wgt_dtype, env.acc_dtype, env.out_dtype) == \
        ("int8", "int8", "int32", "int8")
    assert (env.UOP_BUFF_SIZE, env.INP_BUFF_SIZE, env.WGT_BUFF_SIZE, env.ACC_BUFF_SIZE) == \
        (32768, 32768, 262144, 131072)
    assert (env.INP_ELEM_BYTES, env.WGT_ELEM_BYTES, env.ACC_ELEM_BYTES) == (16, 256, 64)
    assert (env.inp_scope, env.wgt_scope, env.acc_scope) == \
        ("local.inp_buffer", "local.wgt_buffer", "local.acc_buffer")
    assert env.target == "ext_dev" and env.target_host == "llvm"


def test_json_config_overrides(tmp_path, monkeypatch):
    path = tmp_path / "vta_config.json"
    path.write_text(json.dumps({"LOG_BLOCK": 3, "LOG_BATCH": 1}))
    env = get_env(path)
    assert (env.BATCH, env.BLOCK_IN, env.INP_ELEM_BYTES, env.WGT_ELEM_BYTES) == (2, 8, 16, 64)
    monkeypatch.setenv("VTA_CONFIG", str(path))
    assert get_env().BLOCK_OUT == 8


def test_bad_config_is_an_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("[1]")
    with pytest.raises(TVMError, match="not a JSON object"):
        get_env(path)
    with pytest.raises(TVMError, match="int8 inputs"):
        get_env({"LOG_ACC_WIDTH": 4})


@pytest.mark.parametrize("insn", [
    MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, sram_base=5, dram_base=123456,
            y_size=3, x_size=4, x_stride=7, y_pad_0=1, x_pad_1=15, push_next=True),
    MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=65535, dram_base=2**32 - 1,
            y_size=1, x_size=2, x_stride=2, pop_prev=True, push_prev=True),
    GemmInsn(reset_reg=True, uop_bgn=1, uop_end=8192, iter_out=16383, iter_in=2,
             dst_factor_out=2047, src_factor_in=1, wgt_factor_out=1023, pop_next=True),
    AluInsn(alu_opcode=AluOp.SHR, use_imm=True, imm=-5, uop_bgn=3, uop_end=9, iter_out=100,
            dst_factor_in=2047, src_factor_out=3, pop_prev=True),
    FinishInsn(pop_prev=True),
])
def test_encode_decode_round_trip(insn):
    env = get_env()
    data = encode(insn, env)
    assert len(data) == INSN_BYTES
    assert decode(data, env) == insn


def test_published_bit_positions():
    env = get_env()
    word = int.from_bytes(encode(MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT,
                                         sram_base=1, dram_base=2, y_size=3, x_size=4,
                                         x_stride=5, push_prev=True), env), "little")
    assert word & 0b111 == 1                      # opcode
    assert (word >> 5) & 1 == 1                   # push_prev (after pop_prev, pop_next)
    assert (word >> 7) & 0b111 == MemId.OUT       # memory type
    assert (word >> 10) & 0xFFFF == 1             # sram_base
    assert (word >> 26) & 0xFFFFFFFF == 2         # dram_base
    assert (word >> 64) & 0xFFFF == 3             # y_size from bit 64
    assert (word >> 80) & 0xFFFF == 4 and (word >> 96) & 0xFFFF == 5


def test_field_overflow_is_an_error():
    env = get_env()
    with pytest.raises(TVMError, match="x_pad_0=16 does not fit in 4 bits"):
        encode(MemInsn(x_pad_0=16), env)
    with pytest.raises(TVMError, match="immediate"):
        encode(AluInsn(imm=40000), env)


def test_uop_is_32_bits():
    env = get_env()
    u = Uop(2047, 2047, 1023)
    assert encode_uop(u, env) == 0xFFFFFFFF
    assert decode_uop(encode_uop(Uop(3, 4, 5), env), env) == Uop(3, 4, 5)


def test_one_simulator_per_configuration(tmp_path, monkeypatch):
    from kiln.vta import simulator

    path = tmp_path / "vta_config.json"
    path.write_text(json.dumps({"LOG_BLOCK": 3}))
    monkeypatch.setenv("VTA_CONFIG", str(path))
    assert simulator.current() is simulator.current()
    assert simulator.current().env.BLOCK_IN == 8
