"""``kiln.cost.estimate``: predicted cycles, memory traffic and time of a lowered function.

The loop tree of :mod:`kiln.cost.loop_nest` is priced on a :class:`MachineModel`:

* **compute**: each loop iteration issues its body's instructions at the machine's rates
  (arithmetic on ``fma_units`` pipes, two loads and one store per cycle, a cycle per branch)
  plus one cycle of loop overhead (none for unrolled loops). A serial innermost loop with
  no branch, whose accesses are unit-stride or invariant in it, is counted as the C compiler
  vectorizes it (``-O3``, at most 32-byte vectors): ``floor(trips / lanes)`` vector
  iterations and a scalar epilogue of ``trips mod lanes``, where ``lanes`` fill the vector,
  or, for a constant trip count below that, are the trip count. A parallel loop divides its
  subtree by ``min(cores, trips)`` and pays a fork.
* **memory** (the footprint model): the footprint of a loop is the cache lines its subtree
  touches over one run of it. An access keeps its lines in cache level ``c`` across the
  iterations of the outermost loop whose one iteration (the next loop inward of the access)
  fits in ``c``; it misses once per distinct line it touches in each run of that loop. The
  bytes moved into level ``c`` are its misses times the line size (L1 moves every access's
  bytes); each level's bytes cost ``bytes / bytes_per_cycle`` cycles.
* **total**: ``max(compute, slowest level)`` (compute and transfers overlap, a roofline),
  and ``seconds = cycles / clock``.

``explain()`` prints the procedure loop by loop: trips, instructions per iteration,
footprint and the level it fits in, cycles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kiln.arith import Analyzer
from kiln.ir.functor import collect_vars
from kiln.ir.printer import to_text
from kiln.ir.stmt import IRModule, PrimFunc, Stmt, seq

from .loop_nest import Access, Loop, Work, analyze, stride_of
from .machine import MachineModel, machine_model

#: the widest vectors GCC's auto-vectorizer uses by default (``-mprefer-vector-width=256``)
COMPILER_VECTOR_BYTES = 32


@dataclass
class CostEstimate:
    """What :func:`estimate` predicts for one function (module docstring)."""

    cycles: float
    seconds: float
    compute_cycles: float
    bytes: dict[str, float]  # memory level -> bytes moved into it (L1: every access)
    misses: dict[str, float]  # cache level -> lines missed
    loop_tree: Loop
    machine: MachineModel
    loop_cycles: dict = field(default_factory=dict)  # Loop -> cycles of its subtree
    footprints: dict = field(default_factory=dict)  # Loop -> bytes it touches per run

    def explain(self) -> str:
        """The loop execution procedure with its cost, one line per loop."""
        lines = [self.machine.describe(), ""]
        for loop, depth in _with_depth(self.loop_tree):
            fits = _fitting_level(self.footprints.get(loop, 0.0), self.machine)
            w = loop.work
            lines.append(
                f"{'  ' * depth}{loop.kind} {loop.name}: {loop.trips:g} trips x "
                f"{loop.entered:g} runs; per iteration {w.arith:g} arith, {w.loads:g} loads, "
                f"{w.stores:g} stores, {w.branches:g} branches; footprint "
                f"{_human(self.footprints.get(loop, 0.0))} ({fits}); "
                f"{self.loop_cycles.get(loop, 0.0):,.0f} cycles")
        moved = ", ".join(f"{k} {_human(v)}" for k, v in self.bytes.items())
        missed = ", ".join(f"{k} {v:,.0f}" for k, v in self.misses.items())
        lines += ["", f"bytes moved: {moved}", f"misses: {missed}",
                  f"compute {self.compute_cycles:,.0f} cycles; total {self.cycles:,.0f} "
                  f"cycles = {self.seconds * 1e6:.2f} us"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"CostEstimate(cycles={self.cycles:.4g}, seconds={self.seconds:.3g})"


def estimate(func, hw: MachineModel | str | None = None, binding: dict | None = None,
             default_extent: int = 1024) -> CostEstimate:
    """Predict the cost of ``func``: a lowered ``PrimFunc``, its body (a ``Stmt``) or an
    ``IRModule`` (its functions summed, as ``kiln.lower`` returns one). ``hw`` is a
    :class:`MachineModel` or a target (default: the current target, else this machine).
    Symbolic extents take their value from ``binding`` ({var or name: value}), else
    ``default_extent``."""
    machine = _machine(hw)
    tree = analyze(seq(*_bodies(func)), machine.vector_bytes, binding, default_extent)
    loop_cycles: dict = {}
    compute = _compute_cycles(tree, machine, loop_cycles)
    footprints = _footprints(tree, machine)
    misses = _misses(tree, machine, footprints)
    line = machine.caches[0].line_bytes if machine.caches else 64
    accessed = sum(a.count * a.lanes * a.elem_bytes for a in tree.subtree_accesses())
    levels = machine.levels
    moved = {levels[0]: accessed}
    for k, level in enumerate(levels[1:]):
        moved[level] = misses[levels[k]] * line
    transfer = max((moved[lv] / machine.bytes_per_cycle[lv] for lv in levels[1:]),
                   default=0.0)
    cycles = max(compute, transfer)
    return CostEstimate(cycles, cycles / machine.clock_hz, compute, moved, misses, tree,
                        machine, loop_cycles, footprints)


def compute_cycles(func, hw: MachineModel | str | None = None, binding: dict | None = None,
                   default_extent: int = 1024) -> float:
    """``estimate(...).compute_cycles`` alone, without the memory model: the cycles that
    ``func``'s instructions issue in (arguments as for :func:`estimate`)."""
    machine = _machine(hw)
    tree = analyze(seq(*_bodies(func)), machine.vector_bytes, binding, default_extent)
    return _compute_cycles(tree, machine, {})


