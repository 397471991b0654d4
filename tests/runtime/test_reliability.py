"""Reliability of the runtime (issue 25): no crash on a foreign array, a compile cache that
never loads a damaged entry and survives concurrent builders, and outputs that alias inputs
rejected before the function runs. docs/reliability.md lists what each test pins."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.codegen.cuda_host import ArgChecker
from kiln.rpc.client import LocalSession
from kiln.runtime import compile_cache, fastcall
from kiln.runtime.compiler import compile_shared
from kiln.runtime.ndarray import DLTensor

from .test_compiler import compile_runs, make_wrapper

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["c", "ctypes"])
def call_path(request):
    if request.param == "c" and fastcall.load_extension() is None:
        pytest.skip("the C fast call extension cannot be built here")
    fastcall.use_backend(request.param)
    yield request.param
    fastcall.use_backend("auto")


def _double():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    return kiln.build(te.create_schedule(B.op), [A, B])


# ---- 1. only a local NDArray is passed as a DLTensor pointer -------------------------------
def test_remote_array_to_local_function_raises(call_path):
    f = _double()
    sess = LocalSession()
    remote = kiln.nd.array(np.ones(8, "float32"), sess.cpu())
    out = kiln.nd.empty((8,), "float32")
    with pytest.raises(kiln.TVMError, match=r"arg0: a remote array on remote\[local\]\.cpu\(0\) "
                                            r"cannot be passed to a local function"):
        f(remote, out)
    f(kiln.nd.array(np.arange(8, dtype="float32")), out)  # the process lives on
    np.testing.assert_array_equal(out.numpy(), np.arange(8) * 2)


def test_foreign_object_with_handle_raises(call_path):
    class Impostor:
        _handle = 16  # an address that would crash if dereferenced

    out = kiln.nd.empty((8,), "float32")
    with pytest.raises(kiln.TVMError, match="arg1: a Impostor is not a kiln NDArray"):
        _double()(kiln.nd.empty((8,), "float32"), Impostor())
    with pytest.raises(TypeError, match="argument 0 has unsupported type 'str'"):
        _double()("x", out)


def test_remote_array_to_cuda_host_checker_raises():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    checker = ArgChecker(kiln.lower(te.create_schedule(B.op), [A, B])["main"])
    remote = kiln.nd.array(np.ones(8, "float32"), LocalSession().cpu())
    with pytest.raises(kiln.TVMError, match="arg0: a remote array"):
        checker((remote, kiln.nd.empty((8,), "float32")))


# ---- 2. the compile cache checks an entry before returning it ------------------------------
ANSWER = "int kiln_answer(void) { return 42; }\n"
FOREIGN = "int kiln_answer(void) { return 7; }\n"


def _answer(path: str) -> int:
    return ctypes.CDLL(path).kiln_answer()


def _replace(path: str, data: bytes) -> None:
    """Put ``data`` at ``path`` by rename (never overwrite a file a process may have mapped)."""
    tmp = f"{path}.new"
    Path(tmp).write_bytes(data)
    os.replace(tmp, path)


@pytest.mark.parametrize("damage", ["truncated", "empty", "foreign", "no_record",
                                    "foreign_record"])
def test_damaged_entry_is_rebuilt_never_loaded(damage, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    path = compile_shared(ANSWER, name=f"answer_{damage}")
    good = Path(path).read_bytes()
    other = compile_shared(FOREIGN, name="other")
    record = Path(path).with_suffix(".json")
    entry = compile_cache.CacheEntry(tmp_path / "cache", Path(path).stem,
                                     json.loads(record.read_text())["key"], ".so")
    assert compile_cache.lookup(entry) == path
    if damage == "truncated":
        _replace(path, good[: len(good) // 2])
    elif damage == "empty":
        _replace(path, b"")
    elif damage == "foreign":
        _replace(path, Path(other).read_bytes())
    elif damage == "no_record":
        record.unlink()
    else:  # another build's library and record, both copied over
        _replace(path, Path(other).read_bytes())
        _replace(str(record), Path(other).with_suffix(".json").read_bytes())
    assert compile_cache.lookup(entry) is None  # checked before anything loads it
    with caplog.at_level(logging.WARNING, logger="kiln.runtime"):
        again = compile_shared(ANSWER, name=f"answer_{damage}")
    assert again == path and "building it again" in caplog.text
    assert compile_cache.lookup(entry) == path and _answer(path) == 42


def test_damaged_cuda_image_is_recompiled(tmp_path, monkeypatch, caplog):
    from kiln.runtime import cuda_driver

    if not cuda_driver.available():
        pytest.skip("NVRTC (kiln[cuda]) is not installed")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    source = 'extern "C" __global__ void twice(float* a) { a[threadIdx.x] *= 2.0f; }\n'
    image = cuda_driver.compile_cuda(source, "sm_80")
    (cached,) = (tmp_path / "cache" / "cuda").glob("*.cubin")
    _replace(str(cached), image[: len(image) // 3])
    with caplog.at_level(logging.WARNING, logger="kiln.runtime"):
        assert cuda_driver.compile_cuda(source, "sm_80") == image
    assert "building it again" in caplog.text and cached.read_bytes() == image


def test_valid_entry_is_a_quiet_hit(tmp_path, monkeypatch, caplog):
    script, log = make_wrapper(tmp_path)
    monkeypatch.setenv("CC", str(script))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    path = compile_shared(ANSWER, name="quiet")
    with caplog.at_level(logging.WARNING, logger="kiln.runtime"):
        assert compile_shared(ANSWER, name="quiet") == path
    assert not caplog.text and len(compile_runs(log)) == 1
    record = json.loads(Path(path).with_suffix(".json").read_text())
    assert record["size"] == os.path.getsize(path) and len(record["key"]) == 64


def test_unwritable_cache_dir_builds_in_a_temporary_one(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("KILN_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="kiln.runtime"):
        path = compile_shared(ANSWER, name="fallback")
    assert "cannot write the compile cache" in caplog.text
    assert not path.startswith(str(tmp_path)) and _answer(path) == 42


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs POSIX permissions that apply (not root)")
def test_read_only_cache_dir_builds_in_a_temporary_one(tmp_path, monkeypatch, caplog):
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o555)
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    try:
        with caplog.at_level(logging.WARNING, logger="kiln.runtime"):
            path = compile_shared(ANSWER, name="read_only")
    finally:
        cache.chmod(0o755)
    assert "cannot write the compile cache" in caplog.text and _answer(path) == 42


def test_threads_building_one_kernel_compile_it_once(tmp_path, monkeypatch):
    script, log = make_wrapper(tmp_path)
    monkeypatch.setenv("CC", str(script))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(compile_shared(ANSWER)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 4
    assert len(compile_runs(log)) == 1 and _answer(results[0]) == 42


_BUILDER = """
    import sys
    import numpy as np
    import kiln
    from kiln import te

    k = int(sys.argv[1])
    A = te.placeholder((64,), name="A")
    for scale in (3.0, 10.0 + k):  # one kernel every process builds, one of its own
        B = te.compute((64,), lambda i: A[i] * scale, name="B")
        f = kiln.build(te.create_schedule(B.op), [A, B])
        a = kiln.nd.array(np.arange(64, dtype="float32"))
        b = kiln.nd.empty((64,), "float32")
        f(a, b)
        assert np.array_equal(b.numpy(), np.arange(64) * scale), (k, scale)
    print("ok")
