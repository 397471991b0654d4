"""What the VTA code generator produces: instructions annotated with what they touch, and
the finished program (instructions, micro-op words, relocations).

An :class:`Emitted` instruction records the buffer regions it reads and writes (on-chip
buffers by tile range; DRAM by argument and tile range); ``kiln.vta.passes.coproc_sync``
derives the dependence tokens from them. A DRAM address in an instruction is relative to
the argument (or to the program's micro-op buffer) named by ``reloc``; the runtime adds the
array's address when it submits the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .isa import Insn

__all__ = ["Region", "Emitted", "Program", "Placement", "UOP_RELOC"]

#: ``Emitted.reloc`` of a micro-op LOAD: its DRAM address is inside the program's uop buffer
UOP_RELOC = -1


@dataclass(frozen=True)
class Region:
    """Tiles ``[lo, hi)`` of a buffer: ``"inp"``, ``"wgt"``, ``"acc"``, ``"uop"``, or
    ``"dram:<k>"`` for argument ``k``."""

    buffer: str
    lo: int
    hi: int

    def overlaps(self, other: Region) -> bool:
        return self.buffer == other.buffer and self.lo < other.hi and other.lo < self.hi


@dataclass
class Emitted:
    """One instruction on its way into the stream."""

    insn: Insn
    module: str
    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    reloc: int | None = None    # argument index (or UOP_RELOC) its dram_base is relative to
    barrier: bool = False       # waits for every earlier instruction (FINISH)

    def conflicts(self, later: Emitted) -> bool:
        """True when ``later`` must not start before this instruction finished (RAW, WAR,
        WAW on a common region)."""
        if later.barrier:
            return True
        return any(w.overlaps(r) for w in self.writes for r in (*later.reads, *later.writes)) \
            or any(r.overlaps(w) for r in self.reads for w in later.writes)


@dataclass
class Program:
    """A compiled VTA function: instructions, micro-op words and argument relocations."""

    insns: list[Insn]
    relocs: list[int | None]
    uops: list[int] = field(default_factory=list)
    arg_names: list[str] = field(default_factory=list)
    arg_shapes: list[tuple[int, ...]] = field(default_factory=list)
    arg_dtypes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Placement:
    """Where a buffer variable of the lowered function lives: an on-chip buffer (``"inp"``,
    ``"wgt"``, ``"acc"``) from tile ``base``, or DRAM argument ``arg``."""

    buffer: str
    base: int = 0
    arg: int | None = None

    @property
    def on_chip(self) -> bool:
        return self.arg is None
