"""The timed half of the VTA simulator: when each instruction of a program starts and ends.

The hardware (VTA's task-level pipeline) has four modules. *Fetch* reads the instruction
stream in order and dispatches each instruction into the command queue of its module:
LOAD of the input or weight buffer to *load*; LOAD of micro-ops or accumulators, GEMM, ALU
and FINISH to *compute*; STORE to *store*. Each module runs its queue in order, one
instruction at a time. Dependence tokens travel in four FIFO queues between neighbours
(load <-> compute <-> store): an instruction with ``pop_prev``/``pop_next`` waits until the
neighbour has pushed a token it has not consumed yet; ``push_prev``/``push_next`` send one
when the instruction finishes.

The schedule is computed as a deterministic event simulation: an instruction starts at the
latest of (its module is free, it has been dispatched, the tokens it pops were pushed), and
lasts :meth:`LatencyModel.cycles` (the model is documented in docs/vta.md). A command queue
holds ``cmd_queue_depth`` instructions; fetch stalls while the target queue is full. A
program whose pops can never be satisfied is a deadlock, reported with each module's stuck
instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.errors import TVMError

from .env import Environment
from .isa import AluInsn, GemmInsn, Insn, MemId, MemInsn, Opcode

__all__ = ["LatencyModel", "Schedule", "MODULES", "module_of", "schedule"]

MODULES = ("load", "compute", "store")


@dataclass(frozen=True)
class LatencyModel:
    """Cycle costs of the simulated accelerator (defaults: a Pynq-class VTA at 100 MHz
    with a 64-bit AXI port; see docs/vta.md)."""

    fetch_cycles: int = 1            # fetch dispatches one instruction per cycle
    cmd_queue_depth: int = 512       # entries of each module's command queue
    dma_setup_cycles: int = 64       # DMA descriptor + DRAM latency, per LOAD/STORE
    dma_row_cycles: int = 4          # per row of a 2-D transfer (a new burst)
    dram_bytes_per_cycle: int = 8    # DMA bandwidth
    pad_tiles_per_cycle: int = 1     # padding written into SRAM without DRAM traffic
    gemm_pipeline_cycles: int = 4    # GEMM core fill/drain per instruction
    gemm_uops_per_cycle: int = 1     # one BATCH x BLOCK_IN x BLOCK_OUT product per cycle
    alu_pipeline_cycles: int = 4     # ALU fill/drain per instruction
    alu_cycles_per_uop: int = 1      # one BATCH x BLOCK_OUT vector per cycle
    finish_cycles: int = 1

    def cycles(self, insn: Insn, env: Environment) -> int:
        """The cycles ``insn`` keeps its module busy."""
        if isinstance(insn, MemInsn):
            return self._dma_cycles(insn, env)
        if isinstance(insn, GemmInsn):
            n = insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)
            return self.gemm_pipeline_cycles + -(-n // self.gemm_uops_per_cycle)
        if isinstance(insn, AluInsn):
            n = insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)
            return self.alu_pipeline_cycles + n * self.alu_cycles_per_uop
        return self.finish_cycles

    def _dma_cycles(self, insn: MemInsn, env: Environment) -> int:
        if insn.y_size * insn.x_size == 0 and insn.y_pad_0 + insn.y_pad_1 == 0:
            return 1  # a no-op carrying dependence flags
        nbytes = insn.y_size * insn.x_size * tile_bytes(insn, env)
        width = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        pads = (insn.y_pad_0 + insn.y_pad_1) * width + insn.y_size * (width - insn.x_size)
        return (self.dma_setup_cycles + insn.y_size * self.dma_row_cycles
                + -(-nbytes // self.dram_bytes_per_cycle)
                + -(-pads // self.pad_tiles_per_cycle))


def tile_bytes(insn: MemInsn, env: Environment) -> int:
    """Bytes of one element of the buffer ``insn`` moves."""
    return {MemId.UOP: env.UOP_ELEM_BYTES, MemId.INP: env.INP_ELEM_BYTES,
            MemId.WGT: env.WGT_ELEM_BYTES, MemId.ACC: env.ACC_ELEM_BYTES,
            MemId.OUT: env.OUT_ELEM_BYTES}[insn.memory_type]


def module_of(insn: Insn) -> str:
    """The module that executes ``insn``."""
    if insn.opcode == Opcode.LOAD:
        return "load" if insn.memory_type in (MemId.INP, MemId.WGT) else "compute"
    if insn.opcode == Opcode.STORE:
        return "store"
    return "compute"


@dataclass
class Schedule:
    """Start and end cycle of every instruction, and what kept each module busy."""

    start: list[int]
    end: list[int]
    module: list[str]
    busy: dict[str, int] = field(default_factory=dict)
    gemm_cycles: int = 0

    @property
    def cycles(self) -> int:
        return max(self.end, default=0)


def _neighbour(module: str, side: str) -> str | None:
    i = MODULES.index(module) + (-1 if side == "prev" else 1)
    return MODULES[i] if 0 <= i < len(MODULES) else None


def _check_flags(i: int, insn: Insn, module: str) -> None:
    for side in ("prev", "next"):
        if _neighbour(module, side) is None and (getattr(insn, f"pop_{side}")
                                                 or getattr(insn, f"push_{side}")):
            raise TVMError(f"VTA instruction {i} ({insn.opcode.name}) runs on the {module} "
                           f"module, which has no '{side}' neighbour to push to or pop from")


def schedule(insns: list[Insn], env: Environment,
             model: LatencyModel | None = None) -> Schedule:
    """Simulate the timing of ``insns`` (module doc); raise TVMError on a deadlock."""
    model = model or LatencyModel()
    n = len(insns)
    modules = [module_of(x) for x in insns]
    for i, (insn, m) in enumerate(zip(insns, modules, strict=True)):
        _check_flags(i, insn, m)
    order = {m: [i for i in range(n) if modules[i] == m] for m in MODULES}
    pos_in_queue = {i: k for m in MODULES for k, i in enumerate(order[m])}
    start: list[int | None] = [None] * n
    end: list[int | None] = [None] * n
    fetched: list[int] = []
    head = dict.fromkeys(MODULES, 0)     # next index into order[m]
    free_at = dict.fromkeys(MODULES, 0)
    pushes: dict[tuple[str, str], list[int]] = {}   # (from, to) -> push times
    pops: dict[tuple[str, str], int] = {}
    progress = True
    while progress:
        progress = False
        while len(fetched) < n:  # fetch stalls while the target queue is full
            f = len(fetched)
            k = pos_in_queue[f] - model.cmd_queue_depth
            blocker = order[modules[f]][k] if k >= 0 else None
            if blocker is not None and start[blocker] is None:
                break
            t = (fetched[-1] if fetched else 0) + model.fetch_cycles
            fetched.append(max(t, start[blocker] if blocker is not None else 0))
            progress = True
        for m in MODULES:
            while head[m] < len(order[m]):
                i = order[m][head[m]]
                if i >= len(fetched):
                    break
                ready = _token_times(insns[i], m, pushes, pops)
                if ready is None:
                    break
                start[i] = max(free_at[m], fetched[i], *ready)
                end[i] = start[i] + model.cycles(insns[i], env)
                free_at[m] = end[i]
                for side in ("prev", "next"):
                    to = _neighbour(m, side)
                    if getattr(insns[i], f"pop_{side}"):
                        pops[(to, m)] = pops.get((to, m), 0) + 1
                    if getattr(insns[i], f"push_{side}"):
                        pushes.setdefault((m, to), []).append(end[i])
                head[m] += 1
                progress = True
    if any(s is None for s in start):
        stuck = [f"{m}: instruction {order[m][head[m]]} "
                 f"({insns[order[m][head[m]]].opcode.name})"
                 for m in MODULES if head[m] < len(order[m])]
        raise TVMError("VTA deadlock: instructions wait for dependence tokens that are never "
                       "pushed; stuck at " + ", ".join(stuck))
    busy = {m: sum(end[i] - start[i] for i in order[m]) for m in MODULES}
    busy["fetch"] = n * model.fetch_cycles
    gemm = sum(end[i] - start[i] - model.gemm_pipeline_cycles for i in range(n)
               if isinstance(insns[i], GemmInsn) and not insns[i].reset_reg)
    return Schedule(start, end, modules, busy, gemm)  # type: ignore[arg-type]


def _token_times(insn: Insn, module: str, pushes: dict, pops: dict) -> list[int] | None:
    """When the tokens ``insn`` pops were pushed; None while one is still missing."""
    times = []
    for side in ("prev", "next"):
        if getattr(insn, f"pop_{side}"):
            key = (_neighbour(module, side), module)
            k = pops.get(key, 0)
            pushed = pushes.get(key, [])
            if k >= len(pushed):
                return None
            times.append(pushed[k])
    return times
