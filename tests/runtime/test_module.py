"""Modules: calling, errors, source, export/load (also in a fresh process), time_evaluator."""

import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kiln.nd as nd
from kiln.errors import TVMError
from kiln.runtime import BenchmarkResult, Module, PackedFunc, cpu, load_module
from kiln.runtime.compiler import compile_shared, runtime_header

from .conftest import MODULE_INFO, TEST_BODY, module_source

REPO = Path(__file__).resolve().parents[2]


def vectors(n=4):
    a = nd.array(np.arange(n, dtype="float32"))
    b = nd.array(np.full(n, 10, "float32"))
    return a, b, nd.empty((n,), "float32")


def test_call_entry_and_lookup(test_module):
    a, b, c = vectors()
    test_module(a, b, c)
    np.testing.assert_array_equal(c.numpy(), [10, 11, 12, 13])
    f = test_module["vadd"]
    assert isinstance(f, PackedFunc) and f is test_module.get_function("vadd")
    c2 = nd.empty((4,), "float32")
    assert f(a, b, c2) is None
    np.testing.assert_array_equal(c2.numpy(), c.numpy())
    assert test_module.entry_name == "vadd"
    assert test_module.type_key == "c"
    assert test_module.imported_modules == []
    assert repr(test_module).startswith("Module(c, ")
    with pytest.raises(AttributeError, match="no function 'nope'"):
        test_module.get_function("nope")
    with pytest.raises(AttributeError):
        test_module["kiln_last_error"]  # exported, but not a packed function


def test_error_from_compiled_code(test_module):
    a = nd.array(np.zeros((2, 2), "float32"))
    with pytest.raises(TVMError, match=r"vadd: expected 1-D tensors, got ndim=2"):
        test_module(a, a, a)
    with pytest.raises(TVMError, match="expected 3 arguments, got 1"):
        test_module["vadd"](a)
    x = nd.array(np.zeros(4, "float64"))
    with pytest.raises(TVMError, match="vadd: expected float32"):
        test_module(x, x, x)
    test_module(*vectors())  # still usable afterwards


def test_get_source(test_module):
    src = test_module.get_source()
    assert src == module_source() and test_module.get_source("c") == src
    assert "vadd" in test_module.get_source("asm")
    with pytest.raises(TVMError, match="unsupported format"):
        test_module.get_source("ptx")


def test_module_without_entry():
    mod = Module.from_source(module_source(), MODULE_INFO["functions"], None, "llvm")
    assert mod.type_key == "llvm"
    with pytest.raises(TVMError, match="no entry"):
        mod(*vectors())
    mod["vadd"](*vectors())


def run_fresh(code: str) -> str:
    """Run ``code`` in a new Python process with the repo importable; return its stdout."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


FRESH = """
    import numpy as np
    import kiln.nd as nd
    from kiln.runtime import load_module
    m = load_module({path!r})
    a = nd.array(np.arange(5, dtype="float32"))
    c = nd.empty((5,), "float32")
    m(a, a, c)
    print(c.numpy().tolist(), m.entry_name, m.type_key, "vadd" in m.get_source())
"""


@pytest.mark.parametrize("name", ["vector-add.so", "vector-add.tar", "vector-add.tar.gz"])
def test_export_and_load_fresh_process(test_module, tmp_path, name):
    path = tmp_path / name
    test_module.export_library(str(path))
    assert path.exists()
    if name.endswith(".tar"):
        with tarfile.open(path) as tar:
            assert sorted(tar.getnames()) == ["lib.c", "lib.so", "module.json"]
    out = run_fresh(FRESH.format(path=str(path)))
    assert out.split() == ["[0.0,", "2.0,", "4.0,", "6.0,", "8.0]", "vadd", "c", "True"]
    loaded = load_module(path)
    assert loaded.get_source() == test_module.get_source()
    assert loaded.functions == test_module.functions
    a, b, c = vectors()
    loaded["vadd"](a, b, c)
    np.testing.assert_array_equal(c.numpy(), [10, 11, 12, 13])


def test_metadata_added_when_missing(tmp_path):
    source = runtime_header() + TEST_BODY  # no kiln_module_info: from_source embeds one
    mod = Module.from_source(source, ["vadd", "axpy"], "vadd", "c")
    mod.export_library(tmp_path / "auto.so")
    loaded = load_module(tmp_path / "auto.so")
    assert loaded.functions == ["vadd", "axpy"] and loaded.entry_name == "vadd"
    assert loaded.get_source() == source
    loaded(*vectors())


def test_embedded_source_keeps_every_character(tmp_path):
    # escapes in the C string literal: quotes, backslashes, trigraphs, controls, UTF-8 and
    # bytes that are not UTF-8 (surrogateescape), a last line without a newline
    comment = '/* "q" \\ ??= ??/ \t\r\x01\x7f \u00e9 \u4e2d \udcff 0\n1 */'
    source = runtime_header() + TEST_BODY + comment
    mod = Module.from_source(source, ["vadd", "axpy"], "vadd", "c")
    mod.export_library(tmp_path / "chars.so")
    assert load_module(tmp_path / "chars.so").get_source() == source


def test_load_errors(tmp_path):
    with pytest.raises(TVMError, match="does not exist"):
        load_module(tmp_path / "missing.so")
    junk = tmp_path / "junk.so"
    junk.write_text("not a library")
    with pytest.raises(TVMError, match="cannot load"):
        load_module(junk)
    foreign = compile_shared("int f(void) { return 1; }\n", name="foreign")
    with pytest.raises(TVMError, match="not a kiln library"):
        load_module(foreign)
    bad_tar = tmp_path / "bad.tar"
    with tarfile.open(bad_tar, "w") as tar:
        tar.add(junk, arcname="junk.so")
    with pytest.raises(TVMError, match="not a kiln module archive"):
        load_module(bad_tar)
    not_tar = tmp_path / "fake.tar"
    not_tar.write_text("hello")
    with pytest.raises(TVMError, match="cannot load"):
        load_module(not_tar)


def test_export_unsupported_suffix(test_module, tmp_path):
    with pytest.raises(TVMError, match="unsupported file type"):
        test_module.export_library(tmp_path / "x.zip")


def test_time_evaluator(test_module):
    counter = nd.array(np.zeros(1, "int64"))
    timer = test_module.time_evaluator("count", cpu(0), number=3, repeat=4)
    res = timer(counter)
    assert isinstance(res, BenchmarkResult)
    assert len(res.results) == 4 and all(r > 0 for r in res.results)
    assert res.min <= res.median <= res.max and res.min <= res.mean <= res.max
    assert res.std >= 0
    assert counter.numpy()[0] == 1 + 3 * 4  # one warm-up call, then number * repeat
    assert "mean" in repr(res) and "Execution time summary" in str(res)

    counter.copyfrom(np.zeros(1, "int64"))
    res = test_module.time_evaluator("count", cpu(0), number=1, repeat=2, min_repeat_ms=2)(
        counter
    )
    calls = int(counter.numpy()[0]) - 1
    assert calls > 2  # number grew to fill 2 ms per repeat
    a, b, c = vectors()
    result = test_module.time_evaluator("vadd", cpu(0))(a, b, c)
    assert result.mean > 0  # a sanity check that something was measured, not a speed goal


def test_missing_entry_symbol():
    with pytest.raises(TVMError, match="entry function 'ghost'"):
        Module.from_source(module_source(), ["vadd", "ghost"], "ghost", "c")
