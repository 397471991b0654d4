"""What a GPU trace costs the memory system, per warp access (book, section 5.5).

A *warp access* is one step of a GPU trace on one buffer: the elements the active threads of
a warp read or write with one instruction.

* :func:`coalescing` — global memory: the 32-, 64- or 128-byte transactions a warp access
  needs. The elements fall into aligned 128-byte segments; each touched segment is one
  transaction, shrunk to its aligned 64-byte or 32-byte half when the bytes used fit there
  (the rule of CUDA's compute capability 1.2+ coalescing; buffers start 256-byte aligned).
  Consecutive threads reading consecutive floats: one 128-byte transaction per warp.
* :func:`bank_conflicts` — shared memory: 32 banks of 4-byte words, word ``j`` in bank
  ``j % 32``. A warp access takes as many passes as the most distinct words any one bank
  must serve; threads reading the same word share it (broadcast). ``passes - 1`` are the
  bank conflicts. Each shared buffer is taken to start at bank 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .trace import Trace

SEGMENT_BYTES = 128
BANKS = 32
WORD_BYTES = 4


@dataclass(frozen=True)
class WarpAccesses:
    """One row per warp access: its step, buffer (index into ``buffers``), ``requests``
    (transactions, or bank passes) and ``bytes`` (moved by the transactions, or requested
    from the banks)."""

    buffers: list[str]
    step: np.ndarray
    buffer: np.ndarray
    requests: np.ndarray
    bytes: np.ndarray

    def summary(self) -> dict[str, dict[str, float]]:
        """Per buffer: warp accesses, requests in all, and requests per warp access."""
        out = {}
        for i, name in enumerate(self.buffers):
            mine = self.requests[self.buffer == i]
            if len(mine):
                out[name] = {"accesses": len(mine), "requests": int(mine.sum()),
                             "per_access": float(mine.mean())}
        return out


@dataclass(frozen=True)
class _Events:
    """The events of one memory scope, grouped by warp access (``group``, contiguous)."""

    addr: np.ndarray  # bytes from the buffer's start
    itemsize: np.ndarray
    group: np.ndarray
    count: int
    first: np.ndarray  # the first event of each group

    def result(self, trace: Trace, requests: np.ndarray, nbytes: np.ndarray,
               step: np.ndarray, buf: np.ndarray) -> WarpAccesses:
        return WarpAccesses([b.name for b in trace.buffers], step[self.first],
                            buf[self.first], requests, nbytes)


def _warp_groups(trace: Trace, scope: str) -> tuple[_Events, np.ndarray, np.ndarray]:
    if not trace.gpu:
        raise ValueError("coalescing and bank conflicts need a GPU trace (a schedule with "
                         "blockIdx/threadIdx bindings)")
    wanted = np.array([b.scope == scope for b in trace.buffers] + [False], dtype=bool)
    keep = wanted[trace.buffer]
    sizes = np.array([b.itemsize for b in trace.buffers] + [0], dtype=np.int64)
    step, buf = trace.step[keep], trace.buffer[keep]
    itemsize = sizes[buf]
    new = np.concatenate(([True], (step[1:] != step[:-1]) | (buf[1:] != buf[:-1])))[:len(step)]
    group = np.cumsum(new) - 1
    events = _Events(trace.offset[keep] * itemsize, itemsize, group, int(new.sum()),
                     np.flatnonzero(new))
    return events, step, buf


def coalescing(trace: Trace) -> WarpAccesses:
    """Global-memory transactions of each warp access (module docstring); ``bytes`` is the
    bytes the transactions move."""
    ev, step, buf = _warp_groups(trace, "global")
    segment = ev.addr // SEGMENT_BYTES
    # one row per (warp access, segment): the lowest and highest byte used in it
    rows, inverse = np.unique(np.stack([ev.group, segment]), axis=1, return_inverse=True)
    lo = np.full(rows.shape[1], np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.zeros(rows.shape[1], dtype=np.int64)
    np.minimum.at(lo, inverse.ravel(), ev.addr)
    np.maximum.at(hi, inverse.ravel(), ev.addr + ev.itemsize - 1)
    size = np.full(rows.shape[1], SEGMENT_BYTES, dtype=np.int64)
    for smaller in (SEGMENT_BYTES // 2, SEGMENT_BYTES // 4):
        size = np.where(lo // smaller == hi // smaller, smaller, size)
    requests = np.bincount(rows[0], minlength=ev.count)
    moved = np.bincount(rows[0], weights=size, minlength=ev.count).astype(np.int64)
    return ev.result(trace, requests, moved, step, buf)


def bank_conflicts(trace: Trace) -> WarpAccesses:
    """Shared-memory passes of each warp access (module docstring); ``bytes`` is the bytes
    the threads ask for."""
    ev, step, buf = _warp_groups(trace, "shared")
    words = np.unique(np.stack([ev.group, ev.addr // WORD_BYTES]), axis=1)
    banks, per_bank = np.unique(np.stack([words[0], words[1] % BANKS]), axis=1,
                                return_counts=True)
    passes = np.zeros(ev.count, dtype=np.int64)
    np.maximum.at(passes, banks[0], per_bank)
    asked = np.bincount(ev.group, weights=ev.itemsize, minlength=ev.count).astype(np.int64)
    return ev.result(trace, passes, asked, step, buf)
