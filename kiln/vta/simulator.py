"""The VTA simulator (``vta.testing.simulator``): runs instruction streams bit-exactly and
says how long they took.

:func:`run` takes an encoded instruction stream (16 bytes per instruction), computes its
timing (``kiln.vta.timing``: the fetch/load/compute/store modules with their command and
dependence queues) and executes every instruction, in the order the timed schedule starts
them, on the device's state: the DRAM shared with the host (``kiln.vta.dram``) and the
on-chip buffers (input, weight, accumulator, micro-op). A missing dependence token therefore
shows as a wrong result, as on the hardware.

Functional semantics (VTA's ``sim_driver.cc``): LOAD fills ``sram[sram_base:]`` row by row,
``y_pad_0`` zero rows, then each of ``y_size`` rows as ``x_pad_0`` zero tiles, ``x_size``
tiles from ``dram[dram_base + y * x_stride:]`` and ``x_pad_1`` zero tiles, then ``y_pad_1``
zero rows; STORE writes accumulator tiles truncated to the output type (the low 8 bits);
GEMM accumulates ``inp @ wgt^T`` in int32 (wrapping), or zeroes with ``reset_reg``; ALU
applies MIN, MAX, ADD, SHR (right shift by a non-negative amount, left by a negative one) or
MUL to accumulator tiles with a tensor operand or a 16-bit signed immediate, in micro-op order.

:func:`stats` counts, since :func:`clear_stats`: bytes loaded into each buffer, bytes
stored, GEMM and ALU micro-op executions, cycles, and the busy cycles of each module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TVMError

from .dram import Dram
from .env import Environment, get_env
from .isa import (
    INSN_BYTES,
    AluInsn,
    AluOp,
    GemmInsn,
    Insn,
    MemId,
    MemInsn,
    Opcode,
    decode,
    decode_uop,
)
from .timing import MODULES, LatencyModel, schedule, tile_bytes

__all__ = ["Simulator", "TraceEntry", "current", "run", "stats", "clear_stats", "debug_mode",
           "last_trace", "dram"]


@dataclass(frozen=True)
class TraceEntry:
    """One executed instruction: where it ran, when, and what it was."""

    index: int
    module: str
    start: int
    end: int
    insn: Insn

    def __str__(self) -> str:
        return f"[{self.start:>8}, {self.end:>8}) {self.module:<7} #{self.index:<5} " \
               f"{disassemble_one(self.insn)}"


def disassemble_one(insn: Insn) -> str:
    """A one-line text form of ``insn``, dependence flags first."""
    flags = "".join(c if getattr(insn, f) else "-" for c, f in
                    (("p", "pop_prev"), ("P", "pop_next"), ("u", "push_prev"),
                     ("U", "push_next")))
    if isinstance(insn, MemInsn):
        return (f"{flags} {insn.opcode.name} {insn.memory_type.name} sram={insn.sram_base} "
                f"dram={insn.dram_base} y={insn.y_size} x={insn.x_size} "
                f"stride={insn.x_stride} pad=({insn.y_pad_0},{insn.y_pad_1},"
                f"{insn.x_pad_0},{insn.x_pad_1})")
    if isinstance(insn, GemmInsn):
        return (f"{flags} GEMM{' reset' if insn.reset_reg else ''} uop=[{insn.uop_bgn},"
                f"{insn.uop_end}) iter={insn.iter_out}x{insn.iter_in} "
                f"dst=({insn.dst_factor_out},{insn.dst_factor_in}) "
                f"src=({insn.src_factor_out},{insn.src_factor_in}) "
                f"wgt=({insn.wgt_factor_out},{insn.wgt_factor_in})")
    if isinstance(insn, AluInsn):
        operand = f"imm={insn.imm}" if insn.use_imm else "tensor"
        return (f"{flags} ALU {insn.alu_opcode.name} {operand} uop=[{insn.uop_bgn},"
                f"{insn.uop_end}) iter={insn.iter_out}x{insn.iter_in} "
                f"dst=({insn.dst_factor_out},{insn.dst_factor_in}) "
                f"src=({insn.src_factor_out},{insn.src_factor_in})")
    return f"{flags} FINISH"


_STAT_KEYS = ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes",
              "out_store_nbytes", "gemm_counter", "alu_counter", "cycles",
              "load_busy_cycles", "compute_busy_cycles", "store_busy_cycles",
              "fetch_busy_cycles", "gemm_busy_cycles", "insn_counter")


class Simulator:
    """One simulated VTA: its DRAM, on-chip buffers, statistics and latency model."""

    def __init__(self, env: Environment, model: LatencyModel | None = None) -> None:
        self.env = env
        self.model = model or LatencyModel()
        self.dram = Dram()
        self.inp = np.zeros((env.INP_DEPTH, env.BATCH, env.BLOCK_IN), np.int8)
        self.wgt = np.zeros((env.WGT_DEPTH, env.BLOCK_OUT, env.BLOCK_IN), np.int8)
        self.acc = np.zeros((env.ACC_DEPTH, env.BATCH, env.BLOCK_OUT), np.int32)
        self.uop = np.zeros((env.UOP_DEPTH, 3), np.int64)  # decoded dst, src, wgt
        self.counters = dict.fromkeys(_STAT_KEYS, 0)
        self.trace_enabled = False
        self.trace: list[TraceEntry] = []

    # -- running programs ----------------------------------------------------------------
    def run(self, stream: bytes) -> int:
        """Execute the encoded instruction ``stream``; return its cycles."""
        if len(stream) % INSN_BYTES:
            raise TVMError(f"a VTA instruction stream is a multiple of {INSN_BYTES} bytes, "
                           f"got {len(stream)}")
        insns = [decode(stream[k:k + INSN_BYTES], self.env)
                 for k in range(0, len(stream), INSN_BYTES)]
        return self.run_insns(insns)

    def run_insns(self, insns: list[Insn]) -> int:
        """Execute decoded instructions (tests build them by hand); return the cycles."""
        timing = schedule(insns, self.env, self.model)
        for i in sorted(range(len(insns)), key=lambda k: (timing.start[k], k)):
            self._execute(insns[i])
        c = self.counters
        c["cycles"] += timing.cycles
        c["insn_counter"] += len(insns)
        for m in (*MODULES, "fetch"):
            c[f"{m}_busy_cycles"] += timing.busy[m]
        c["gemm_busy_cycles"] += timing.gemm_cycles
        if self.trace_enabled:
            self.trace = [TraceEntry(i, timing.module[i], timing.start[i], timing.end[i],
                                     insns[i]) for i in range(len(insns))]
        return timing.cycles

    def _execute(self, insn: Insn) -> None:
        if insn.opcode == Opcode.LOAD:
            self._load(insn)
        elif insn.opcode == Opcode.STORE:
            self._store(insn)
        elif isinstance(insn, GemmInsn):
            self._gemm(insn)
        elif isinstance(insn, AluInsn):
            self._alu(insn)

    # -- DMA ---------------------------------------------------------------------------------
    def _load(self, insn: MemInsn) -> None:
        env = self.env
        nbytes = tile_bytes(insn, env)
        if insn.memory_type == MemId.UOP:
            buf = None
        else:
            buf = {MemId.INP: self.inp, MemId.WGT: self.wgt, MemId.ACC: self.acc}.get(
                insn.memory_type)
            if buf is None:
                raise TVMError(f"LOAD into the {insn.memory_type.name} buffer is not allowed")
        width = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        rows = insn.y_pad_0 + insn.y_size + insn.y_pad_1
        total = rows * width
        tiles = np.zeros((total, nbytes), np.uint8)
        for y in range(insn.y_size):
            at = (insn.y_pad_0 + y) * width + insn.x_pad_0
            addr = (insn.dram_base + y * insn.x_stride) * nbytes
            tiles[at:at + insn.x_size] = self.dram.view(addr, insn.x_size * nbytes).reshape(
                insn.x_size, nbytes)
        lo, hi = insn.sram_base, insn.sram_base + total
        if buf is None:
            words = tiles.reshape(-1).view(np.uint32)
            self._check_range("micro-op", hi, len(self.uop))
            self.uop[lo:hi] = [_uop_row(int(w), env) for w in words]
        else:
            self._check_range(insn.memory_type.name.lower(), hi, len(buf))
            buf[lo:hi] = tiles.reshape(-1).view(buf.dtype).reshape(buf[lo:hi].shape)
        key = {MemId.UOP: "uop", MemId.INP: "inp", MemId.WGT: "wgt", MemId.ACC: "acc"}
        self.counters[f"{key[insn.memory_type]}_load_nbytes"] += insn.y_size * insn.x_size * nbytes

    def _store(self, insn: MemInsn) -> None:
        if insn.memory_type != MemId.OUT:
            raise TVMError(f"STORE from the {insn.memory_type.name} buffer is not allowed "
                           "(VTA stores the output buffer)")
        if insn.x_pad_0 or insn.x_pad_1 or insn.y_pad_0 or insn.y_pad_1:
            raise TVMError("STORE cannot pad")
        nbytes = self.env.OUT_ELEM_BYTES
        self._check_range("acc", insn.sram_base + insn.y_size * insn.x_size, len(self.acc))
        for y in range(insn.y_size):
            lo = insn.sram_base + y * insn.x_size
            out = self.acc[lo:lo + insn.x_size].astype(np.int8)  # the low 8 bits
            self.dram.write((insn.dram_base + y * insn.x_stride) * nbytes, out)
        self.counters["out_store_nbytes"] += insn.y_size * insn.x_size * nbytes

    @staticmethod
    def _check_range(name: str, hi: int, depth: int) -> None:
        if hi > depth:
            raise TVMError(f"VTA {name} buffer overflow: tile {hi - 1} of a {depth}-tile buffer")

    # -- compute -----------------------------------------------------------------------------
    def _indices(self, insn: GemmInsn | AluInsn) -> np.ndarray:
        """(n, 3) dst/src/wgt tile indices of every micro-op execution, in order."""
        uops = self.uop[insn.uop_bgn:insn.uop_end]
        i0 = np.arange(insn.iter_out)[:, None, None]
        i1 = np.arange(insn.iter_in)[None, :, None]
        wgt_out = getattr(insn, "wgt_factor_out", 0)
        wgt_in = getattr(insn, "wgt_factor_in", 0)
        factors = np.array([[insn.dst_factor_out, insn.src_factor_out, wgt_out],
                            [insn.dst_factor_in, insn.src_factor_in, wgt_in]])
        idx = (uops[None, None, :, :] + i0[..., None] * factors[0]
               + i1[..., None] * factors[1])
        return idx.reshape(-1, 3)

    def _gemm(self, insn: GemmInsn) -> None:
        idx = self._indices(insn)
        if len(idx) == 0:
            return
        dst, src, wgt = idx[:, 0], idx[:, 1], idx[:, 2]
        self._check_range("acc", int(dst.max()) + 1, len(self.acc))
        if insn.reset_reg:
            self.acc[dst] = 0
            return
        self._check_range("inp", int(src.max()) + 1, len(self.inp))
        self._check_range("wgt", int(wgt.max()) + 1, len(self.wgt))
        prod = np.einsum("nbi,noi->nbo", self.inp[src].astype(np.int32),
                         self.wgt[wgt].astype(np.int32))
        np.add.at(self.acc, dst, prod)
        self.counters["gemm_counter"] += len(idx)

    def _alu(self, insn: AluInsn) -> None:
        idx = self._indices(insn)
        if len(idx) == 0:
            return
        dst, src = idx[:, 0], idx[:, 1]
        self._check_range("acc", int(max(dst.max(), src.max())) + 1, len(self.acc))
        independent = len(np.unique(dst)) == len(dst) and (
            insn.use_imm or not np.intersect1d(dst, src).size)
        if independent:  # no micro-op reads what another one writes: one vector operation
            b = np.int32(insn.imm) if insn.use_imm else self.acc[src]
            self.acc[dst] = _alu_op(insn.alu_opcode, self.acc[dst], b)
        else:
            for d, s in zip(dst, src, strict=True):
                b = np.int32(insn.imm) if insn.use_imm else self.acc[s]
                self.acc[d] = _alu_op(insn.alu_opcode, self.acc[d], b)
        self.counters["alu_counter"] += len(idx)

    # -- statistics ----------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        return dict(self.counters)

    def clear_stats(self) -> None:
        self.counters = dict.fromkeys(_STAT_KEYS, 0)


def _uop_row(word: int, env: Environment) -> tuple[int, int, int]:
    u = decode_uop(word, env)
    return (u.dst_idx, u.src_idx, u.wgt_idx)


def _alu_op(op: AluOp, a: np.ndarray, b) -> np.ndarray:
    """``op(a, b)`` on int32 with wrap-around, as VTA's ALU computes it."""
    a64 = a.astype(np.int64)
    b64 = np.asarray(b, np.int64)
    if op == AluOp.MIN:
        r = np.minimum(a64, b64)
    elif op == AluOp.MAX:
        r = np.maximum(a64, b64)
    elif op == AluOp.ADD:
        r = a64 + b64
    elif op == AluOp.MUL:
        r = a64 * b64
    else:  # SHR: arithmetic right shift by b, left shift by -b
        shift = np.broadcast_to(b64, np.broadcast_shapes(a64.shape, b64.shape))
        r = np.where(shift >= 0, a64 >> np.clip(shift, 0, 63), a64 << np.clip(-shift, 0, 63))
    return (r & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


_SIMULATORS: dict[tuple, Simulator] = {}


def current(env: Environment | None = None) -> Simulator:
    """The simulated VTA of configuration ``env`` (the current one by default); one per
    configuration, however often it is read."""
    env = env or get_env()
    key = tuple(sorted((k, str(v)) for k, v in env.cfg.items()))
    if key not in _SIMULATORS:
        _SIMULATORS[key] = Simulator(env)
    return _SIMULATORS[key]


def dram() -> Dram:
    """The DRAM of the current simulated VTA."""
    return current().dram


def run(stream: bytes) -> int:
    """Execute an encoded instruction stream on the current VTA; return its cycles."""
    return current().run(stream)


def stats() -> dict[str, int]:
    """Counters since the last :func:`clear_stats` (VTA's ``simulator.stats()``, plus cycles
    and per-module busy cycles)."""
    return current().stats()


def clear_stats() -> None:
    current().clear_stats()


def debug_mode(trace: bool) -> None:
    """Record an instruction trace of every run (read it with :func:`last_trace`)."""
    current().trace_enabled = bool(trace)


def last_trace() -> list[TraceEntry]:
    """The instructions of the last run with their module and start/end cycles."""
    return list(current().trace)
