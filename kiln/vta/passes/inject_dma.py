"""DMA-copy injection: an ``env.dma_copy`` loop nest becomes 2-D LOAD or STORE instructions.

The pragma's body is a perfect loop nest copying DRAM to an on-chip buffer
(``A_buf[i] = A[f(i)]``, possibly ``if_then_else(in_bounds, A[f(i)], 0)`` for padding) or
the accumulator to DRAM (``C[g(i)] = int8(C_buf[i])``). All indices are evaluated over the
nest (``concrete``) and grouped into tiles (``BATCH x BLOCK_IN`` input elements, ...): the
on-chip side must be one contiguous range of whole tiles, each tile must come from one whole
DRAM tile or be padding. The tile sequence is then cut into as few 2-D transfers as the
instruction allows: rows of ``x_size`` consecutive DRAM tiles at a constant ``x_stride``,
with ``x_pad_0``/``x_pad_1`` zero tiles around each row and ``y_pad_0``/``y_pad_1`` zero
rows above and below (at most 15 each). A copy that fits no such pattern raises
NotImplementedError saying which condition failed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from kiln.errors import TVMError
from kiln.ir import expr as E
from kiln.ir import stmt as S

from ..env import Environment
from ..isa import MemId, MemInsn, Opcode
from ..program import Emitted, Placement, Region
from .concrete import evaluate, full, nest_grid, perfect_nest

__all__ = ["inject_dma", "Transfer", "fit_transfers"]

_MAX_PAD = 15
_LOAD_IDS = {"inp": MemId.INP, "wgt": MemId.WGT, "acc": MemId.ACC}


@dataclass(frozen=True)
class Transfer:
    """One 2-D transfer: on-chip tiles from ``first`` (counted from the copy's start), DRAM
    tiles from ``dram``."""

    first: int
    dram: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0

    @property
    def tiles(self) -> int:
        return (self.y_pad_0 + self.y_size + self.y_pad_1) * \
            (self.x_pad_0 + self.x_size + self.x_pad_1)


def inject_dma(stmt: S.Stmt, env: Mapping, placements: Mapping[E.Var, Placement],
               vta: Environment) -> list[Emitted]:
    """The instructions of the ``dma_copy`` nest ``stmt`` with host variables ``env``."""
    loops, body = perfect_nest(stmt, env)
    if not isinstance(body, S.Store):
        raise NotImplementedError(f"dma_copy: the copy's body must be one store, got "
                                  f"{type(body).__name__}")
    load, pad_mask = _source(body.value)
    dst, src = placements.get(body.buffer_var), placements.get(load.buffer_var)
    if dst is None or src is None:
        raise NotImplementedError("dma_copy: copies between a function argument and a VTA "
                                  "buffer only")
    grid = nest_grid(loops, env)
    dst_idx = full(evaluate(body.index, grid), loops)
    src_idx = full(evaluate(load.index, grid), loops)
    valid = full(evaluate(pad_mask, grid), loops).astype(bool) if pad_mask is not None else \
        np.ones(dst_idx.shape, bool)
    if dst.on_chip and not src.on_chip:
        _check_width(load.dtype, _WIDTH[dst.buffer](vta), f"a LOAD into {dst.buffer}")
        return _load(dst, src, dst_idx, src_idx, valid, vta)
    if src.on_chip and not dst.on_chip and src.buffer == "acc":
        _check_width(body.value.dtype, vta.OUT_WIDTH, "a STORE")
        if not valid.all():
            raise NotImplementedError("dma_copy: a STORE cannot pad")
        return _store(src, dst, src_idx, dst_idx, vta)
    raise NotImplementedError(f"dma_copy: cannot copy {src.buffer} to {dst.buffer} (VTA loads "
                              "DRAM into inp/wgt/acc and stores acc to DRAM)")


_WIDTH = {"inp": lambda v: v.INP_WIDTH, "wgt": lambda v: v.WGT_WIDTH,
          "acc": lambda v: v.ACC_WIDTH}


def _check_width(dtype: str, bits: int, what: str) -> None:
    if np.dtype(dtype).itemsize * 8 != bits:
        raise TVMError(f"dma_copy: {what} moves {bits}-bit elements, but the DRAM tensor is "
                       f"{dtype}")


def _source(value: E.PrimExpr) -> tuple[E.Load, E.PrimExpr | None]:
    """The load a copy reads and the condition under which it is not padding."""
    while isinstance(value, E.Cast):
        value = value.value
    if isinstance(value, E.Load):
        return value, None
    if isinstance(value, E.Call) and value.op in ("if_then_else", "tvm_if_then_else"):
        cond, then, other = value.args
        if isinstance(other, E.IntImm) and other.value == 0:
            load, inner = _source(then)
            return load, cond if inner is None else E.And(cond, inner)
    if isinstance(value, E.Select) and isinstance(value.false_value, E.IntImm):
        return _source(E.Call(value.dtype, "if_then_else",
                              [value.condition, value.true_value, value.false_value]))
    raise NotImplementedError(f"dma_copy: the copied value must be a load (or a load padded "
                              f"with zero), got {value}")


def _tile_elems(buffer: str, vta: Environment) -> int:
    return {"inp": vta.BATCH * vta.BLOCK_IN, "wgt": vta.BLOCK_OUT * vta.BLOCK_IN,
            "acc": vta.BATCH * vta.BLOCK_OUT}[buffer]


def _tiles(sram_idx: np.ndarray, dram_idx: np.ndarray, valid: np.ndarray,
           elems: int) -> tuple[int, np.ndarray]:
    """(first on-chip tile, DRAM tile of each on-chip tile in order or -1 for padding)."""
    order = np.argsort(sram_idx, kind="stable")
    sram, dram, ok = sram_idx[order], dram_idx[order], valid[order]
    n = sram.size
    if n == 0:
        raise NotImplementedError("dma_copy: the copy moves no element here (a loop of the "
                                  "copy has no iteration for this tile: a leftover tail of a "
                                  "split under virtual threads); make the extents divide")
    if n % elems or sram[0] % elems or not np.array_equal(sram, sram[0] + np.arange(n)):
        raise NotImplementedError("dma_copy: the on-chip side must be whole contiguous tiles")
    dram, ok = dram.reshape(-1, elems), ok.reshape(-1, elems)
    if not (ok.all(axis=1) | ~ok.any(axis=1)).all():
        raise NotImplementedError("dma_copy: padding must cover whole tiles")
    lanes = dram[:, :1] + np.arange(elems)
    rows = ok[:, 0]
    if (dram[rows, 0] % elems).any() or not np.array_equal(dram[rows], lanes[rows]):
        raise NotImplementedError("dma_copy: each tile must be one whole DRAM tile "
                                  "(BATCH x BLOCK elements, contiguous and aligned)")
    return int(sram[0] // elems), np.where(rows, dram[:, 0] // elems, -1)


def fit_transfers(tiles: np.ndarray) -> list[Transfer]:
    """Cut the tile sequence (DRAM tile per on-chip tile, -1 = padding) into 2-D transfers.

    Rows of one length, gap and stride go in one transfer where their padding frames them;
    a row alone may be framed several ways, and the padding one frame leaves over is the
    next transfer's to frame: the first choice whose rest can be framed is taken (a search
    over the choices, each (row, leftover padding) tried once)."""
    runs, trailing = _runs(tiles)
    if not runs:
        return [_pad_only(len(tiles))]

    @functools.cache
    def fit(k: int, lead: int) -> tuple[Transfer, ...] | None:
        if k == len(runs):
            return ()
        for end, t, rest in _choices(runs, k, lead, trailing):
            tail = fit(end, rest)
            if tail is not None:
                return (t, *tail)
        return None

    fitted = fit(0, runs[0][0])
    if fitted is None:
        raise NotImplementedError("dma_copy: the padding does not fit VTA's 2-D frame "
                                  "(at most 15 padding tiles or rows on each side)")
    out, first = [], 0
    for t in fitted:
        out.append(replace(t, first=first))
        first += t.tiles
    return out


def _choices(runs: list[tuple[int, int, int]], k: int, lead: int, trailing: int):
    """The transfers that may start at row ``k`` after ``lead`` padding tiles, best first,
    as ``(end row, transfer, padding left for the next)``: rows ``k:end`` of one shape in
    one frame, then row ``k`` alone in each frame that fits it."""
    end = _segment_end(runs, k)
    if end > k + 1:
        framed = _frame(runs, k, end, lead, trailing)
        if framed is not None:
            yield end, *framed
    last = k + 1 == len(runs)
    after = trailing if last else runs[k + 1][0]
    for frame in _lone_row_frames(runs[k][2], lead, after, last):
        framed = _frame(runs, k, k + 1, lead, trailing, frame)
        if framed is not None:
            yield k + 1, *framed


def _frame(runs: list[tuple[int, int, int]], k: int, end: int, lead: int,
           trailing: int, frame: tuple[int, int] | None = None
           ) -> tuple[Transfer, int] | None:
    """The transfer of rows ``runs[k:end]`` with ``lead`` padding tiles before them, and the
    padding left for the next transfer; None when the padding does not frame them. A row
    alone takes ``frame`` (x_pad_0, x_pad_1); several rows' frame follows from their gap."""
    x, start = runs[k][2], runs[k][1]
    last = end == len(runs)
    after = runs[end][0] if not last else trailing
    if end - k > 1:
        stride, gap = runs[k + 1][1] - start, runs[k + 1][0]
        frame = (lead % (x + gap), gap - lead % (x + gap))
    else:
        stride = x
    x_pad_0, x_pad_1 = frame
    width = x + x_pad_0 + x_pad_1
    rest = after - x_pad_1
    if x_pad_1 < 0 or rest < 0:
        return None
    y_pad_0, y_pad_1 = (lead - x_pad_0) // width, min(rest // width, _MAX_PAD)
    if last and rest != y_pad_1 * width:
        return None
    t = Transfer(0, start, end - k, x, stride, y_pad_0, y_pad_1, x_pad_0, x_pad_1)
    if max(y_pad_0, y_pad_1, x_pad_0, x_pad_1) > _MAX_PAD:
        return None
    return t, rest - y_pad_1 * width


