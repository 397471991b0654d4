"""Space-time diagrams of memory accesses, and what can be read off them.

* :func:`trace` — the exact accesses of a schedule in execution order (:mod:`.trace`, by
  interpreting the lowered loop program, :mod:`.interpreter`);
* :func:`simulate`, :func:`reuse_distances` — a set-associative LRU cache hierarchy run on
  a trace, and the reuse distance histogram (:mod:`.cache`);
* :func:`coalescing`, :func:`bank_conflicts` — global-memory transactions and shared-memory
  bank conflicts per warp access of a GPU trace (:mod:`.gpu_memory`);
* :func:`plot`, :func:`plot_side_by_side` — address against time per buffer (:mod:`.plot`,
  needs matplotlib).

docs/spacetime.md shows them on two schedules of one matmul.
"""

from .cache import CacheStats, reuse_distances, simulate
from .gpu_memory import bank_conflicts, coalescing
from .plot import plot, plot_side_by_side
from .trace import BufferInfo, Event, Trace, trace

__all__ = ["BufferInfo", "CacheStats", "Event", "Trace", "bank_conflicts", "coalescing",
           "plot", "plot_side_by_side", "reuse_distances", "simulate", "trace"]
