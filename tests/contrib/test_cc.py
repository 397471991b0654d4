"""tvm.contrib.cc: shared libraries and executables from the host compiler, and
``export_library(path, fcompile=...)`` building a loadable module from the module's C source."""

import subprocess

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import cc
from kiln.errors import CompileError
from kiln.target.cc import find_compiler


@pytest.fixture(scope="module")
def add_one():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    return tvm.build(te.create_schedule(B.op), [A, B], "llvm", name="add_one")


def _check_runs(mod):
    a = tvm.nd.array(np.arange(16, dtype="float32"))
    b = tvm.nd.empty((16,))
    mod["add_one"](a, b)
    np.testing.assert_allclose(b.numpy(), a.numpy() + 1)


def test_export_library_with_create_shared(add_one, tmp_path):
    path = str(tmp_path / "add_one.so")
    add_one.export_library(path, fcompile=cc.create_shared, options=["-O2"])
    _check_runs(tvm.runtime.load_module(path))


def test_cross_compiler_adds_its_options(add_one, tmp_path):
    seen = []

    def fake(output, objects, options=None):
        seen.append(options)
        cc.create_shared(output, objects, options)

    fcompile = cc.cross_compiler(fake, options=["-O1"], output_format="so")
    assert fcompile.output_format == "so"
    add_one.export_library(str(tmp_path / "x.so"), fcompile=fcompile, options=["-g"])
    assert seen == [["-O1", "-g"]]
    _check_runs(tvm.runtime.load_module(str(tmp_path / "x.so")))


def test_cross_compiler_by_compiler_name(tmp_path):
    gcc = find_compiler()
    fcompile = cc.cross_compiler(gcc, options="-O2")
    assert fcompile.get_target_triple() == cc.get_target_triple()
    src = tmp_path / "f.c"
    src.write_text("int f(void) { return 3; }\n")
    fcompile(str(tmp_path / "f.so"), [str(src)])
    assert (tmp_path / "f.so").is_file()


def test_create_executable_runs(tmp_path):
    src = tmp_path / "main.c"
    src.write_text("#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n")
    exe = str(tmp_path / "main")
    cc.create_executable(exe, [str(src)])
    assert subprocess.run([exe], capture_output=True, text=True).stdout == "hi\n"


def test_compile_error_quotes_the_log(tmp_path):
    src = tmp_path / "bad.c"
    src.write_text("int f( {\n")
    with pytest.raises(CompileError, match="Compilation error"):
        cc.create_shared(str(tmp_path / "bad.so"), [str(src)])


def test_target_triple_names_the_machine():
    assert cc.get_target_triple().count("-") >= 1
