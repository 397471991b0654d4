"""The assignment's FPGA part in the report: ``examples/assignment/conv1d_fpga.py``'s steps
on kiln's VTA target, run on its simulator (docs/vta.md).

Each step (baseline -> reuse in the on-chip buffers -> micro-op folding -> virtual threads)
is built with ``vta.build``, run on int8 inputs and checked bit for bit against numpy's
answer (``conv1d_fpga_reference``); the simulator's counters give its cycles, instructions
and GEMM utilization (GEMM-busy cycles over all cycles). Simulated cycles are the
figure of merit: they come from the documented latency model, not from a clock, so numpy
and PyTorch are not set beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .operators import Operator, load_example

#: the FPGA part as an operator of the report (its sizes; it has no float reference)
FPGA = Operator("conv1d_fpga", "1-D convolution on the FPGA (VTA simulator)", "ext_dev",
                "conv1d_fpga", "", {"course": (4096, 128), "quick": (512, 32),
                                    "trace": (64, 8)},
                lambda size, rng: [], np.convolve, lambda: None)


@dataclass
class FpgaStep:
    title: str
    status: str
    cycles: int | None = None
    instructions: int | None = None
    gemm_utilization: float | None = None


@dataclass
class FpgaReport:
    size: tuple[int, int]
    steps: list[FpgaStep] = field(default_factory=list)


def fpga_report(size: tuple[int, int]) -> FpgaReport:
    """Run every step of the FPGA part at ``size`` (M, N) on the simulator."""
    example = load_example(FPGA)
    M, N = size
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, M).astype(np.int8)
    w = rng.integers(-128, 128, N).astype(np.int8)
    shift = example.output_shift(M, N)
    expected = example.conv1d_fpga_reference(a, w, shift)
    rep = FpgaReport((M, N))
    for title, make in example.STEPS:
        try:
            out, stats = example.run_conv1d_fpga(make, a, w, shift)
        except Exception as e:  # noqa: BLE001 - a failing step is reported, the rest run
            rep.steps.append(FpgaStep(title, f"error: {type(e).__name__}: {e}"[:200]))
            continue
        cycles = int(stats["cycles"])
        rep.steps.append(FpgaStep(
            title, "ok" if np.array_equal(out, expected) else "WRONG RESULT", cycles,
            int(stats["insn_counter"]), stats["gemm_busy_cycles"] / max(cycles, 1)))
    return rep


def markdown(rep: FpgaReport) -> str:
    """The FPGA section: one row per step."""
    base = rep.steps[0].cycles if rep.steps else None
    rows = [f"## {FPGA.title}", "",
            f"Size M x N = {rep.size[0]} x {rep.size[1]}, int8 inputs, int32 sums, int8 "
            "outputs (examples/assignment/conv1d_fpga.py); every step checked bit for bit "
            "against numpy. Cycles are simulated (docs/vta.md's latency model).", "",
            "| step | status | cycles | vs baseline | instructions | GEMM utilization |",
            "|---|---|---|---|---|---|"]
    for i, st in enumerate(rep.steps):
        speed = f"{base / st.cycles:.2f}x" if base and st.cycles else "-"
        util = "-" if st.gemm_utilization is None else f"{st.gemm_utilization:.1%}"
        rows.append(f"| {i}. {st.title} | {st.status} | {st.cycles or '-'} | {speed} | "
                    f"{st.instructions or '-'} | {util} |")
    return "\n".join(rows) + "\n"


__all__ = ["FPGA", "FpgaReport", "FpgaStep", "fpga_report", "markdown"]
