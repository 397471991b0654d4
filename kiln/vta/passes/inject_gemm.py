"""GEMM injection: the micro-op pushes left by tensorizing with ``env.gemm`` become GEMM
operations.

After ``s[C_buf].tensorize(axis, env.gemm)`` the loops outside the intrinsic that hold
nothing but ``vta.uop_push`` calls (kiln.vta.intrin) form a *micro-op region*: a perfect
loop nest around one or more pushes. Every push's accumulator, input and weight offsets are
evaluated over the nest (``concrete``) and turned into tile indices of the on-chip buffers;
the pushes of a nest form one :class:`UopOp`, which the code generator folds into a GEMM
instruction (``fold_uop``); pushes writing disjoint accumulator tiles (those of different
virtual threads) form one operation each, so that each thread's GEMM waits only for its
own loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.stmt import ACCESS_PTR

from ..env import Environment
from ..intrin import UOP_PUSH
from ..program import Placement
from .concrete import evaluate, nest_grid, perfect_nest

__all__ = ["UopOp", "inject_gemm", "is_uop_region"]


@dataclass(frozen=True)
class UopOp:
    """A GEMM (``alu_opcode`` None) or ALU operation as a tile index array of shape
    ``(*loops, K, 3)`` (dst, src, wgt), before folding."""

    idx: np.ndarray
    reset: bool = False
    alu_opcode: object = None
    use_imm: bool = False
    imm: int = 0


def _is_push(stmt: S.Stmt) -> bool:
    return isinstance(stmt, S.Evaluate) and isinstance(stmt.value, E.Call) and \
        stmt.value.op == UOP_PUSH


def is_uop_region(stmt: S.Stmt) -> bool:
    """True when ``stmt`` holds only loops around micro-op pushes."""
    if _is_push(stmt):
        return True
    if isinstance(stmt, S.For):
        return is_uop_region(stmt.body)
    if isinstance(stmt, S.SeqStmt):
        return all(is_uop_region(s) for s in stmt.seq)
    return False


def inject_gemm(stmt: S.Stmt, env: Mapping, placements: Mapping[E.Var, Placement],
                vta: Environment) -> list[UopOp]:
    """The GEMM operations of the micro-op region ``stmt``; a nest that is not perfect, or
    mixes reset and accumulate pushes, is unrolled around its parts."""
    loops, body = perfect_nest(stmt, env)
    pushes = list(body.seq) if isinstance(body, S.SeqStmt) else [body]
    resets = {_reset_flag(p) for p in pushes if _is_push(p)}
    if all(_is_push(p) for p in pushes) and len(resets) == 1:
        grid = nest_grid(loops, env)
        shape = tuple(extent for _, _, extent in loops)
        idx = np.stack([_push_indices(p.value, grid, shape, placements, vta) for p in pushes],
                       axis=-2)
        reset = resets.pop()
        if _disjoint_outputs(idx):  # virtual threads: one operation each
            return [UopOp(idx[..., k:k + 1, :], reset=reset) for k in range(len(pushes))]
        return [UopOp(idx, reset=reset)]
    if not loops:
        return [op for p in pushes for op in inject_gemm(p, env, placements, vta)]
    var, lo, extent = loops[0]
    outer = stmt
    while not isinstance(outer, S.For):
        outer = outer.body
    return [op for v in range(lo, lo + extent)
            for op in inject_gemm(outer.body, {**env, var: np.int64(v)}, placements, vta)]


def _disjoint_outputs(idx: np.ndarray) -> bool:
    """Do the pushes of the body write disjoint accumulator tiles over the whole nest?
    Then each may run as an operation of its own: GEMM updates of one kind commute."""
    k = idx.shape[-2]
    dst = [set(idx[..., j, 0].reshape(-1).tolist()) for j in range(k)]
    return k > 1 and sum(map(len, dst)) == len(set().union(*dst))


def _reset_flag(push: S.Evaluate) -> bool:
    return bool(int(push.value.args[1].value))


def _push_indices(call: E.Call, grid, shape, placements, vta: Environment) -> np.ndarray:
    """(``*shape``, 3) tile indices of one push over the loop nest."""
    elems = (vta.BATCH * vta.BLOCK_OUT, vta.BATCH * vta.BLOCK_IN, vta.BLOCK_OUT * vta.BLOCK_IN)
    out = []
    for arg, tile in zip(call.args[2:5], elems, strict=True):
        if isinstance(arg, E.Call) and arg.op == ACCESS_PTR:
            place = placements.get(arg.args[1])
            if place is None or not place.on_chip:
                raise NotImplementedError("GEMM operands must be VTA on-chip buffers")
            offset = np.broadcast_to(evaluate(arg.args[2], grid), shape)
            if (offset % tile).any():
                raise NotImplementedError("GEMM operand offsets must be whole tiles")
            out.append(place.base + offset // tile)
        else:
            out.append(np.zeros(shape, np.int64))
    return np.stack(out, axis=-1)
