"""Libraries built from parts (``compile_object``, ``link_shared``, ``Module.from_objects``):
objects cached under their caller's key with a record, one error buffer per library, a
damaged object rebuilt."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.runtime import compiler
from kiln.runtime.compile_cache import lookup, lookup_info
from kiln.runtime.compiler import compile_object, link_shared, object_entry, runtime_header
from kiln.runtime.module import Module

# Two kernels compiled apart; each fails with its own message (the library's one error
# buffer must hold whichever failed last).
KERNEL = r"""
KILN_DLL int32_t SYMBOL(KilnValue* args, int32_t* codes, int32_t n) {
  if (n != 1) { kiln_set_error("SYMBOL: expected 1 argument, got %d", n); return -1; }
  float* x = (float*)((DLTensor*)args[0].v_handle)->data;
  x[0] += ADD;
  return 0;
}
"""


def _kernel(symbol: str, add: int) -> str:
    return runtime_header() + KERNEL.replace("SYMBOL", symbol).replace("ADD", str(add))


def _objects(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    entries = []
    for symbol, add in (("k_one", 1), ("k_two", 2)):
        entry = object_entry(f"{symbol}-key", name=symbol)
        compile_object(entry, _kernel(symbol, add), info={"symbol": symbol})
        entries.append(entry)
    return entries


def test_objects_link_into_one_library(tmp_path, monkeypatch):
    entries = _objects(tmp_path, monkeypatch)
    assert lookup_info(entries[0]) == {"symbol": "k_one"}
    glue = runtime_header() + '\nint32_t k_two(KilnValue*, int32_t*, int32_t);\n' \
        'KILN_DLL int32_t two(KilnValue* a, int32_t* c, int32_t n) { return k_two(a, c, n); }\n'
    mod = Module.from_objects(entries, glue, ["k_one", "two"], "k_one", "c", "source")
    x = kiln.nd.array(np.zeros(1, "float32"))
    mod["k_one"](x)
    mod["two"](x)
    assert x.numpy()[0] == 3.0
    for name in ("k_one", "two"):  # either object's error reaches kiln_last_error
        with pytest.raises(kiln.TVMError, match="expected 1 argument, got 2"):
            mod[name](x, x)
    assert mod.get_source() == "source"


def test_link_is_cached_by_the_objects_keys(tmp_path, monkeypatch):
    entries = _objects(tmp_path, monkeypatch)
    glue = runtime_header()
    first = link_shared(entries, glue)
    assert link_shared(entries, glue) == first
    assert link_shared(entries[:1], glue) != first


def test_object_key_tells_flags_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    assert object_entry("k").key != object_entry("k", flags=["-O2"]).key
    assert object_entry("k").key != object_entry("k2").key


def test_damaged_object_is_rebuilt(tmp_path, monkeypatch, caplog):
    entry = _objects(tmp_path, monkeypatch)[0]
    entry.path.write_bytes(entry.path.read_bytes()[:100])  # truncated
    assert lookup(entry) is None and lookup_info(entry) is None
    with caplog.at_level(logging.WARNING, logger="kiln.runtime"):
        compile_object(entry, _kernel("k_one", 1), info={"symbol": "k_one"})
    assert "building it again" in caplog.text
    assert lookup_info(entry) == {"symbol": "k_one"}


def _gcc_only():
    if not compiler._is_gcc(compiler.compiler_command()):
        pytest.skip("precompiled headers are used with GCC only")


def test_kernels_read_the_runtime_header_precompiled(tmp_path, monkeypatch):
    """Objects whose source starts with the runtime header are compiled with it
    precompiled (once per cache directory, compiler and flags), into the same object file."""
    _gcc_only()
    argvs = []
    run = compiler._run
    monkeypatch.setattr(compiler, "_run", lambda cmd, args: argvs.append(args) or run(cmd, args))
    entries = _objects(tmp_path / "pch", monkeypatch)
    (pch,) = (tmp_path / "pch").glob("kiln_c_runtime-*.h.gch")
    header = str(pch)[:-len(".gch")]
    compiles = [a for a in argvs if "-o" in a and str(a[a.index("-o") + 1]).endswith(".o")]
    assert len(compiles) == 2 and all(a[a.index("-include") + 1] == header for a in compiles)
    monkeypatch.setattr(compiler, "precompiled_runtime_header", lambda *_: None)
    plain = _objects(tmp_path / "plain", monkeypatch)
    for a, b in zip(entries, plain, strict=True):
        assert a.path.read_bytes() == b.path.read_bytes()


def test_precompiled_header_only_for_sources_that_start_with_it(tmp_path, monkeypatch):
    _gcc_only()
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    argvs = []
    run = compiler._run
    monkeypatch.setattr(compiler, "_run", lambda cmd, args: argvs.append(args) or run(cmd, args))
    source = "#define KILN_PACKED_CALLS 1\n" + _kernel("k_one", 1)
    compile_object(object_entry("packed", name="packed"), source)
    assert not any("-include" in a for a in argvs)
    header = compiler.precompiled_runtime_header(compiler.compiler_command(), ["-O3", "-c"])
    Path(header).unlink()  # a header removed from the cache is written again
    assert compiler.precompiled_runtime_header(compiler.compiler_command(),
                                               ["-O3", "-c"]) == header
    assert Path(header).read_text() == runtime_header()


def test_object_argv_is_what_compile_object_runs(tmp_path, monkeypatch):
    """``object_argv`` (for timing a kernel's compilation alone) is the command line of
    :func:`compile_object`, the output and source aside."""
    argvs = []
    run = compiler._run
    monkeypatch.setattr(compiler, "_run", lambda cmd, args: argvs.append([*cmd, *args])
                        or run(cmd, args))
    _objects(tmp_path, monkeypatch)
    compiled = [a for a in argvs if "-c" in a and a[-1].endswith(".c")]
    assert compiled and all(a[:a.index("-o")] == compiler.object_argv() for a in compiled)
