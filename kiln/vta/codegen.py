"""VTA code generation: a lowered function becomes a VTA program (``program.Program``).

VTA kernels have static shapes, so the host part of the function (the loops around the
accelerator's operations) is evaluated here, at build time, and the instruction stream is
fixed; the runtime only adds the arrays' DRAM addresses (relocations). TVM instead emits host
C code that calls the VTA runtime to build the same stream at run time.

The walk over the loop program:

* ``allocate`` in ``env.inp_scope``/``wgt_scope``/``acc_scope`` places the buffer in that
  on-chip buffer, from the first free tile (released at the end of its scope);
* ``pragma_dma_copy`` nests become LOAD/STORE (``passes.inject_dma``), ``pragma_alu`` nests
  ALU operations (``passes.inject_alu``), loops holding only ``vta.uop_push`` GEMM
  operations (``passes.inject_gemm``); operations become instructions over micro-op kernels
  (``passes.fold_uop``) loaded into the micro-op buffer when not resident;
* other loops, lets and conditions are evaluated (loops unrolled);
* a FINISH ends the stream; ``passes.order_dma`` orders independent transfers by when
  they can start, then ``passes.coproc_sync`` adds the dependence tokens.

Anything else (host computation, a buffer in another scope) raises NotImplementedError.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from kiln.errors import TVMError
from kiln.ir import expr as E
from kiln.ir import stmt as S

from .env import Environment
from .isa import AluInsn, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, encode_uop
from .passes.concrete import evaluate_int
from .passes.coproc_sync import insert_dependences
from .passes.fold_uop import UopKernel, fold_uop_loops
from .passes.inject_alu import inject_alu
from .passes.inject_dma import inject_dma
from .passes.inject_gemm import UopOp, inject_gemm, is_uop_region
from .passes.order_dma import order_dma
from .program import UOP_RELOC, Emitted, Placement, Program, Region

__all__ = ["generate"]


def generate(func: S.PrimFunc, vta: Environment) -> Program:
    """The VTA program of the lowered function ``func``."""
    placements: dict[E.Var, Placement] = {}
    names, shapes, dtypes = [], [], []
    for k, param in enumerate(func.params):
        buf = func.buffer_map.get(param)
        if buf is None:
            raise NotImplementedError(f"VTA functions take arrays only; parameter "
                                      f"'{param.name}' is a scalar")
        placements[buf.data] = Placement("dram", arg=k)
        names.append(buf.name)
        shapes.append(tuple(int(evaluate_int(d, {})) for d in buf.shape))
        dtypes.append(buf.dtype)
    gen = _Generator(vta, placements)
    gen.emit(func.body, {})
    gen.out.append(Emitted(FinishInsn(), "compute", barrier=True))
    emitted = insert_dependences(order_dma(gen.out))
    return Program([e.insn for e in emitted], [e.reloc for e in emitted], gen.uops.words,
                   names, shapes, dtypes)


class _UopBuffer:
    """Micro-op kernels in DRAM (``words``) and which are resident in the micro-op buffer."""

    def __init__(self, vta: Environment) -> None:
        self.vta = vta
        self.words: list[int] = []
        self.in_dram: dict[tuple, int] = {}
        self.resident: dict[tuple, int] = {}
        self.free = 0

    def place(self, uops: tuple) -> tuple[int, Emitted | None]:
        """The kernel's first micro-op slot, and the LOAD that brings it in (or None)."""
        if uops in self.resident:
            return self.resident[uops], None
        n = len(uops)
        if n > self.vta.UOP_DEPTH:
            raise NotImplementedError(f"a micro-op kernel of {n} micro-ops exceeds the "
                                      f"{self.vta.UOP_DEPTH}-entry micro-op buffer")
        if self.free + n > self.vta.UOP_DEPTH:
            self.resident.clear()
            self.free = 0
        if uops not in self.in_dram:
            self.in_dram[uops] = len(self.words)
            self.words += [encode_uop(u, self.vta) for u in uops]
        slot, self.free = self.free, self.free + n
        self.resident[uops] = slot
        insn = MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, sram_base=slot,
                       dram_base=self.in_dram[uops], y_size=1, x_size=n, x_stride=n)
        return slot, Emitted(insn, "compute", writes=(Region("uop", slot, slot + n),),
                             reloc=UOP_RELOC)


_SCOPE_TILE = {"inp": ("INP_DEPTH", "INP_ELEM_BYTES"), "wgt": ("WGT_DEPTH", "WGT_ELEM_BYTES"),
               "acc": ("ACC_DEPTH", "ACC_ELEM_BYTES")}


