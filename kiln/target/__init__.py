"""Target descriptions (``tvm.target``): what kiln compiles for, and what that machine has.

* :mod:`.target`: :class:`Target`, parsed from ``llvm``, ``llvm -mcpu=...``, ``c`` or
  ``cuda``; thread limits, C compiler flags, and :attr:`Target.cpu`;
* :mod:`.cpu`: :class:`CPUInfo`, a CPU's vector width, vector registers and ISA features,
  from the ``-mcpu`` table or read from this machine's C compiler;
* :mod:`.cc`: which C compiler kiln uses and the macros it predefines;
* :mod:`.triple`: target triples (only this machine's is accepted).

Schedules, layout choices and cost models ask the target about the machine
(``Target.current().cpu.vector_lanes(4)``, or :func:`current_cpu`), never hard-code one.
This package depends only on the standard library and ``kiln.errors``.
"""

from .cpu import CPUInfo, host_cpu
from .target import Target, TargetKind, create, cuda, current_cpu
from .triple import check_triple, host_triple

__all__ = ["Target", "TargetKind", "create", "cuda", "current_cpu", "CPUInfo", "host_cpu",
           "host_triple", "check_triple"]
