"""``kiln report assignment``: the course assignment's operators, step by step.

:func:`assignment_report` takes each operator of :data:`~.operators.OPERATORS` (kiln's
solutions in ``examples/assignment/``) through its ``STEPS`` (baseline -> optimization 1 ->
2 -> 3 ...): each step is checked against numpy and timed (:mod:`.measure`), its lowered
code is diffed against the step before, its memory accesses are traced at a small size and
drawn (:mod:`.figures`); numpy and PyTorch are timed on the same inputs and the operator's
AutoTVM template is tuned briefly (:mod:`.tuning`). The FPGA part (:mod:`.fpga`) runs its
steps on kiln's VTA simulator, checked bit for bit, in simulated cycles. The report is
written as ``report.md`` and ``report.html`` with the diagrams under ``figures/``.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import fpga, render
from .figures import memory_figures
from .measure import Measured, lowered_text, run_step, time_reference
from .operators import OPERATORS, Operator, load_example
from .tuning import Tuned, tune


@dataclass
class StepReport:
    """One step of an operator: its measurement, lowered code (at the trace size), the diff
    against the step before, its diagram (a path relative to the report) and memory table."""

    title: str
    measured: Measured
    lowered: str
    diff: str
    figure: str | None
    memory: str


@dataclass
class OperatorReport:
    op: Operator
    size: tuple[int, ...]
    steps: list[StepReport] = field(default_factory=list)
    references: dict[str, float | None] = field(default_factory=dict)
    tuned: Tuned | None = None


def lowered_diff(before: str, after: str, name_before: str, name_after: str) -> str:
    """The unified diff of two lowered functions' text."""
    return "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(),
                                          name_before, name_after, lineterm="", n=2))


def _operators(names: Sequence[str] | None) -> list[Operator]:
    """The operators ``names`` asks for (all of them for None), the FPGA part included."""
    if names is None:
        return [*OPERATORS, fpga.FPGA]
    known = {op.name: op for op in (*OPERATORS, fpga.FPGA)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown operator(s) {', '.join(unknown)}; the assignment's: "
                         f"{', '.join(known)}")
    return [known[n] for n in names]


def report_operator(op: Operator, size: tuple[int, ...], out: Path, *, trials: int,
                    number: int, repeat: int, figures: bool = True) -> OperatorReport:
    """Measure every step of ``op`` at ``size``; diagrams go to ``out/figures``."""
    example = load_example(op)
    inputs = op.inputs(size, np.random.default_rng(0))
    expected = op.numpy(*inputs).astype("float32")
    rep = OperatorReport(op, size, references=time_reference(op, inputs, number, repeat))
    trace_size = op.sizes["trace"]
    previous = ("", "")
    for i, (title, make) in enumerate(example.STEPS):
        schedule, *tensors = make(*trace_size)
        text = lowered_text(schedule, tensors)
        diff = lowered_diff(previous[1], text, previous[0], title) if i else ""
        figure, memory = None, ""
        if figures:
            png = out / "figures" / f"{op.name}_{i}.png"
            figure, memory = memory_figures(schedule, tensors, trace_size, png,
                                            f"{op.name}: {title}")
            figure = figure and str(Path(figure).relative_to(out))
        measured = run_step(op, make, size, inputs, expected, number, repeat)
        rep.steps.append(StepReport(title, measured, text, diff, figure, memory))
        previous = (title, text)
    rep.tuned = tune(op, getattr(example, op.template), size, trials,
                     out / f"{op.name}_tuning.json")
    return rep


def assignment_report(out: str | Path = "assignment_report", *, quick: bool = False,
                      operators: Sequence[str] | None = None, trials: int | None = None,
                      sizes: dict[str, tuple[int, ...]] | None = None,
                      figures: bool = True) -> Path:
    """Write the assignment's report to ``out`` and return the path of ``report.md``.

    ``quick`` takes the operators' quick sizes and fewer timing runs instead of the
    course's; ``operators`` names a subset; ``trials`` the AutoTVM configs measured per
    operator (default 16, quick 4, 0 for none); ``sizes`` overrides an operator's size.
    """
    ops = _operators(operators)
    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    trials = (4 if quick else 16) if trials is None else trials
    number, repeat = (2, 3) if quick else (10, 5)

    def size(op: Operator) -> tuple[int, ...]:
        return (sizes or {}).get(op.name, op.sizes["quick" if quick else "course"])

    reports = [report_operator(op, size(op), out, trials=trials, number=number, repeat=repeat,
                               figures=figures)
               for op in ops if op is not fpga.FPGA]
    text = render.markdown(reports, quick=quick)
    if fpga.FPGA in ops:
        text += "\n" + fpga.markdown(fpga.fpga_report(size(fpga.FPGA)))
    (out / "report.md").write_text(text)
    (out / "report.html").write_text(render.html(text, title="kiln: the assignment"))
    return out / "report.md"
