"""The machine model the cost estimate runs on, read from a target.

A :class:`MachineModel` has what the loop-nest analysis needs to turn counts into cycles:

* from the target's CPU description (``Target.cpu``, kiln/target/cpu.py): the vector width
  in bytes and the number of FMA units, 2 for the AVX2 and AVX-512 classes (every such core
  since Haswell issues two vector FMAs per cycle) and 1 otherwise;
* from this machine's memory description (kiln/target/memory.py): the data caches
  (sizes, line size), the cores and the clock;
* assumed bandwidths between levels, in bytes per cycle per core (a vector load per cycle
  from L1 twice over, 32 from L2, 16 from the last-level cache, and the DRAM bandwidth of
  one socket, ``DRAM_BYTES_PER_S``, shared by all cores), plus the cost of a loop iteration
  (one cycle of increment-compare-branch), of a branch that is taken the same way nearly
  always (one cycle) and of a ``parallel`` loop's fork (``FORK_CYCLES``).

The bandwidths are assumptions written here once, not measurements; what matters for choosing
between schedules is that the levels are ordered and that a miss costs a line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kiln.target import Target
from kiln.target.memory import CacheLevel, host_memory

#: one socket's DRAM bandwidth, shared by its cores (bytes per second)
DRAM_BYTES_PER_S = 20e9
#: cycles to start a parallel loop's threads and join them
FORK_CYCLES = 2000.0
_LEVEL_BYTES_PER_CYCLE = {"L2": 32.0, "L3": 16.0}


@dataclass(frozen=True)
class MachineModel:
    """What the estimate plans for (module docstring)."""

    vector_bytes: int
    fma_units: int
    caches: tuple[CacheLevel, ...]  # nearest first
    cores: int
    clock_hz: float
    bytes_per_cycle: dict  # level name (L2, L3, ..., DRAM) -> bytes per cycle it delivers
    loads_per_cycle: float = 2.0
    stores_per_cycle: float = 1.0
    loop_cycles: float = 1.0
    branch_cycles: float = 1.0
    fork_cycles: float = FORK_CYCLES

    @property
    def levels(self) -> list[str]:
        """Names of the memory levels, nearest first, ending with "DRAM"."""
        return [c.name for c in self.caches] + ["DRAM"]

    def describe(self) -> str:
        """One line per fact, as ``explain()`` prints it."""
        caches = ", ".join(f"{c.name} {c.size_bytes >> 10} KiB" for c in self.caches)
        bw = ", ".join(f"{k} {v:.1f} B/cycle" for k, v in self.bytes_per_cycle.items())
        return (f"vector {self.vector_bytes} B, {self.fma_units} FMA units, {self.cores} "
                f"cores at {self.clock_hz / 1e9:.2f} GHz\ncaches: {caches}\nbandwidth: {bw}")

    def with_cores(self, cores: int) -> MachineModel:
        return replace(self, cores=cores)


def machine_model(target: Target | str | None = None) -> MachineModel:
    """The model of ``target`` (a CPU target; the current one, else this machine)."""
    if isinstance(target, str):
        target = Target(target)
    if target is None:
        target = Target.current(allow_none=True) or Target("llvm")
    if not target.is_cpu:
        raise ValueError(f"kiln.cost models CPU targets; got {target}")
    cpu = target.cpu
    mem = host_memory()
    fma = 2 if cpu.isa in ("avx2", "avx512") else 1
    bw = {c.name: _LEVEL_BYTES_PER_CYCLE.get(c.name, 16.0) for c in mem.caches[1:]}
    bw["DRAM"] = DRAM_BYTES_PER_S / mem.clock_hz
    return MachineModel(vector_bytes=cpu.vector_bytes, fma_units=fma, caches=mem.caches,
                        cores=mem.cores, clock_hz=mem.clock_hz, bytes_per_cycle=bw)


__all__ = ["MachineModel", "machine_model", "DRAM_BYTES_PER_S", "FORK_CYCLES"]
