"""kiln.contrib.spacetime.plot and ``kiln spacetime``: the diagrams are written, and the
command prints the trace's summary."""

from __future__ import annotations

import sys

import pytest

from kiln import cli, te
from kiln.contrib import spacetime

SCRIPT = '''
from kiln import te

def matmul(N):
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_schedule(C.op), [A, B, C]

def scale():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    return te.create_schedule(B.op), [A, B]
'''


def _trace(parallel: bool):
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    if parallel:
        s[B].parallel(B.op.axis[0])
    return spacetime.trace(s, [A, B], num_threads=2)


def _is_png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def matplotlib():
    return pytest.importorskip("matplotlib.figure")


@pytest.mark.parametrize("color", ["access", "thread"])
def test_plot(matplotlib, tmp_path, color):
    spacetime.plot(_trace(True), str(tmp_path / "a.png"), color=color)
    assert _is_png(tmp_path / "a.png")


def test_plot_side_by_side(matplotlib, tmp_path):
    spacetime.plot_side_by_side(_trace(False), _trace(True), str(tmp_path / "ab.png"),
                                titles=("serial", "parallel"))
    assert _is_png(tmp_path / "ab.png")


def test_plot_colors_are_checked(tmp_path):
    with pytest.raises(ValueError, match="color"):
        spacetime.plot(_trace(False), str(tmp_path / "c.png"), color="rainbow")


def test_plot_without_matplotlib_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="matplotlib"):
        spacetime.plot(_trace(False), str(tmp_path / "a.png"))


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "schedules.py"
    path.write_text(SCRIPT)
    return path


def test_cli_traces_a_script(matplotlib, script, tmp_path, capsys):
    out = tmp_path / "fig.png"
    assert cli.main(["spacetime", f"{script}:matmul", "--shape", "N=4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "272 accesses in 272 steps" in text and "| A | 64 |" in text
    assert _is_png(out)


def test_cli_binds_symbolic_dimensions(script, capsys):
    assert cli.main(["spacetime", f"{script}:scale", "--shape", "n=5"]) == 0
    assert "10 accesses" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["{script}:missing"], "no function missing"),
    (["{script}"], "script.py:function"),
    (["{script}:matmul", "--shape", "N"], "NAME=INTEGER"),
])
def test_cli_errors(script, capsys, argv, message):
    assert cli.main(["spacetime", *(a.format(script=script) for a in argv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kiln spacetime: error:") and message in err
