"""VTA's instruction set: LOAD, STORE, GEMM, ALU and FINISH, micro-ops, and their encoding.

Every instruction is 128 bits and carries the four dependence flags of the task-level
pipeline (``pop_prev``, ``pop_next``, ``push_prev``, ``push_next``): the load, compute and
store modules sit in a row (load -> compute -> store); ``prev``/``next`` name the neighbour
on either side, a push sends it a token when the instruction finishes, a pop waits for one
before the instruction starts.

The bit layout is the published one (VTA's ``hw_spec.h``), fields packed from bit 0 upward
with widths derived from the configuration (``log2`` of each buffer's depth in tiles); kiln
uses 3 bits for the memory type (``OUT`` = 4 does not fit in 2) and 3 for the ALU opcode
(``MUL``). Tables are in docs/vta.md.

* ``MemInsn`` (LOAD/STORE): ``opcode, pop_prev, pop_next, push_prev, push_next, memory_type,
  sram_base, dram_base``, padding to bit 64, ``y_size, x_size, x_stride, y_pad_0, y_pad_1,
  x_pad_0, x_pad_1``. Addresses count tiles of the buffer's element size.
* ``GemmInsn``: ``opcode, flags, reset_reg, uop_bgn, uop_end, iter_out, iter_in``, padding to
  bit 64, ``dst_factor_out, dst_factor_in, src_factor_out, src_factor_in, wgt_factor_out,
  wgt_factor_in``.
* ``AluInsn``: as GEMM up to bit 64, then ``dst_factor_out, dst_factor_in, src_factor_out,
  src_factor_in, alu_opcode, use_imm, imm`` (imm is a signed 16-bit value).
* ``FinishInsn``: the GEMM layout with opcode FINISH.
* ``Uop`` (32 bits): ``dst_idx`` (accumulator tile), ``src_idx`` (input tile, or the ALU's
  source accumulator tile), ``wgt_idx``.

A GEMM or ALU instruction runs the micro-ops ``[uop_bgn, uop_end)`` inside two loops::

    for i0 in range(iter_out):
        for i1 in range(iter_in):
            for uop in uops[uop_bgn:uop_end]:
                dst = uop.dst_idx + i0 * dst_factor_out + i1 * dst_factor_in   # and src, wgt
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum

from kiln.errors import TVMError

from .env import Environment

__all__ = ["Opcode", "MemId", "AluOp", "MemInsn", "GemmInsn", "AluInsn", "FinishInsn", "Uop",
           "Insn", "encode", "decode", "encode_uop", "decode_uop", "INSN_BYTES",
           "LOOP_ITER_BITS"]

INSN_BYTES = 16
#: width of the GEMM/ALU loop counts (VTA_LOOP_ITER_WIDTH)
LOOP_ITER_BITS = 14
_MEM_ID_BITS = 3
_ALU_OPCODE_BITS = 3
_OPCODE_BITS = 3


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemId(IntEnum):
    """The on-chip buffer a LOAD fills or a STORE drains."""

    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


@dataclass
class _Deps:
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False


@dataclass
class MemInsn(_Deps):
    """LOAD (``opcode=Opcode.LOAD``) or STORE of a 2-D block of tiles with padding."""

    opcode: Opcode = Opcode.LOAD
    memory_type: MemId = MemId.INP
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 0
    x_size: int = 0
    x_stride: int = 0
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0


@dataclass
class _LoopInsn(_Deps):
    """The fields GEMM and ALU share: the reset flag, the micro-op range and the two loops
    over it with their destination and source factors."""

    opcode: Opcode = Opcode.GEMM
    reset_reg: bool = False
    uop_bgn: int = 0
    uop_end: int = 0
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0


@dataclass
class GemmInsn(_LoopInsn):
    """``acc[dst] += inp[src] @ wgt[wgt]^T`` over the micro-op loops (or ``acc[dst] = 0``
    with ``reset_reg``)."""

    opcode: Opcode = Opcode.GEMM
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0


@dataclass
class AluInsn(_LoopInsn):
    """``acc[dst] = op(acc[dst], acc[src] or imm)`` over the micro-op loops."""

    opcode: Opcode = Opcode.ALU
    alu_opcode: AluOp = AluOp.ADD
    use_imm: bool = False
    imm: int = 0


@dataclass
class FinishInsn(_Deps):
    """The end of the program: the host waits for it."""

    opcode: Opcode = Opcode.FINISH


Insn = MemInsn | GemmInsn | AluInsn | FinishInsn


@dataclass(frozen=True)
class Uop:
    """One micro-op: tile indices into the accumulator, input and weight buffers."""

    dst_idx: int
    src_idx: int
    wgt_idx: int = 0


def _log2(n: int) -> int:
    return max(n - 1, 0).bit_length()


def _layout(env: Environment, opcode: Opcode) -> list[tuple[str, int]]:
    """(field, bits) in order from bit 0; ``""`` pads to bit 64."""
    head = [("opcode", _OPCODE_BITS), ("pop_prev", 1), ("pop_next", 1), ("push_prev", 1),
            ("push_next", 1)]
    acc, inp, wgt = _log2(env.ACC_DEPTH), _log2(env.INP_DEPTH), _log2(env.WGT_DEPTH)
    if opcode in (Opcode.LOAD, Opcode.STORE):
        return head + [("memory_type", _MEM_ID_BITS), ("sram_base", 16), ("dram_base", 32),
                       ("", 0), ("y_size", 16), ("x_size", 16), ("x_stride", 16),
                       ("y_pad_0", 4), ("y_pad_1", 4), ("x_pad_0", 4), ("x_pad_1", 4)]
    uop = _log2(env.UOP_DEPTH)
    loops = head + [("reset_reg", 1), ("uop_bgn", uop), ("uop_end", uop + 1),
                    ("iter_out", LOOP_ITER_BITS), ("iter_in", LOOP_ITER_BITS), ("", 0),
                    ("dst_factor_out", acc), ("dst_factor_in", acc)]
    if opcode == Opcode.ALU:
        return loops + [("src_factor_out", acc), ("src_factor_in", acc),
                        ("alu_opcode", _ALU_OPCODE_BITS), ("use_imm", 1), ("imm", 16)]
    return loops + [("src_factor_out", inp), ("src_factor_in", inp),
                    ("wgt_factor_out", wgt), ("wgt_factor_in", wgt)]


_CLASSES = {Opcode.LOAD: MemInsn, Opcode.STORE: MemInsn, Opcode.GEMM: GemmInsn,
            Opcode.ALU: AluInsn, Opcode.FINISH: FinishInsn}


def encode(insn: Insn, env: Environment) -> bytes:
    """The 16 bytes (little-endian) of ``insn``; a field too wide for its bits is a TVMError."""
    word, pos = 0, 0
    for name, bits in _layout(env, insn.opcode):
        if not name:
            pos = 64
            continue
        value = int(getattr(insn, name, 0))
        if name == "imm":
            if not -(1 << 15) <= value < (1 << 15):
                raise TVMError(f"ALU immediate {value} does not fit in 16 signed bits")
            value &= 0xFFFF
        elif not 0 <= value < (1 << bits):
            raise TVMError(f"{insn.opcode.name} field {name}={value} does not fit in {bits} bits")
        word |= value << pos
        pos += bits
    return word.to_bytes(INSN_BYTES, "little")


def decode(data: bytes, env: Environment) -> Insn:
    """The instruction encoded in the 16 bytes ``data``."""
    word = int.from_bytes(data[:INSN_BYTES], "little")
    opcode = Opcode(word & ((1 << _OPCODE_BITS) - 1))
    values: dict[str, int] = {}
    pos = 0
    for name, bits in _layout(env, opcode):
        if not name:
            pos = 64
            continue
        values[name] = (word >> pos) & ((1 << bits) - 1)
        pos += bits
    cls = _CLASSES[opcode]
    kwargs = {}
    for f in fields(cls):
        v = values.get(f.name, 0)
        if f.name == "opcode":
            v = opcode
        elif f.name == "memory_type":
            v = MemId(v)
        elif f.name == "alu_opcode":
            v = AluOp(v)
        elif f.name == "imm":
            v = v - (1 << 16) if v & 0x8000 else v
        elif isinstance(f.default, bool):
            v = bool(v)
        kwargs[f.name] = v
    return cls(**kwargs)


def _uop_layout(env: Environment) -> tuple[int, int, int]:
    acc, inp, wgt = _log2(env.ACC_DEPTH), _log2(env.INP_DEPTH), _log2(env.WGT_DEPTH)
    if acc + max(inp, acc) + wgt > 32:
        raise TVMError(f"this VTA configuration's micro-op fields ({acc} + {max(inp, acc)} + "
                       f"{wgt} bits) do not fit a 32-bit micro-op; use smaller buffers")
    return acc, inp, wgt


def encode_uop(uop: Uop, env: Environment) -> int:
    """The 32-bit word of ``uop``: ``dst_idx | src_idx << acc_bits | wgt_idx << (acc+inp)``."""
    acc, inp, wgt = _uop_layout(env)
    src_bits = max(inp, acc)  # an ALU micro-op's source indexes the accumulator
    for name, value, bits in (("dst_idx", uop.dst_idx, acc), ("src_idx", uop.src_idx, src_bits),
                              ("wgt_idx", uop.wgt_idx, wgt)):
        if not 0 <= value < (1 << bits):
            raise TVMError(f"micro-op field {name}={value} does not fit in {bits} bits")
    return uop.dst_idx | (uop.src_idx << acc) | (uop.wgt_idx << (acc + src_bits))


def decode_uop(word: int, env: Environment) -> Uop:
    acc, inp, wgt = _uop_layout(env)
    src_bits = max(inp, acc)
    return Uop(word & ((1 << acc) - 1), (word >> acc) & ((1 << src_bits) - 1),
               (word >> (acc + src_bits)) & ((1 << wgt) - 1))
