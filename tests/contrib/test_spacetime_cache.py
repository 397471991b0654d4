"""kiln.contrib.spacetime.cache: the LRU cache simulator and reuse distances against
hand-computed counts (issue 20, acceptance 1)."""

from __future__ import annotations

import numpy as np

from kiln import te
from kiln.contrib import spacetime
from kiln.contrib.spacetime.cache import addresses, host_levels, lru_misses


def _copy(n: int):
    """B[i] = A[i]: the trace A0 B0 A1 B1 ...; A at byte 0, B at the next 64-byte boundary."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i], name="B")
    return spacetime.trace(te.create_schedule(B.op), [A, B])


def test_layout_aligns_buffers_to_64_bytes():
    tr = _copy(10)  # A: 40 bytes, so B starts at 64
    assert addresses(tr)[:4].tolist() == [0, 64, 4, 68]


def test_direct_mapped_conflicts():
    # 16 floats = 64 bytes each. 4 sets of one 16-byte line: A's line i and B's line 4 + i
    # share set i, so every access evicts the other buffer's line: all 32 accesses miss.
    stats = spacetime.simulate(_copy(16), levels=[(64, 1, 16)])
    assert stats.misses["L1"] == {"A": 16, "B": 16}
    # two ways per set: each line is loaded once (4 lines per buffer)
    stats = spacetime.simulate(_copy(16), levels=[(128, 2, 16)])
    assert stats.misses["L1"] == {"A": 4, "B": 4}
    assert stats.accesses == {"A": 16, "B": 16}


def test_second_level_sees_first_level_misses():
    stats = spacetime.simulate(_copy(16), levels=[(64, 1, 16), (256, 4, 16)])
    assert stats.misses["L1"] == {"A": 16, "B": 16}
    assert stats.misses["L2"] == {"A": 4, "B": 4}
    assert "| A | 16 | 16 | 4 |" in stats.table()


def test_lru_replacement_order():
    # 1 set, 2 ways: 0 1 0 2 1 -> 2 evicts 1 (least recent), so the last 1 misses
    assert lru_misses(np.array([0, 1, 0, 2, 1]), 1, 2).tolist() == \
        [True, True, False, True, True]


def test_default_levels_are_this_machines_caches():
    levels = host_levels()
    assert levels and all(size > 0 and ways > 0 and line > 0 for _, size, ways, line in levels)
    stats = spacetime.simulate(_copy(8))
    assert [lv[0] for lv in stats.levels] == [lv[0] for lv in levels]


def test_reuse_distances():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + A[i], name="B")
    tr = spacetime.trace(te.create_schedule(B.op), [A, B])  # A_i A_i B_i per i
    assert spacetime.reuse_distances(tr) == {-1: 8, 0: 4}
    # 8 floats, 16-byte lines: A0 B0 cold, then each access saw the other buffer's line
    assert spacetime.reuse_distances(_copy(8), line_bytes=16) == {-1: 4, 1: 12}
