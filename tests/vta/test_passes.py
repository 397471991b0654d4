"""The VTA code generator's passes on their own (kiln/vta/passes/)."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import kiln
import kiln.vta as vta
from kiln import te
from kiln.ir import stmt as S
from kiln.vta import get_env
from kiln.vta.isa import GemmInsn, MemId, MemInsn, Opcode, Uop
from kiln.vta.passes.alu_inplace import alu_inplace
from kiln.vta.passes.coproc_sync import insert_dependences
from kiln.vta.passes.fold_uop import fold_uop_loops
from kiln.vta.passes.inject_dma import fit_transfers
from kiln.vta.passes.order_dma import order_dma
from kiln.vta.program import Emitted, Region
from kiln.vta.timing import schedule

ENV = get_env()


def _expand(transfers):
    """The tile sequence a list of transfers writes (-1 = padding)."""
    out = []
    for t in transfers:
        width = t.x_pad_0 + t.x_size + t.x_pad_1
        out += [-1] * (t.y_pad_0 * width)
        for y in range(t.y_size):
            out += [-1] * t.x_pad_0 + [t.dram + y * t.x_stride + x for x in range(t.x_size)]
            out += [-1] * t.x_pad_1
        out += [-1] * (t.y_pad_1 * width)
    return np.array(out, dtype=np.int64)


@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 6), st.integers(0, 2),
       st.integers(0, 2))
@example(2, 1, 4, 2, 2)  # the first row's widest frame left padding the last row cannot frame
def test_padded_frames_fit_and_reproduce(c, h, w, py, px):
    grid = -np.ones((c, h + 2 * py, w + 2 * px), np.int64)
    grid[:, py:py + h, px:px + w] = np.arange(c * h * w).reshape(c, h, w) * 1 + 5
    tiles = grid.reshape(-1)
    transfers = fit_transfers(tiles)
    np.testing.assert_array_equal(_expand(transfers), tiles)
    assert len(transfers) <= c


def test_strided_rows_are_one_transfer():
    (t,) = fit_transfers(np.array([0, 4, 8, 12]))
    assert (t.y_size, t.x_size, t.x_stride) == (4, 1, 4)


def test_fold_affine_loops():
    i0 = np.arange(3)[:, None, None, None]
    i1 = np.arange(4)[None, :, None, None]
    k = np.arange(2)[None, None, :, None]
    parts = np.broadcast_arrays(i0 * 8 + i1 * 2 + k, i1 + k, i0 * 3 + k)
    kernel = fold_uop_loops(np.concatenate(parts, axis=-1))
    assert (kernel.iter_out, kernel.iter_in) == (3, 4)
    assert kernel.factor_out == (8, 0, 3) and kernel.factor_in == (2, 1, 0)
    assert kernel.uops == (Uop(0, 0, 0), Uop(1, 1, 1))
    assert kernel.index_range(0) == (0, 8 * 2 + 2 * 3 + 1 + 1)
    assert kernel.index_range(1) == (0, 3 + 1 + 1)


def test_non_affine_loops_become_micro_ops():
    idx = np.stack([np.array([0, 1, 3, 7]), np.zeros(4, int), np.zeros(4, int)], -1)
    kernel = fold_uop_loops(idx.reshape(4, 1, 3))
    assert kernel.iter_out == 1 and len(kernel.uops) == 4


def _load(tiles, buffer="inp", lo=0):
    return Emitted(MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, y_size=1, x_size=tiles,
                           x_stride=tiles), "load", writes=(Region(buffer, lo, lo + tiles),))


def _gemm(reads):
    return Emitted(GemmInsn(uop_bgn=0, uop_end=1, iter_out=50), "compute", reads=reads,
                   writes=(Region("acc", 0, 1),))


def test_tokens_for_raw_and_war_only():
    prog = [_load(4, lo=0), _gemm((Region("inp", 0, 4),)), _load(4, lo=4),
            _load(4, lo=0), Emitted(MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT,
                                            y_size=1, x_size=1, x_stride=1), "store",
                                    reads=(Region("acc", 0, 1),))]
    out = [e.insn for e in insert_dependences(prog)]
    assert out[0].push_next and out[1].pop_prev      # RAW: GEMM waits for its load
    assert not out[2].pop_next                       # disjoint tiles: no wait
    assert out[3].pop_next and out[1].push_prev      # WAR: reload waits for the GEMM
    assert out[4].pop_prev and out[1].push_next      # RAW through the accumulator
    schedule(out, ENV)                               # no deadlock


def test_load_after_store_is_relayed_by_compute():
    store = Emitted(MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, y_size=1, x_size=1,
                            x_stride=1), "store", writes=(Region("dram:0", 0, 1),))
    load = Emitted(MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, y_size=1, x_size=1,
                           x_stride=1), "load", reads=(Region("dram:0", 0, 1),))
    out = insert_dependences([store, load])
    assert [e.module for e in out] == ["store", "compute", "load"]
    t = schedule([e.insn for e in out], ENV)
    assert t.start[2] >= t.end[0]


def test_order_dma_moves_the_load_that_can_start_first():
    g0, g1 = _gemm((Region("inp", 0, 4),)), _gemm((Region("inp", 4, 8),))
    prog = [_load(4, lo=0), _load(4, lo=4), g0, g1, _load(4, lo=0), _load(4, lo=4),
            _load(4, "wgt", 0)]
    prog[-1].writes = (Region("wgt", 0, 4),)
    out = order_dma(prog)
    assert out[:4] == prog[:4]
    # the weight load conflicts with nothing: it goes first; the reload of thread 0's tiles
    # (waits for g0) before thread 1's (waits for g1)
    assert out[4] is prog[6] and out[5] is prog[4] and out[6] is prog[5]


def _alu_chain(reread: bool):
    """L = A; D = L >> 2; E = D + L (L read after D) or D * 3; C = int8(E)."""
    env = ENV
    shape = (2, env.BATCH, env.BLOCK_OUT)
    A = te.placeholder(shape, name="A", dtype="int32")
    L = te.compute(shape, lambda *i: A(*i), "L")
    D = te.compute(shape, lambda *i: L(*i) >> 2, "D")
    E = te.compute(shape, (lambda *i: D(*i) + L(*i)) if reread else (lambda *i: D(*i) * 3),
                   "E")
    C = te.compute(shape, lambda *i: E(*i).astype("int8"), "C")
    s = te.create_schedule(C.op)
    for t in (L, D, E):
        s[t].set_scope(env.acc_scope)
    s[L].pragma(s[L].op.axis[0], env.dma_copy)
    s[D].pragma(s[D].op.axis[0], env.alu)
    s[E].pragma(s[E].op.axis[0], env.alu)
    s[C].pragma(s[C].op.axis[0], env.dma_copy)
    return s, [A, C]


def _lowered_body(reread: bool):
    s, args = _alu_chain(reread)
    return kiln.lower(s, args).functions["main"].body


def _allocations(stmt):
    names = []

    def walk(s):
        if isinstance(s, S.Allocate):
            names.append(s.buffer_var.name)
        for f in getattr(s, "_fields", ()):
            v = getattr(s, f)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, S.Stmt):
                    walk(x)

    walk(stmt)
    return names


def test_alu_inplace_merges_a_dead_source():
    body = alu_inplace(_lowered_body(reread=False), ENV.acc_scope)
    assert _allocations(body) == ["L"]


def test_alu_inplace_keeps_a_source_read_later():
    body = alu_inplace(_lowered_body(reread=True), ENV.acc_scope)
    assert "D" in _allocations(body) and "L" in _allocations(body)


@pytest.mark.parametrize("reread", [False, True])
def test_alu_chain_results(reread):
    s, (A, C) = _alu_chain(reread)
    f = vta.build(s, [A, C], "ext_dev")
    a = np.random.default_rng(3).integers(-4000, 4000, A.shape).astype("int32")
    c = np.zeros(C.shape, "int8")
    f(a, c)
    expect = (a >> 2) + a if reread else (a >> 2) * 3
    np.testing.assert_equal(c, expect.astype("int8"))


def test_fold_skips_loops_of_extent_one():
    idx = np.zeros((1, 5, 1, 3), np.int64)
    idx[0, :, 0, 0] = np.arange(5) * 2
    kernel = fold_uop_loops(idx)
    assert (kernel.iter_out, kernel.factor_out, len(kernel.uops)) == (5, (2, 0, 0), 1)


def test_a_copy_of_no_element_is_a_clear_error():
    """A DMA copy whose loops have no iteration for a tile (a leftover tail under virtual
    threads) says so, instead of failing on an empty index array."""
    from kiln.vta.passes.inject_dma import _tiles

    empty = np.zeros(0, np.int64)
    with pytest.raises(NotImplementedError, match="moves no element"):
        _tiles(empty, empty, np.zeros(0, bool), 16)