def _machine(hw: MachineModel | str | None) -> MachineModel:
    return hw if isinstance(hw, MachineModel) else machine_model(hw)


def _bodies(func) -> list[Stmt]:
    if isinstance(func, PrimFunc):
        return [func.body]
    if isinstance(func, IRModule):
        return [f.body for f in func.functions.values() if isinstance(f, PrimFunc)]
    if isinstance(func, Stmt):
        return [func]
    raise TypeError(f"kiln.cost.estimate takes a lowered PrimFunc, Stmt or IRModule, got "
                    f"{type(func).__name__} (lower a schedule first: kiln.lower(s, args))")


# ---- compute ----------------------------------------------------------------------------------
def _issue(w: Work, m: MachineModel) -> float:
    return max(w.arith / m.fma_units, w.loads / m.loads_per_cycle,
               w.stores / m.stores_per_cycle) + w.branches * m.branch_cycles + w.calls


def _compiler_lanes(loop: Loop, m: MachineModel, an: Analyzer) -> float:
    """Lanes the C compiler vectorizes ``loop`` by (1 when it does not); GCC prefers
    vectors of at most ``COMPILER_VECTOR_BYTES``. A loop still marked vectorized after
    lowering (the vectorizer kept it) is a serial loop to the compiler."""
    if loop.kind not in ("serial", "vectorized") or not loop.simple or loop.children or \
            loop.trips < 2 or not loop.accesses or loop.work.calls:
        return 1.0
    widest = max(a.elem_bytes for a in loop.accesses)
    for a in loop.accesses:
        if a.lanes != 1 or stride_of(a.index, loop.var, an) not in (0, 1):
            return 1.0
    lanes = max(1, min(m.vector_bytes, COMPILER_VECTOR_BYTES) // widest)
    return float(min(loop.trips, lanes)) if loop.const_trips else float(lanes)


def _iterations(trips: float, lanes: float) -> float:
    """Iterations of a loop of ``trips`` vectorized by ``lanes``: the vector ones, then the
    scalar epilogue."""
    if lanes <= 1:
        return trips
    vectors = math.floor(trips / lanes)
    return vectors + (trips - vectors * lanes)


def _compute_cycles(loop: Loop, m: MachineModel, out: dict, an: Analyzer | None = None) -> float:
    """Cycles of one run of ``loop`` (its ``entered`` runs summed), recorded per loop."""
    an = an or Analyzer()
    lanes = _compiler_lanes(loop, m, an)
    overhead = 0.0 if loop.kind in ("unrolled", "root", "thread") else m.loop_cycles
    own = loop.entered * _iterations(loop.trips, lanes) * (_issue(loop.work, m) + overhead)
    total = own + sum(_compute_cycles(c, m, out, an) for c in loop.children)
    if loop.kind == "parallel":
        total = total / max(1.0, min(m.cores, loop.trips)) + m.fork_cycles * loop.entered
    out[loop] = total
    return total


# ---- memory -----------------------------------------------------------------------------------
def _lines(a: Access, depth: int, m: MachineModel, an: Analyzer) -> float:
    """Cache lines ``a`` touches over one run of loop ``a.path[depth]``."""
    line = m.caches[0].line_bytes if m.caches else 64
    index_vars = collect_vars(a.index)
    elements = float(a.lanes)
    stride = 1 if a.lanes > 1 else line  # elements apart, in the densest direction
    for loop in a.path[depth:]:
        if loop.var is not None and loop.var in index_vars and loop.trips > 1:
            elements *= loop.trips
            s = stride_of(a.index, loop.var, an)
            stride = min(stride, line if s is None else max(s, 1))
    per_line = max(1.0, line / (stride * a.elem_bytes))
    return max(elements / per_line, a.lanes * a.elem_bytes / line)


def _footprints(tree: Loop, m: MachineModel) -> dict:
    """Bytes each loop touches over one run (distinct accesses, in whole lines)."""
    an = Analyzer()
    line = m.caches[0].line_bytes if m.caches else 64
    out = {}
    for loop in tree.walk():
        seen: dict = {}
        for a in loop.subtree_accesses():
            key = (a.buffer, to_text(a.index))
            depth = a.path.index(loop)
            seen[key] = max(seen.get(key, 0.0), _lines(a, depth, m, an) * line)
        out[loop] = sum(seen.values())
    return out


def _misses(tree: Loop, m: MachineModel, footprints: dict) -> dict[str, float]:
    an = Analyzer()
    out = {c.name: 0.0 for c in m.caches}
    for a in tree.subtree_accesses():
        for cache in m.caches:
            depth = _reuse_depth(a, cache.size_bytes, footprints)
            out[cache.name] += _lines(a, depth, m, an) * a.path[depth].entered
    return out


def _reuse_depth(a: Access, size: float, footprints: dict) -> int:
    """The outermost loop of ``a.path`` across whose iterations ``a``'s lines stay in a
    cache of ``size`` bytes: one iteration's footprint (the next loop's) fits; the innermost
    loop when none does (it streams)."""
    path = a.path
    return next(k for k in range(len(path))
                if k + 1 == len(path) or footprints[path[k + 1]] <= size)


def _fitting_level(size: float, m: MachineModel) -> str:
    for c in m.caches:
        if size <= c.size_bytes:
            return f"fits {c.name}"
    return "exceeds the caches"


def _with_depth(loop: Loop, depth: int = 0):
    yield loop, depth
    for c in loop.children:
        yield from _with_depth(c, depth + 1)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


__all__ = ["CostEstimate", "estimate", "compute_cycles"]
