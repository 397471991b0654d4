"""Cache behaviour read off a trace: an LRU cache hierarchy and reuse distances.

Buffers are laid out one after another in a flat address space, in the trace's buffer order,
each starting at a multiple of 64 bytes (kiln's allocation alignment), so an element's
address is ``base[buffer] + offset * itemsize``.

:func:`simulate` runs the trace's accesses, in order, through set-associative caches with
LRU replacement, nearest level first; each level sees the misses of the level before it, and
a miss fills the line at every level (writes allocate like reads). The levels are this
machine's data caches (``kiln.target.memory.host_memory``) unless given as ``(size_bytes,
ways, line_bytes)``. A ``parallel`` trace goes through one hierarchy in step order; for a
core's private caches simulate one thread's events (``trace.select(trace.thread == t)``).

:func:`reuse_distances` is the histogram of the number of distinct elements (or lines)
touched between two accesses to the same one: an access with reuse distance ``d`` hits in a
fully associative LRU cache of more than ``d`` elements (lines).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .trace import Trace

#: where each buffer starts (bytes), as kiln aligns allocations
ALIGNMENT = 64


def addresses(trace: Trace) -> np.ndarray:
    """The byte address of every event (module docstring's layout)."""
    base, end = [], 0
    for i, b in enumerate(trace.buffers):
        base.append(end)
        mine = trace.offset[trace.buffer == i]
        size = (int(mine.max()) + 1) * b.itemsize if len(mine) else 0
        end = -(-(end + size) // ALIGNMENT) * ALIGNMENT
    itemsize = np.array([b.itemsize for b in trace.buffers], dtype=np.int64)
    return np.array(base, dtype=np.int64)[trace.buffer] + trace.offset * itemsize[trace.buffer]


@dataclass(frozen=True)
class CacheStats:
    """Accesses per buffer and misses per level and buffer (``misses[level][buffer]``)."""

    levels: tuple[tuple[str, int, int, int], ...]  # (name, size_bytes, ways, line_bytes)
    accesses: dict[str, int]
    misses: dict[str, dict[str, int]]

    def table(self) -> str:
        """A Markdown table: one row per buffer, one column of misses per level."""
        names = [lv[0] for lv in self.levels]
        rows = ["| buffer | accesses | " + " | ".join(f"{n} misses" for n in names) + " |",
                "|---" * (2 + len(names)) + "|"]
        for buf, n in self.accesses.items():
            rows.append(f"| {buf} | {n} | "
                        + " | ".join(str(self.misses[lv][buf]) for lv in names) + " |")
        return "\n".join(rows)


def host_levels() -> list[tuple[str, int, int, int]]:
    """This machine's data caches as ``(name, size_bytes, ways, line_bytes)``."""
    from kiln.target.memory import host_memory

    return [(c.name, c.size_bytes, c.ways, c.line_bytes) for c in host_memory().caches]


def simulate(trace: Trace, levels: Sequence[tuple[int, int, int]] | None = None) -> CacheStats:
    """Misses per cache level and buffer of ``trace`` (module docstring)."""
    named = host_levels() if levels is None else [
        (f"L{i + 1}", int(size), int(ways), int(line))
        for i, (size, ways, line) in enumerate(levels)]
    names = [b.name for b in trace.buffers]
    addr, buf = addresses(trace), trace.buffer
    accesses = {n: int(c) for n, c in zip(names, np.bincount(buf, minlength=len(names)),
                                          strict=True)}
    misses: dict[str, dict[str, int]] = {}
    for name, size, ways, line in named:
        missed = lru_misses(addr // line, size // (ways * line), ways)
        addr, buf = addr[missed], buf[missed]
        counts = np.bincount(buf, minlength=len(names))
        misses[name] = {n: int(c) for n, c in zip(names, counts, strict=True)}
    return CacheStats(tuple(named), accesses, misses)


def lru_misses(lines: np.ndarray, sets: int, ways: int) -> np.ndarray:
    """Which accesses to cache lines ``lines`` miss in a ``sets`` x ``ways`` LRU cache."""
    missed = np.zeros(len(lines), dtype=bool)
    if not len(lines):
        return missed
    # an access to the line just accessed always hits and leaves the LRU order as it is
    fresh = np.flatnonzero(np.concatenate(([True], lines[1:] != lines[:-1])))
    sets = max(1, sets)
    contents: dict[int, OrderedDict] = {}
    for i, line in zip(fresh.tolist(), lines[fresh].tolist(), strict=True):
        s = contents.setdefault(line % sets, OrderedDict())
        if line in s:
            s.move_to_end(line)
            continue
        missed[i] = True
        s[line] = None
        if len(s) > ways:
            s.popitem(last=False)
    return missed


def reuse_distances(trace: Trace, line_bytes: int | None = None) -> dict[int, int]:
    """``{reuse distance: accesses}`` over elements, or over lines of ``line_bytes``; the
    first access to each counts under -1."""
    addr = addresses(trace)
    keys = addr // line_bytes if line_bytes else addr
    n = len(keys)
    tree = [0] * (n + 1)  # Fenwick tree: 1 where an access is the latest to its key

    def add(i: int, v: int) -> None:
        i += 1
        while i <= n:
            tree[i] += v
            i += i & -i

    def prefix(i: int) -> int:  # marks at positions < i
        total = 0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    hist: dict[int, int] = {}
    last: dict[int, int] = {}
    for t, key in enumerate(keys.tolist()):
        p = last.get(key)
        if p is None:
            d = -1
        else:
            d = prefix(t) - prefix(p + 1)
            add(p, -1)
        hist[d] = hist.get(d, 0) + 1
        add(t, 1)
        last[key] = t
    return dict(sorted(hist.items()))
