"""Co-processor synchronisation: the dependence tokens that make the three modules agree
with program order.

The code generator emits instructions in program order, each with the on-chip and DRAM
regions it reads and writes (``program.Emitted``). The load, compute and store modules run
their own instructions in order but concurrently with each other; an instruction must not
start before an instruction of another module that conflicts with it (read after write,
write after read, write after write) has finished. :func:`insert_dependences` adds exactly
the tokens that guarantee this, and no others:

* for each instruction ``b`` and each other module ``A``, find the latest instruction ``a``
  of ``A`` that conflicts with ``b`` and that ``b``'s module does not already know to be
  finished (each module keeps a vector clock: how many instructions of every module are
  known finished, transitively through the tokens it popped);
* if ``A`` is a neighbour, ``a`` pushes a token towards ``b``'s module and ``b`` pops it;
  tokens are consumed in order because every new push comes from a later instruction of
  ``A`` and every new pop from a later instruction of ``b``'s module;
* load and store are not neighbours: a no-op compute instruction (a GEMM over no micro-ops)
  pops the token from one and pushes one to the other.

Virtual threads need nothing more: their instructions touch disjoint buffer regions, so
the load of one thread's next tile overlaps the other thread's GEMMs (latency hiding).
"""

from __future__ import annotations

from ..isa import GemmInsn
from ..program import Emitted
from ..timing import MODULES

__all__ = ["insert_dependences"]


def _side(frm: str, to: str) -> str:
    """``'next'`` when ``to`` follows ``frm`` in load -> compute -> store, else ``'prev'``."""
    return "next" if MODULES.index(to) > MODULES.index(frm) else "prev"


def _adjacent(a: str, b: str) -> bool:
    return abs(MODULES.index(a) - MODULES.index(b)) == 1


class _Sync:
    def __init__(self) -> None:
        self.out: list[Emitted] = []
        self.by_module: dict[str, list[int]] = {m: [] for m in MODULES}
        # known[m][a]: the first known[m][a] instructions of module a finished before m's next
        self.known = {m: dict.fromkeys(MODULES, 0) for m in MODULES}
        self.clock: list[dict[str, int]] = []

    def add(self, e: Emitted) -> None:
        m = e.module
        # the module that is not a neighbour first: waiting on the bridging no-op also
        # covers every earlier compute instruction
        others = sorted((a for a in MODULES if a != m), key=lambda a: _adjacent(a, m))
        for a in others:
            k = self._latest_conflict(a, e)
            if k is None:
                continue
            if _adjacent(a, m):
                self._wait(a, k, e)
            else:
                nop = Emitted(GemmInsn(uop_bgn=0, uop_end=0), "compute")
                self._wait(a, k, nop)
                self._append(nop)
                self._wait("compute", len(self.by_module["compute"]) - 1, e)
        self._append(e)

    def _latest_conflict(self, a: str, e: Emitted) -> int | None:
        done = self.known[e.module][a]
        ids = self.by_module[a]
        for k in range(len(ids) - 1, done - 1, -1):
            if self.out[ids[k]].conflicts(e):
                return k
        return None

    def _wait(self, a: str, k: int, e: Emitted) -> None:
        """Make ``e`` wait for the ``k``-th instruction of module ``a``."""
        producer = self.out[self.by_module[a][k]]
        m = e.module
        push, pop = f"push_{_side(a, m)}", f"pop_{_side(m, a)}"
        assert not getattr(producer.insn, push) and not getattr(e.insn, pop)
        setattr(producer.insn, push, True)
        setattr(e.insn, pop, True)
        seen = self.clock[self.by_module[a][k]]
        self.known[m] = {x: max(self.known[m][x], seen[x]) for x in MODULES}

    def _append(self, e: Emitted) -> None:
        m = e.module
        self.by_module[m].append(len(self.out))
        self.known[m][m] = len(self.by_module[m])
        self.clock.append(dict(self.known[m]))
        self.out.append(e)


def insert_dependences(program: list[Emitted]) -> list[Emitted]:
    """``program`` with dependence flags set and no-op instructions added where load and
    store must wait for each other (module doc)."""
    sync = _Sync()
    for e in program:
        sync.add(e)
    return sync.out