def _segment_end(runs: list[tuple[int, int, int]], k: int) -> int:
    """The end of the longest run of rows from ``k`` with one length, gap and stride."""
    end = k + 1
    if end == len(runs):
        return end
    x, start = runs[k][2], runs[k][1]
    gap, stride = runs[end][0], runs[end][1] - start
    while (end < len(runs) and runs[end][2] == x and runs[end][0] == gap and stride >= 0
           and runs[end][1] == start + (end - k) * stride):
        end += 1
    return end


def _lone_row_frames(x: int, lead: int, after: int, last: bool):
    """Each (x_pad_0, x_pad_1) framing a single row so that ``lead`` padding tiles before it
    are whole rows plus ``x_pad_0`` (and, for the last transfer, ``after`` likewise) within
    the 4-bit fields, widest padding first."""
    for x_pad_0 in range(min(lead, _MAX_PAD), -1, -1):
        for x_pad_1 in range(min(after, _MAX_PAD), -1, -1):
            width = x + x_pad_0 + x_pad_1
            before_ok = (lead - x_pad_0) % width == 0 and (lead - x_pad_0) // width <= _MAX_PAD
            after_ok = not last or ((after - x_pad_1) % width == 0
                                    and (after - x_pad_1) // width <= _MAX_PAD)
            if before_ok and after_ok:
                yield x_pad_0, x_pad_1


def _runs(tiles: np.ndarray) -> tuple[list[tuple[int, int, int]], int]:
    """Data runs as (padding before, first DRAM tile, length), and the padding after."""
    runs: list[tuple[int, int, int]] = []
    pad, i, n = 0, 0, len(tiles)
    while i < n:
        if tiles[i] < 0:
            pad += 1
            i += 1
            continue
        j = i + 1
        while j < n and tiles[j] == tiles[j - 1] + 1:
            j += 1
        runs.append((pad, int(tiles[i]), j - i))
        pad, i = 0, j
    return runs, pad


def _pad_only(n: int) -> Transfer:
    for width in range(1, 2 * _MAX_PAD + 1):
        if n % width == 0 and n // width <= _MAX_PAD:
            return Transfer(0, 0, 0, 0, 0, n // width, 0, min(width, _MAX_PAD),
                            width - min(width, _MAX_PAD))
    raise NotImplementedError(f"dma_copy: {n} tiles of pure padding do not fit one LOAD")


def _load(dst: Placement, src: Placement, dst_idx, src_idx, valid,
          vta: Environment) -> list[Emitted]:
    elems = _tile_elems(dst.buffer, vta)
    first, tiles = _tiles(dst_idx, src_idx, valid, elems)
    module = "load" if dst.buffer in ("inp", "wgt") else "compute"
    out = []
    for t in fit_transfers(tiles):
        insn = MemInsn(opcode=Opcode.LOAD, memory_type=_LOAD_IDS[dst.buffer],
                       sram_base=dst.base + first + t.first, dram_base=t.dram,
                       y_size=t.y_size, x_size=t.x_size, x_stride=t.x_stride,
                       y_pad_0=t.y_pad_0, y_pad_1=t.y_pad_1, x_pad_0=t.x_pad_0,
                       x_pad_1=t.x_pad_1)
        sram = Region(dst.buffer, insn.sram_base, insn.sram_base + t.tiles)
        out.append(Emitted(insn, module, reads=(_dram_region(src.arg, t),), writes=(sram,),
                           reloc=src.arg))
    return out


def _store(src: Placement, dst: Placement, src_idx, dst_idx, vta: Environment) -> list[Emitted]:
    elems = vta.BATCH * vta.BLOCK_OUT
    first, tiles = _tiles(src_idx, dst_idx, np.ones(src_idx.shape, bool), elems)
    out = []
    for t in fit_transfers(tiles):
        insn = MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT,
                       sram_base=src.base + first + t.first, dram_base=t.dram,
                       y_size=t.y_size, x_size=t.x_size, x_stride=t.x_stride)
        sram = Region("acc", insn.sram_base, insn.sram_base + t.tiles)
        out.append(Emitted(insn, "store", reads=(sram,), writes=(_dram_region(dst.arg, t),),
                           reloc=dst.arg))
    return out


def _dram_region(arg: int | None, t: Transfer) -> Region:
    return Region(f"dram:{arg}", t.dram, t.dram + max(t.y_size - 1, 0) * t.x_stride + t.x_size)
