"""The memory figures of one step: its space-time diagram and what the trace says.

:func:`memory_figures` traces a step's schedule at the operator's small trace size
(:mod:`kiln.contrib.spacetime`), writes the diagram as a PNG and returns a Markdown table:
the cache misses per buffer in a small model cache (:data:`MODEL_CACHE`) for a CPU
schedule, the global-memory
transactions and shared-memory passes per warp access for a GPU schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kiln.contrib import spacetime

MAX_EVENTS = 400_000
# The trace is small, so the cache is too: at the course's sizes the working set outgrows
# the real L1 the way the trace's outgrows this one.
MODEL_CACHE = [(1024, 2, 64)]
MODEL_CACHE_TEXT = "misses in a 1 KiB, 2-way cache of 64-byte lines (scaled to the trace)"


def gpu_table(tr: spacetime.Trace) -> str:
    """Per buffer: warp accesses and the transactions (global) or passes (shared) each
    needs on average."""
    rows = ["| buffer | warp accesses | per access |", "|---|---|---|"]
    for unit, counts in (("transactions", spacetime.coalescing(tr)),
                         ("shared-memory passes", spacetime.bank_conflicts(tr))):
        for buf, s in counts.summary().items():
            rows.append(f"| {buf} | {s['accesses']} | {s['per_access']:.2f} {unit} |")
    return "\n".join(rows)


def memory_figures(schedule, tensors: Sequence, size: tuple[int, ...], png: Path, title: str
                   ) -> tuple[str | None, str]:
    """Trace ``schedule`` (made at ``size``); write its diagram to ``png`` when matplotlib
    is installed. Returns (the PNG's path or None, the Markdown table or a reason)."""
    try:
        tr = spacetime.trace(schedule, list(tensors), max_events=MAX_EVENTS)
    except (NotImplementedError, ValueError) as e:
        return None, f"no trace: {' '.join(str(e).split())}"
    head = (f"{len(tr)} accesses in {int(tr.step.max()) + 1 if len(tr) else 0} steps"
            + (" (truncated)" if tr.truncated else "") + ", size " + "x".join(map(str, size)))
    if tr.gpu:
        table = gpu_table(tr)
    else:
        head += "; " + MODEL_CACHE_TEXT
        table = spacetime.simulate(tr, levels=MODEL_CACHE).table()
    try:
        spacetime.plot(tr, str(png), title=title)
    except ImportError:
        return None, head + " (no diagram: matplotlib is not installed)\n\n" + table
    return str(png), head + "\n\n" + table
