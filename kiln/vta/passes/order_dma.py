"""Latency-aware order of independent DMA instructions.

Virtual threads leave runs of consecutive transfers of one module in stage order: the next
input tiles of thread 0 and thread 1, then the next weights of thread 0 and thread 1. The
load module runs its queue in order, so thread 0's weights would wait behind thread 1's
input load, which waits for thread 1's GEMM (it overwrites tiles that GEMM reads), and
thread 0's next GEMM starves. :func:`order_dma` stably reorders each run of consecutive,
mutually independent instructions of one module by the last earlier instruction of another
module each conflicts with (what it will wait for): those that can start first go first.

Only instructions with nothing of another module between them move, and only past
instructions they do not conflict with, so every conflict between modules keeps its
program order and ``coproc_sync`` derives the same dependences.
"""

from __future__ import annotations

from ..program import Emitted

__all__ = ["order_dma"]


def order_dma(program: list[Emitted]) -> list[Emitted]:
    """``program`` with each run of independent same-module instructions reordered."""
    out: list[Emitted] = []
    i = 0
    while i < len(program):
        j = i + 1
        while (j < len(program) and program[j].module == program[i].module
               and not any(program[k].conflicts(program[j])
                           or program[j].conflicts(program[k]) for k in range(i, j))):
            j += 1
        run = program[i:j]
        if len(run) > 1:
            run = sorted(run, key=lambda e: _waits_for(out, e))
        out += run
        i = j
    return out


def _waits_for(before: list[Emitted], e: Emitted) -> int:
    """The position of the last instruction of another module ``e`` conflicts with."""
    for k in range(len(before) - 1, -1, -1):
        if before[k].module != e.module and before[k].conflicts(e):
            return k
    return -1