"""


@pytest.mark.slow
def test_processes_share_a_fresh_cache(tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(REPO), KILN_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(_BUILDER), str(k)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for k in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [o.strip() for o, _ in outs] == ["ok"] * 4, outs
    assert not any("building it again" in err for _, err in outs), outs
    names = os.listdir(cache)
    assert not [n for n in names if n.startswith(".tmp-")]
    libraries = [n for n in names if n.endswith(".so")]
    assert len([n for n in libraries if n.startswith("default_function-")]) == 1 + 4
    for name in libraries:  # the kernels and the fast call extension
        record = json.loads((cache / name).with_suffix(".json").read_text())
        entry = compile_cache.CacheEntry(cache, Path(name).stem, record["key"], ".so")
        assert compile_cache.lookup(entry) == str(cache / name)


# ---- 3. an output that aliases an input is rejected ----------------------------------------
def _transpose():
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[j, i], name="B")
    s = te.create_schedule(B.op)
    return s, [A, B]


ALIAS_MESSAGE = ("Argument arg1 (B) overlaps arg0 (A) in memory: default_function writes arg1 "
                 "and reads arg0, which must not share memory (the result would be wrong); "
                 "pass a separate output array")


def test_output_aliasing_input_raises(call_path):
    s, args = _transpose()
    f = kiln.build(s, args)
    a = kiln.nd.array(np.arange(16, dtype="float32").reshape(4, 4))
    with pytest.raises(kiln.TVMError) as info:
        f(a, a)
    assert str(info.value) == ALIAS_MESSAGE
    np.testing.assert_array_equal(a.numpy(), np.arange(16).reshape(4, 4))  # untouched
    b = kiln.nd.empty((4, 4), "float32")
    f(a, b)
    np.testing.assert_array_equal(b.numpy(), a.numpy().T)


def test_overlapping_views_raise_and_disjoint_ones_run():
    A = te.placeholder((32,), name="A")
    B = te.compute((32,), lambda i: A[i] * 2.0, name="B")
    f = kiln.build(te.create_schedule(B.op), [A, B])
    buf = np.empty(64 + 16, "float32")
    start = (-buf.ctypes.data) % 64 // 4
    x = buf[start:start + 64]  # 64-byte aligned, as kiln's compiled code requires
    x[:] = np.arange(64)
    view = kiln.nd.from_dlpack
    with pytest.raises(kiln.TVMError, match=r"arg1 \(B\) overlaps arg0 \(A\)"):
        f(view(x[:32]), view(x[16:48]))  # 16 floats apart: the views share 64 bytes
    f(view(x[:32]), view(x[32:]))
    np.testing.assert_array_equal(x[32:], np.arange(32) * 2)


def test_inputs_may_alias_each_other():
    A = te.placeholder((8,), name="A")
    C = te.placeholder((8,), name="C")
    B = te.compute((8,), lambda i: A[i] + C[i], name="B")
    f = kiln.build(te.create_schedule(B.op), [A, C, B])
    a, b = kiln.nd.array(np.arange(8, dtype="float32")), kiln.nd.empty((8,), "float32")
    f(a, a, b)
    np.testing.assert_array_equal(b.numpy(), np.arange(8) * 2)


def test_cuda_host_checker_gives_the_same_alias_message():
    s, args = _transpose()
    func = kiln.lower(s, args)["main"]
    checker = ArgChecker(func.__class__(func.params, func.buffer_map, func.body,
                                        "default_function"))
    a = kiln.nd.array(np.zeros((4, 4), "float32"))
    DLTensor.from_address(a._handle).device.device_type = 2
    try:
        with pytest.raises(kiln.TVMError) as info:
            checker((a, a))
    finally:
        DLTensor.from_address(a._handle).device.device_type = 1
    assert str(info.value) == ALIAS_MESSAGE
