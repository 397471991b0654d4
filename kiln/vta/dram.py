"""The accelerator's DRAM: the memory behind ``ext_dev`` arrays, micro-op and instruction
buffers, addressed by byte address as VTA's DMA engines see it.

Allocations are 4 KiB aligned (every tile size divides the alignment, so an array's tile
address is its byte address over the tile size) and never overlap; freed addresses are not
reused, so a stale address fails loudly instead of reading someone else's data.
"""

from __future__ import annotations

import bisect

import numpy as np

from kiln.errors import TVMError

__all__ = ["Dram", "ALIGN"]

ALIGN = 4096


class Dram:
    """Sparse byte-addressed memory made of separate allocations."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._blocks: dict[int, np.ndarray] = {}
        self._next = ALIGN

    def alloc(self, nbytes: int) -> int:
        """A fresh zeroed block of ``nbytes``; returns its byte address."""
        addr = self._next
        size = max(int(nbytes), 1)
        self._next += (size + ALIGN - 1) // ALIGN * ALIGN
        self._blocks[addr] = np.zeros(size, np.uint8)
        bisect.insort(self._bases, addr)
        return addr

    def free(self, addr: int) -> None:
        if addr in self._blocks:
            del self._blocks[addr]
            self._bases.remove(addr)

    def view(self, addr: int, nbytes: int) -> np.ndarray:
        """The bytes ``[addr, addr + nbytes)`` as a writable uint8 view of one allocation."""
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0:
            base = self._bases[i]
            block = self._blocks[base]
            if addr + nbytes <= base + block.size:
                return block[addr - base:addr - base + nbytes]
        raise TVMError(f"VTA DMA out of bounds: {nbytes} bytes at DRAM address {addr:#x} are "
                       "not inside one allocation")

    def write(self, addr: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        self.view(addr, raw.size)[:] = raw

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        return self.view(addr, nbytes).copy()
