"""ALU injection: an ``env.alu`` loop nest becomes ALU operations on accumulator tiles.

The pragma's body is a perfect loop nest storing one element-wise operation into an
accumulator buffer: ``C[i] = A[i] op B[j]`` or ``C[i] = A[i] op imm`` with ``op`` one of
``+``, ``-`` (an immediate), ``*``, ``min``, ``max``, ``>>``, ``<<`` (an immediate), or a
copy ``C[i] = A[i]``. The VTA ALU updates its destination in place (``dst = dst op src``),
so where ``C`` is not ``A`` the operation is preceded by ``C = 0 * C; C = C + A`` (two
micro-op passes); ``alu_inplace`` first makes most chains in place, as TVM's storage
rewriting does. Element indices are
evaluated over the nest and grouped into ``BATCH x BLOCK_OUT`` tiles, which must be whole
and aligned; the nest's outer loops (those outside the tile) become the operation's loops.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.structural import structural_equal

from ..env import Environment
from ..isa import AluOp
from ..program import Placement
from .concrete import Loop, evaluate, nest_grid, perfect_nest
from .inject_gemm import UopOp

__all__ = ["inject_alu", "alu_operands"]

_OPS = {E.Add: AluOp.ADD, E.Mul: AluOp.MUL, E.Min: AluOp.MIN, E.Max: AluOp.MAX}
_COMMUTATIVE = (AluOp.ADD, AluOp.MUL, AluOp.MIN, AluOp.MAX)
_IMM_RANGE = range(-(1 << 15), 1 << 15)


def inject_alu(stmt: S.Stmt, env: Mapping, placements: Mapping[E.Var, Placement],
               vta: Environment) -> list[UopOp]:
    """The ALU operations of the ``alu`` nest ``stmt`` with host variables ``env``."""
    loops, body = perfect_nest(stmt, env)
    if not isinstance(body, S.Store):
        raise NotImplementedError(f"alu: the body must be one store, got {type(body).__name__}")
    op, lhs, rhs = alu_operands(body.value)
    grid = nest_grid(loops, env)
    elems = vta.BATCH * vta.BLOCK_OUT
    tile_shape = _tile_loops(loops, elems)
    dst = _tiles(body.buffer_var, body.index, grid, loops, placements, elems, tile_shape)

    def tiles_of(load: E.Load) -> np.ndarray:
        return _tiles(load.buffer_var, load.index, grid, loops, placements, elems, tile_shape)

    def operation(src: np.ndarray, alu: AluOp, imm: int | None = None) -> UopOp:
        idx = np.stack([dst, src, np.zeros_like(dst)], axis=-1)[..., None, :]
        return UopOp(idx, alu_opcode=alu, use_imm=imm is not None, imm=imm or 0)

    if isinstance(rhs, E.Load) and _same(body, rhs) and op in _COMMUTATIVE:
        lhs, rhs = rhs, lhs
    ops: list[UopOp] = []
    if lhs is not None and not _same(body, lhs):
        if isinstance(rhs, E.Load) and _same(body, rhs):
            raise NotImplementedError("alu: the destination is the right operand of a "
                                      "non-commutative operation")
        ops += [operation(dst, AluOp.MUL, 0), operation(tiles_of(lhs), AluOp.ADD)]
    if op is None:
        return ops
    if isinstance(rhs, E.Load):
        return ops + [operation(tiles_of(rhs), op)]
    return ops + [operation(dst, op, rhs)]


def alu_operands(value: E.PrimExpr) -> tuple[AluOp | None, E.Load | None, E.Load | int | None]:
    """(ALU opcode, left operand, right operand: a load or an immediate)."""
    if isinstance(value, E.Load):
        return None, value, None
    if isinstance(value, E.Call) and value.op in ("shift_right", "shift_left"):
        a, b = value.args
        if not isinstance(b, E.IntImm):
            return AluOp.SHR, _load(a), _operand(b)
        shift = b.value if value.op == "shift_right" else -b.value
        return AluOp.SHR, _load(a), _imm(shift)
    if isinstance(value, E.Sub) and isinstance(value.b, E.IntImm):
        return AluOp.ADD, _load(value.a), _imm(-value.b.value)
    for cls, op in _OPS.items():
        if type(value) is cls:
            a, b = value.a, value.b
            if isinstance(a, E.IntImm):
                a, b = b, a
            return op, _load(a), _operand(b)
    raise NotImplementedError(f"alu: VTA's ALU computes min, max, +, *, >> of an accumulator "
                              f"tile and a tile or an immediate; got {value}")


def _load(e: E.PrimExpr) -> E.Load:
    while isinstance(e, E.Cast):
        e = e.value
    if not isinstance(e, E.Load):
        raise NotImplementedError(f"alu: an operand must be an accumulator tile, got {e}")
    return e


def _operand(e: E.PrimExpr) -> E.Load | int:
    return _imm(e.value) if isinstance(e, E.IntImm) else _load(e)


def _imm(value: int) -> int:
    if value not in _IMM_RANGE:
        raise NotImplementedError(f"alu: immediate {value} does not fit in 16 signed bits")
    return int(value)


def _same(store: S.Store, load: E.Load | int | None) -> bool:
    return isinstance(load, E.Load) and load.buffer_var is store.buffer_var and \
        structural_equal(load.index, store.index)


def _tile_loops(loops: list[Loop], elems: int) -> tuple[int, ...]:
    """Extents of the loops outside a tile (the innermost loops spanning ``elems``)."""
    extents = [extent for _, _, extent in loops]
    for j in range(len(extents), -1, -1):
        if int(np.prod(extents[j:], dtype=np.int64)) == elems:
            return tuple(extents[:j])
    total = int(np.prod(extents, dtype=np.int64))
    return (total // elems,)


def _tiles(var: E.Var, index: E.PrimExpr, grid, loops: list[Loop],
           placements: Mapping[E.Var, Placement], elems: int,
           tile_shape: tuple[int, ...]) -> np.ndarray:
    place = placements.get(var)
    if place is None or place.buffer != "acc":
        raise NotImplementedError("alu: operands must live in the accumulator buffer "
                                  "(env.acc_scope)")
    shape = tuple(extent for _, _, extent in loops)
    flat = np.broadcast_to(evaluate(index, grid), shape).reshape(-1)
    if flat.size % elems:
        raise NotImplementedError("alu: the loop nest must cover whole tiles")
    rows = flat.reshape(-1, elems)
    if (rows[:, 0] % elems).any() or not np.array_equal(rows, rows[:, :1] + np.arange(elems)):
        raise NotImplementedError("alu: each innermost tile must be contiguous and aligned")
    return (place.base + rows[:, 0] // elems).reshape(tile_shape)
