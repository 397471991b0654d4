"""This machine's memory hierarchy and clock: the cache levels a cost model plans for.

:func:`host_memory` reads, once per process, the data caches the operating system reports
(Linux: the ``cache/index*`` entries of CPU 0 in sysfs; elsewhere ``os.sysconf``'s
``SC_LEVEL*_CACHE_SIZE`` where the C library has them), the cores (``os.cpu_count``) and the
clock (the ``cpu MHz`` line of ``/proc/cpuinfo``). A fact the system does not report falls
back to :data:`FALLBACK`, a typical x86 server core, and :attr:`MemoryInfo.measured` says
which facts were read. Nothing here is measured by running code.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CacheLevel:
    """One data (or unified) cache level: ``name`` "L1", "L2" or "L3"; ``ways`` its
    associativity (8 where the system does not say)."""

    name: str
    size_bytes: int
    line_bytes: int
    ways: int = 8


@dataclass(frozen=True)
class MemoryInfo:
    """Data caches from the nearest outwards, cores, clock, and which of them were read."""

    caches: tuple[CacheLevel, ...]
    cores: int
    clock_hz: float
    measured: frozenset[str]  # of "caches", "cores", "clock"


#: what a fact the system does not report is taken to be
FALLBACK = MemoryInfo(
    caches=(CacheLevel("L1", 32 << 10, 64), CacheLevel("L2", 1 << 20, 64),
            CacheLevel("L3", 16 << 20, 64)),
    cores=1, clock_hz=2.5e9, measured=frozenset())

_SYSFS_CPU0 = Path("/sys/devices/system/cpu/cpu0/cache")
_SYSCONF_CACHES = (("L1", "SC_LEVEL1_DCACHE_SIZE", "SC_LEVEL1_DCACHE_LINESIZE"),
                   ("L2", "SC_LEVEL2_CACHE_SIZE", "SC_LEVEL2_CACHE_LINESIZE"),
                   ("L3", "SC_LEVEL3_CACHE_SIZE", "SC_LEVEL3_CACHE_LINESIZE"))


def parse_size(text: str) -> int:
    """Bytes of a sysfs cache size such as ``48K``, ``2048K`` or ``1M``."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _sysfs_caches() -> tuple[CacheLevel, ...]:
    levels: dict[int, CacheLevel] = {}
    for entry in sorted(_SYSFS_CPU0.glob("index*")):
        try:
            kind = (entry / "type").read_text().strip()
            level = int((entry / "level").read_text())
            size = parse_size((entry / "size").read_text())
            line = int((entry / "coherency_line_size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size > 0:
            levels[level] = CacheLevel(f"L{level}", size, line, _ways(entry))
    return tuple(levels[k] for k in sorted(levels))


def _ways(entry: Path) -> int:
    """The associativity sysfs reports for a cache entry (8 if it does not)."""
    try:
        ways = int((entry / "ways_of_associativity").read_text())
    except (OSError, ValueError):
        return 8
    return ways if ways > 0 else 8


def _sysconf_caches() -> tuple[CacheLevel, ...]:
    out = []
    for name, size_key, line_key in _SYSCONF_CACHES:
        try:
            size, line = os.sysconf(size_key), os.sysconf(line_key)
        except (ValueError, OSError):
            continue
        if size > 0:
            out.append(CacheLevel(name, size, line if line > 0 else 64))
    return tuple(out)


def _clock_hz() -> float | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) * 1e6
    except (OSError, ValueError, IndexError):
        return None
    return None


@functools.cache
def host_memory() -> MemoryInfo:
    """This machine's caches, cores and clock (module docstring)."""
    measured = set()
    caches = _sysfs_caches() or _sysconf_caches()
    if caches:
        measured.add("caches")
    cores = os.cpu_count()
    if cores:
        measured.add("cores")
    clock = _clock_hz()
    if clock:
        measured.add("clock")
    return MemoryInfo(caches=caches or FALLBACK.caches, cores=cores or FALLBACK.cores,
                      clock_hz=clock or FALLBACK.clock_hz, measured=frozenset(measured))


__all__ = ["CacheLevel", "MemoryInfo", "FALLBACK", "host_memory", "parse_size"]
