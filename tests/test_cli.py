"""The kiln command: compile / run / bench / model on a small ONNX model, and its errors (one
line on stderr, exit status 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from kiln import cli


def test_version(capsys):
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.strip()


def test_bench_lists_suites(capsys):
    assert cli.main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert "foundation" in out and "models" in out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "compile" in capsys.readouterr().out


@pytest.fixture
def small_onnx(tmp_path):
    pytest.importorskip("onnx")
    path = tmp_path / "small.onnx"
    assert cli.main(["model", "conv_bias_relu", "-o", str(path)]) == 0
    return path


def _error(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_compile_run_roundtrip(small_onnx, tmp_path, capsys):
    ort = pytest.importorskip("onnxruntime")
    capsys.readouterr()
    out = tmp_path / "small.kiln"
    assert cli.main(["compile", str(small_onnx), "-o", str(out), "--opt-level", "3"]) == 0
    text = capsys.readouterr().out
    assert "kernels from" in text and "conv2d" in text and out.exists()

    x = np.random.default_rng(3).standard_normal((1, 3, 10, 10)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    y_path = tmp_path / "y.npy"
    assert cli.main(["run", str(out), "--input", f"x={tmp_path / 'x.npy'}", "--output",
                     str(y_path), "--repeat", "3"]) == 0
    text = capsys.readouterr().out
    assert "output 0: [1,8,10,10] float32" in text and "latency: median" in text
    sess = ort.InferenceSession(small_onnx.read_bytes(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(np.load(y_path), sess.run(None, {"x": x})[0], rtol=1e-5,
                               atol=1e-5)

    # random input when none is given; float64 input converted to the model's float32
    assert cli.main(["run", str(out)]) == 0
    assert "random, seed 0" in capsys.readouterr().out
    np.save(tmp_path / "x64.npy", x.astype(np.float64))
    assert cli.main(["run", str(out), "--input", str(tmp_path / "x64.npy")]) == 0


def test_compile_default_output_and_shape(small_onnx, capsys):
    assert cli.main(["compile", str(small_onnx), "--shape", "x=1,3,6,6", "-q"]) == 0
    assert small_onnx.with_suffix(".kiln").exists()
    assert cli.main(["run", str(small_onnx.with_suffix(".kiln"))]) == 0
    assert "output 0: [1,8,6,6]" in capsys.readouterr().out


def test_bench_model(small_onnx, capsys):
    pytest.importorskip("onnxruntime")
    assert cli.main(["bench", str(small_onnx), "--repeat", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert ": ok" in out and "kiln / onnxruntime" in out


def test_model_list(capsys):
    pytest.importorskip("onnx")
    assert cli.main(["model", "--list"]) == 0
    assert "resnet18" in capsys.readouterr().out


def test_errors(small_onnx, tmp_path, capsys):
    missing = str(tmp_path / "missing.onnx")
    assert "no such file" in _error(capsys, ["compile", missing])
    assert "no such file" in _error(capsys, ["bench", missing])
    assert "no such file" in _error(capsys, ["run", str(tmp_path / "missing.kiln")])
    text = tmp_path / "notes.onnx"
    text.write_text("hello, this is not a model\n")
    assert "not an ONNX model" in _error(capsys, ["compile", str(text)])
    assert "not a compiled kiln model" in _error(capsys, ["run", str(small_onnx)])
    err = _error(capsys, ["compile", str(small_onnx), "--shape", "image=1,3,8,8"])
    assert "no input 'image'" in err and "inputs: x" in err
    assert "rank 4" in _error(capsys, ["compile", str(small_onnx), "--shape", "x=1,3,8"])
    assert "input channels" in _error(capsys, ["compile", str(small_onnx), "--shape",
                                               "x=1,5,8,8"])
    assert "positive" in _error(capsys, ["compile", str(small_onnx), "--shape", "x=1,0,8,8"])
    assert "unknown test model" in _error(capsys, ["model", "resnet1000"])


def test_malformed_and_unsupported_models(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    def save(nodes, name):
        io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in "xy"]
        g = helper.make_graph(nodes, "g", io[:1], io[1:])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        path = tmp_path / name
        onnx.save(m, str(path))
        return str(path)

    bad = save([helper.make_node("Relu", ["nowhere"], ["y"], name="r0")], "bad.onnx")
    assert "malformed ONNX model" in _error(capsys, ["compile", bad])
    elu = save([helper.make_node("Elu", ["x"], ["y"], name="my_elu")], "elu.onnx")
    err = _error(capsys, ["compile", elu])
    assert "Elu" in err and "my_elu" in err


def test_wrong_input_file(small_onnx, tmp_path, capsys):
    out = tmp_path / "m.kiln"
    assert cli.main(["compile", str(small_onnx), "-o", str(out), "-q"]) == 0
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 9, 9), np.float32))
    err = _error(capsys, ["run", str(out), "--input", str(tmp_path / "wrong.npy")])
    assert "expects shape [1,3,10,10] float32" in err and "[1,3,9,9]" in err
    np.save(tmp_path / "ints.npy", np.zeros((1, 3, 10, 10), np.int32))
    assert "expects float32" in _error(capsys, ["run", str(out), "--input",
                                                str(tmp_path / "ints.npy")])
    assert "no input 'q'" in _error(capsys, ["run", str(out), "--input",
                                             f"q={tmp_path / 'ints.npy'}"])
    (tmp_path / "junk.npy").write_text("junk")
    assert "not a .npy" in _error(capsys, ["run", str(out), "--input",
                                           str(tmp_path / "junk.npy")])


def test_console_entry_point_exit_status(tmp_path):
    """As a process: exit status 2 and a single stderr line, no traceback."""
    res = subprocess.run([sys.executable, "-m", "kiln.cli", "compile",
                          str(tmp_path / "nothing.onnx")], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip() == f"kiln compile: error: {tmp_path / 'nothing.onnx'}: no such file"


@pytest.mark.slow
def test_demo_model_part_small(capsys):
    """The demo's network part, on a 32x32 ResNet-18 to stay fast."""
    pytest.importorskip("onnxruntime")
    from kiln import demo

    assert demo.model_demo("resnet18", hw=32, rounds=1)
    out = capsys.readouterr().out
    assert "kernels from" in out and "max abs diff" in out and "kiln / onnxruntime" in out


def test_bench_suites_take_an_output_folder_with_a_path(tmp_path, monkeypatch):
    """``kiln bench SUITE --out /a/folder``: the folder is the suites' option, not a model."""
    seen = []
    monkeypatch.setattr(cli, "_bench_suites", lambda args: seen.append(args) or 0)
    out = str(tmp_path / "results")
    assert cli.main(["bench", "foundation", "--quick", "--out", out]) == 0
    assert seen == [["foundation", "--quick", "--out", out]]
