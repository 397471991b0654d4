"""kiln.contrib.report and the step sequences of examples/assignment/ (``STEPS``).

Every step of every operator is checked against numpy: the CPU steps by building and
running them, the GPU steps on the CPU emulator of generated kernels (and on ``cuda(0)``
where there is one). The AutoTVM templates give a config space and run their fallback. The
whole report for the CPU operator at small sizes is generated (marked slow); its pieces
(diff, tables, HTML) are tested alone.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kiln.contrib.report import OPERATORS, assignment_report, lowered_diff, render
from kiln.contrib.report.assignment import OperatorReport, StepReport
from kiln.contrib.report.measure import Measured, run_step
from kiln.contrib.report.operators import load_example
from kiln.contrib.report.tuning import Tuned

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import build_cuda, run_on_gpu

OPS = {op.name: op for op in OPERATORS}
SMALL = {"conv1d_cpu": (37, 11), "conv1d_gpu": (300, 40), "gemm_gpu": (70, 37, 45),
         "dwsp_conv2d_gpu": (1, 2, 20, 18, 3)}


def _steps(names):
    return [pytest.param(name, i, id=f"{name}-{i}")
            for name in names for i in range(len(load_example(OPS[name]).STEPS))]


def _case(name):
    op = OPS[name]
    inputs = op.inputs(SMALL[name], np.random.default_rng(1))
    return op, inputs, op.numpy(*inputs).astype("float32")


@pytest.mark.parametrize("name, i", _steps(["conv1d_cpu"]))
def test_cpu_steps_match_numpy(name, i):
    op, inputs, expected = _case(name)
    _, make = load_example(op).STEPS[i]
    measured = run_step(op, make, SMALL[name], inputs, expected, number=1, repeat=1)
    assert measured.status == "ok", measured.status


def _gpu_arrays(name, i):
    op, inputs, expected = _case(name)
    s, *tensors = load_example(op).STEPS[i][1](*SMALL[name])
    return s, tensors, [*inputs, np.zeros(expected.shape, "float32")], expected


GPU_STEPS = _steps(["conv1d_gpu", "gemm_gpu", "dwsp_conv2d_gpu"])


@pytest.mark.slow
@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
@pytest.mark.parametrize("name, i", GPU_STEPS)
def test_gpu_steps_match_numpy_emulated(name, i):
    s, tensors, arrays, expected = _gpu_arrays(name, i)
    cuda_emulator.Emulated(build_cuda(s, tensors))(*arrays)
    np.testing.assert_allclose(arrays[-1], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("name, i", GPU_STEPS)
def test_gpu_steps_match_numpy(name, i):
    s, tensors, arrays, expected = _gpu_arrays(name, i)
    np.testing.assert_allclose(run_on_gpu(s, tensors, arrays)[-1], expected, rtol=1e-4,
                               atol=1e-4)


def test_every_operator_has_three_optimizations_and_a_template():
    for op in OPERATORS:
        example = load_example(op)
        assert len(example.STEPS) >= 4, op.name  # the baseline and three optimizations
        assert example.STEPS[0][0] == "baseline"
        assert callable(getattr(example, op.template))


@pytest.mark.parametrize("name", list(OPS))
def test_templates_have_a_space_and_a_fallback(name):
    from kiln import autotvm

    op = OPS[name]
    template = getattr(load_example(op), op.template)
    task = autotvm.task.create(template.task_name, SMALL[name], op.target)
    assert len(task.config_space) > 1
    s, args = task.instantiate(task.config_space.get(len(task.config_space) - 1))
    assert len(args) == 3  # the two inputs and the output


def test_lowered_diff_shows_the_changed_lines():
    diff = lowered_diff("for i\n  A[i] = 0\n", "for i.outer\n  A[i] = 0\n", "a", "b")
    assert diff.splitlines()[:2] == ["--- a", "+++ b"]
    assert "-for i" in diff and "+for i.outer" in diff and "   A[i] = 0" in diff


def _fake_report() -> OperatorReport:
    steps = [StepReport("baseline", Measured("ok", 2e-3), "produce B {}", "", None, ""),
             StepReport("tiled", Measured("ok", 5e-4), "produce B {}", "-a\n+b",
                        "figures/x_1.png", "| buffer | accesses |\n|---|---|\n| A | 4 |")]
    return OperatorReport(OPS["conv1d_cpu"], (64, 8), steps,
                          {"numpy": 1e-3, "PyTorch (CPU)": None}, Tuned("ok", 4, 10, 4e-4))


def test_step_table_has_speedups_per_step():
    table = render.step_table(_fake_report())
    assert "| 1. tiled | ok | 500 us | 4.00x | 4.00x | 2.00x | - |" in table
    assert "| AutoTVM (4 of 10 configs) | ok | 400 us | 5.00x |" in table
    assert "| PyTorch (CPU) | not installed |" in table


def test_html_renders_tables_code_and_images():
    text = render.markdown([_fake_report()])
    page = render.html(text)
    assert "<table>" in page and "<td>1. tiled</td>" in page
    assert '<img alt="conv1d_cpu tiled" src="figures/x_1.png">' in page
    assert "<pre>-a\n+b</pre>" in page
    assert page.count("<h2>") == 1


def test_unknown_operator_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown operator.*conv1d_cpu"):
        assignment_report(tmp_path, operators=["conv3d"])


@pytest.mark.slow
def test_cpu_report_at_small_sizes(tmp_path):
    path = assignment_report(tmp_path, quick=True, operators=["conv1d_cpu"], trials=0,
                             sizes={"conv1d_cpu": (64, 8)})
    text = path.read_text()
    assert "| 1-D convolution on CPU | 64 x 8 |" in text
    for title, _ in load_example(OPS["conv1d_cpu"]).STEPS:
        assert f". {title} | ok |" in text
    assert text.count("```diff") == len(load_example(OPS["conv1d_cpu"]).STEPS) - 1
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    have_matplotlib = importlib.util.find_spec("matplotlib") is not None
    assert (tmp_path / "figures" / "conv1d_cpu_0.png").exists() == have_matplotlib
    if not have_matplotlib:
        assert "no diagram: matplotlib is not installed" in text


def test_cli_names_the_operators_on_a_mistake(capsys):
    from kiln.cli import main

    assert main(["report", "assignment", "--operator", "conv3d"]) == 2
    assert "unknown operator(s) conv3d" in capsys.readouterr().err


def test_fpga_part_runs_on_the_vta_simulator(tmp_path):
    """The FPGA part: every step of examples/assignment/conv1d_fpga.py bit-exact on the
    simulator, with cycles that fall from the baseline on."""
    path = assignment_report(tmp_path, operators=["conv1d_fpga"], trials=0,
                             sizes={"conv1d_fpga": (64, 8)})
    text = path.read_text()
    assert "## 1-D convolution on the FPGA (VTA simulator)" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and ". " in line]
    assert [r.split(" | ")[1] for r in rows] == ["ok"] * 4, rows
    assert "| 0. baseline | ok |" in text and "1.00x" in text