class _Generator:
    def __init__(self, vta: Environment, placements: dict[E.Var, Placement]) -> None:
        self.vta = vta
        self.placements = placements
        self.out: list[Emitted] = []
        self.uops = _UopBuffer(vta)
        self.free = dict.fromkeys(_SCOPE_TILE, 0)
        self.scopes = {vta.inp_scope: "inp", vta.wgt_scope: "wgt", vta.acc_scope: "acc"}

    def emit(self, stmt: S.Stmt, env: Mapping) -> None:
        if isinstance(stmt, S.SeqStmt):
            for s in stmt.seq:
                self.emit(s, env)
        elif isinstance(stmt, S.Allocate):
            self._allocate(stmt, env)
        elif isinstance(stmt, S.AttrStmt):
            self._attr(stmt, env)
        elif is_uop_region(stmt):
            self._operations(inject_gemm(stmt, env, self.placements, self.vta))
        elif isinstance(stmt, S.For):
            lo, extent = evaluate_int(stmt.min, env), evaluate_int(stmt.extent, env)
            for v in range(lo, lo + extent):
                self.emit(stmt.body, {**env, stmt.loop_var: np.int64(v)})
        elif isinstance(stmt, S.LetStmt):
            self.emit(stmt.body, {**env, stmt.var: np.int64(evaluate_int(stmt.value, env))})
        elif isinstance(stmt, S.IfThenElse):
            branch = stmt.then_case if evaluate_int(stmt.condition, env) else stmt.else_case
            if branch is not None:
                self.emit(branch, env)
        elif isinstance(stmt, S.Evaluate) and isinstance(stmt.value, E.IntImm):
            return
        else:
            raise NotImplementedError(
                f"VTA code generation: {type(stmt).__name__} outside an accelerator "
                "operation (host computation is not supported on ext_dev; mark copies with "
                "env.dma_copy and element-wise stages with env.alu)")

    def _attr(self, stmt: S.AttrStmt, env: Mapping) -> None:
        if stmt.attr_key == f"pragma_{self.vta.dma_copy}":
            self.out += inject_dma(stmt.body, env, self.placements, self.vta)
        elif stmt.attr_key == f"pragma_{self.vta.alu}":
            self._operations(inject_alu(stmt.body, env, self.placements, self.vta))
        else:
            self.emit(stmt.body, env)

    def _allocate(self, stmt: S.Allocate, env: Mapping) -> None:
        kind = self.scopes.get(stmt.scope)
        if kind is None:
            raise NotImplementedError(
                f"VTA code generation: buffer '{stmt.buffer_var.name}' in scope "
                f"'{stmt.scope}'; ext_dev buffers live in env.inp_scope, env.wgt_scope or "
                "env.acc_scope")
        depth_attr, bytes_attr = _SCOPE_TILE[kind]
        elems = math.prod(evaluate_int(e, env) for e in stmt.extents)
        nbytes = elems * np.dtype(stmt.dtype).itemsize
        tiles = -(-nbytes // getattr(self.vta, bytes_attr))
        base = self.free[kind]
        if base + tiles > getattr(self.vta, depth_attr):
            raise TVMError(f"VTA {kind} buffer overflow: '{stmt.buffer_var.name}' needs tiles "
                           f"[{base}, {base + tiles}) of {getattr(self.vta, depth_attr)}; "
                           "tile the schedule more finely")
        self.placements[stmt.buffer_var] = Placement(kind, base)
        self.free[kind] = base + tiles
        self.emit(stmt.body, env)
        self.free[kind] = base
        del self.placements[stmt.buffer_var]

    def _operations(self, ops: list[UopOp]) -> None:
        for op in ops:
            kernel = fold_uop_loops(op.idx)
            slot, load = self.uops.place(kernel.uops)
            if load is not None:
                self.out.append(load)
            self.out.append(_instruction(op, kernel, slot))


def _instruction(op: UopOp, kernel: UopKernel, slot: int) -> Emitted:
    loops = dict(uop_bgn=slot, uop_end=slot + len(kernel.uops), iter_out=kernel.iter_out,
                 iter_in=kernel.iter_in, dst_factor_out=kernel.factor_out[0],
                 dst_factor_in=kernel.factor_in[0], src_factor_out=kernel.factor_out[1],
                 src_factor_in=kernel.factor_in[1])
    dst = Region("acc", *kernel.index_range(0))
    uop = Region("uop", slot, slot + len(kernel.uops))
    if op.alu_opcode is None:
        insn = GemmInsn(reset_reg=op.reset, wgt_factor_out=kernel.factor_out[2],
                        wgt_factor_in=kernel.factor_in[2], **loops)
        reads = (uop,) if op.reset else (uop, dst, Region("inp", *kernel.index_range(1)),
                                         Region("wgt", *kernel.index_range(2)))
        return Emitted(insn, "compute", reads=reads, writes=(dst,))
    insn = AluInsn(alu_opcode=op.alu_opcode, use_imm=op.use_imm, imm=op.imm, **loops)
    reads = (uop, dst) if op.use_imm else (uop, dst, Region("acc", *kernel.index_range(1)))
    return Emitted(insn, "compute", reads=reads, writes=(dst,))
