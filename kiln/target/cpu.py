"""CPU descriptions: the vector unit and the instruction-set features a CPU target has.

A :class:`CPUInfo` says what schedules and layout choices plan for: the widest vector ISA,
the bytes of one vector register, the number of vector registers and the ISA features
(AVX2, AVX-512, VNNI, bf16, AMX ...). It comes from one of three places:

* ``-mcpu=<name>`` naming a known x86 CPU: the ISA class of that CPU (:func:`cpu_for_mcpu`,
  the table :data:`MCPU_ISA`), with the features the C compiler enables for
  ``-march=<name>`` (``sapphirerapids``: AVX-512 bf16, VNNI, AMX), else the class's
  baseline with the name's known reduced-precision features (:data:`MCPU_FEATURES`); the C
  compiler then gets ``-march=<name>`` (:func:`march_flags`);
* ``KILN_VECTOR_BYTES`` (16, 32 or 64) pins this machine's description to the x86 class of
  that width (tests, or planning for another machine while building for this one);
* otherwise this machine (:func:`host_cpu`): the macros the C compiler predefines under
  ``-march=native`` (so it is what kiln's builds really use), read once per process.

Schedules must size their vectors by it: a wider vector type than the machine's is split by
GCC, and for 64-byte vectors on an AVX2 machine GCC 12 moves every partial sum through the
stack (measured ~20x slower convolutions).
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from typing import NamedTuple

from kiln.errors import CompileError

from .cc import compiler_command, predefined_macros


@dataclass(frozen=True)
class CPUInfo:
    """The vector unit and features of a CPU, as schedules plan for them."""

    isa: str  # the widest vector ISA: "avx512", "avx2", "avx", "neon", "sse2" or "generic"
    vector_bytes: int  # bytes of one vector register
    vector_registers: int  # architectural vector registers: the budget of a register tile
    features: frozenset[str]  # ISA features, named as in GCC's -m<feature> flags

    def vector_lanes(self, element_bytes: int) -> int:
        """Elements of ``element_bytes`` bytes in one vector register (at least 1): 16 fp32
        or 8 fp64 lanes with AVX-512, 8 / 4 with AVX2, 4 / 2 with SSE2 or NEON."""
        return max(1, self.vector_bytes // element_bytes)


class _ISA(NamedTuple):
    name: str
    feature: str  # the feature that implies this class
    vector_bytes: int
    vector_registers: int
    baseline: frozenset[str]  # features every CPU of the class has


#: vector ISA classes, widest first
_ISAS = (
    _ISA("avx512", "avx512f", 64, 32, frozenset({"sse2", "avx", "avx2", "fma", "avx512f"})),
    _ISA("avx2", "avx2", 32, 16, frozenset({"sse2", "avx", "avx2", "fma"})),
    _ISA("avx", "avx", 32, 16, frozenset({"sse2", "avx"})),
    _ISA("neon", "neon", 16, 32, frozenset({"neon"})),
    _ISA("sse2", "sse2", 16, 16, frozenset({"sse2"})),
)
_GENERIC = _ISA("generic", "", 16, 16, frozenset())
_BY_NAME = {isa.name: isa for isa in _ISAS}
#: the x86 class of each vector width (``KILN_VECTOR_BYTES``)
_X86_BY_WIDTH = {16: "sse2", 32: "avx2", 64: "avx512"}

#: predefined macro of the C compiler -> feature name
FEATURE_MACROS = {
    "__SSE2__": "sse2", "__AVX__": "avx", "__AVX2__": "avx2", "__FMA__": "fma",
    "__AVX512F__": "avx512f", "__AVX512BW__": "avx512bw", "__AVX512DQ__": "avx512dq",
    "__AVX512VL__": "avx512vl", "__AVX512VNNI__": "avx512vnni", "__AVXVNNI__": "avxvnni",
    "__AVX512BF16__": "avx512bf16", "__AVX512FP16__": "avx512fp16",
    "__AMX_TILE__": "amx-tile", "__AMX_INT8__": "amx-int8", "__AMX_BF16__": "amx-bf16",
    "__aarch64__": "neon",  # AArch64 always has Advanced SIMD: 32 registers of 16 bytes
}

#: ``-mcpu`` names (GCC ``-march`` values) -> ISA class, matched as substrings of the
#: lower-cased name; the first row that matches wins (``skylake-avx512`` before ``skylake``)
MCPU_ISA: tuple[tuple[tuple[str, ...], str], ...] = (
    (("avx512", "knl", "knm", "cannonlake", "icelake", "cascadelake", "cooperlake",
      "tigerlake", "sapphirerapids", "emeraldrapids", "graniterapids", "rocketlake",
      "diamondrapids", "znver4", "znver5", "x86-64-v4"), "avx512"),
    (("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake",
      "lunarlake", "gracemont", "sierraforest", "grandridge", "clearwaterforest",
      "pantherlake", "core-avx2", "bdver4", "znver", "x86-64-v3"), "avx2"),
    (("sandybridge", "ivybridge", "core-avx", "bdver", "btver2"), "avx"),
)


_AVX512_SERVER = frozenset({"avx512bw", "avx512dq", "avx512vl", "avx512vnni"})
_SAPPHIRE = _AVX512_SERVER | {"avx512bf16", "avx512fp16", "avxvnni", "amx-tile", "amx-int8",
                              "amx-bf16"}
_ZEN4 = _AVX512_SERVER | {"avx512bf16"}
#: the reduced-precision features (beyond the class baseline) of named CPUs, for a C compiler
#: that does not know the name (GCC 12 and ``emeraldrapids``, ``znver4`` ...) or none at all:
#: a target names its CPU to plan for that CPU's bf16, VNNI and AMX paths
MCPU_FEATURES: dict[str, frozenset[str]] = {
    "cascadelake": _AVX512_SERVER,
    "cooperlake": _AVX512_SERVER | {"avx512bf16"},
    "sapphirerapids": _SAPPHIRE, "emeraldrapids": _SAPPHIRE, "graniterapids": _SAPPHIRE,
    "diamondrapids": _SAPPHIRE,
    "znver4": _ZEN4, "znver5": _ZEN4,
}


def _of_isa(isa: _ISA, features: frozenset[str] | None = None) -> CPUInfo:
    return CPUInfo(isa.name, isa.vector_bytes, isa.vector_registers,
                   isa.baseline if features is None else features)


def generic_cpu() -> CPUInfo:
    """A CPU with no vector extension kiln knows: what a target of another architecture
    (``-mtriple=aarch64-...``) is planned for, since no x86 fact applies to it."""
    return _of_isa(_GENERIC)


def cpu_from_macros(macros: set[str] | frozenset[str]) -> CPUInfo:
    """The CPU a compiler's predefined macro names (``cc -march=... -dM -E``) describe: its
    features (:data:`FEATURE_MACROS`) and the widest ISA class they imply."""
    features = frozenset(FEATURE_MACROS[m] for m in macros if m in FEATURE_MACROS)
    isa = next((isa for isa in _ISAS if isa.feature in features), _GENERIC)
    return _of_isa(isa, features)


def cpu_for_mcpu(mcpu: str) -> CPUInfo | None:
    """The description of an x86 ``-mcpu`` name: the ISA class of :data:`MCPU_ISA`, with the
    features the C compiler enables for ``-march=<name>`` (the class's baseline where the
    compiler cannot say, plus the name's :data:`MCPU_FEATURES`); None when the table does
    not know the name (the target then plans for this machine; the C compiler judges the
    name when it gets ``-march=``)."""
    name = mcpu.lower()
    for keys, isa_name in MCPU_ISA:
        if any(k in name for k in keys):
            isa = _BY_NAME[isa_name]
            known = _march_features(mcpu, isa)
            if known is None:
                known = isa.baseline | MCPU_FEATURES.get(name, frozenset())
            return _of_isa(isa, known)
    return None


@functools.cache
def _march_features(mcpu: str, isa: _ISA) -> frozenset[str] | None:
    """The features ``cc -march=<mcpu>`` predefines, when they include the class's own (a
    compiler that does not know the name, or none at all, gives None)."""
    try:
        command = compiler_command()
    except CompileError:
        return None
    features = cpu_from_macros(predefined_macros(command, (f"-march={mcpu}",))).features
    return features if isa.baseline <= features else None


def march_flags(mcpu: str) -> list[str]:
    """The C compiler flags of a target's ``-mcpu``: ``-mcpu=X`` selects ``-march=X``
    (none without one: the compiler driver's default ``-march=native``)."""
    return [f"-march={mcpu}"] if mcpu else []


def host_cpu() -> CPUInfo:
    """This machine's CPU as ``-march=native`` builds see it, or the x86 class of the width
    ``KILN_VECTOR_BYTES`` pins (read on every call); without a working C compiler: 16-byte
    vectors and no features."""
    pinned = os.environ.get("KILN_VECTOR_BYTES", "")
    if pinned:
        for nbytes, isa in _X86_BY_WIDTH.items():
            if str(nbytes) == pinned.strip():
                return _of_isa(_BY_NAME[isa])
        raise ValueError(f"KILN_VECTOR_BYTES must be 16, 32 or 64, got {pinned!r}")
    return _native_cpu()


@functools.cache
def _native_cpu() -> CPUInfo:
    try:
        command = compiler_command()
    except CompileError:
        return cpu_from_macros(frozenset())
    return cpu_from_macros(predefined_macros(command, ("-march=native",)))


@functools.cache
def host_cpu_id() -> str:
    """Text identifying this CPU (vendor, model, flags), so that ``-march=native`` builds are
    not shared across CPUs (the compile cache's key)."""
    lines: list[str] = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                if line.startswith(("vendor_id", "model name", "flags", "Features", "CPU part")):
                    lines.append(line.strip())
    except OSError:
        lines.append(platform.machine() + " " + platform.processor())
    return "\n".join(lines)
