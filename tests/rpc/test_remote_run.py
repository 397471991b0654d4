"""R2 and R4: the book's §1.4 flow (build, export, upload, load, run on remote.cpu()),
remote arrays, files, isolation of sessions, LocalSession, remote time_evaluator."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
import kiln as tvm
from kiln import rpc
from kiln.contrib import d2ltvm
from kiln.runtime.module import BenchmarkResult

from .conftest import TIMEOUT, N, vector_add


def _run_book_flow(remote, lib_path):
    """Book §1.4.3, as written there."""
    remote.upload(lib_path)
    remote_mod = remote.load_module(lib_path.rsplit("/", 1)[1])
    ctx = remote.cpu()
    a, b, c = d2ltvm.get_abc(N, lambda x: tvm.nd.array(x, ctx=ctx))
    remote_mod(a, b, c)
    np.testing.assert_equal(a.asnumpy() + b.asnumpy(), c.asnumpy())
    return remote_mod, (a, b, c)


def test_book_flow_on_a_server_process(server_process, vadd_tar):
    """R2: against `python -m kiln.exec.rpc_server` in another process."""
    _, port = server_process
    with rpc.connect("127.0.0.1", port, timeout=TIMEOUT) as remote:
        _, (a, b, c) = _run_book_flow(remote, vadd_tar)
        assert isinstance(a, rpc.RemoteNDArray) and a.device == remote.cpu(0)
        assert remote.host_triple == kiln.target.host_triple()


@pytest.mark.parametrize("lib", ["vadd_tar", "vadd_so"])
def test_book_flow_in_process_server(remote, lib, request):
    _run_book_flow(remote, request.getfixturevalue(lib))


def test_local_session_has_the_same_api(vadd_tar):
    with rpc.LocalSession() as sess:
        remote_mod, (a, b, c) = _run_book_flow(sess, vadd_tar)
        assert remote_mod.entry_name == "vector_add"


def test_remote_functions_by_name(remote, vadd_tar):
    remote.upload(vadd_tar)
    mod = remote.load_module("vector-add.tar")
    assert mod.functions == ["vector_add"] and mod.type_key == "llvm"
    dev = remote.device("cpu", 0)
    a = tvm.nd.array(np.ones(N, "float32"), dev)
    c = tvm.nd.empty((N,), "float32", dev)
    mod["vector_add"](a, a, c)
    np.testing.assert_array_equal(c.numpy(), np.full(N, 2, "float32"))
    assert "vector_add" in mod.get_source()
    with pytest.raises(AttributeError, match="no function 'nope'"):
        mod["nope"]


def test_remote_arrays(remote):
    dev = remote.cpu()
    x = np.arange(12, dtype="int64").reshape(3, 4)
    a = tvm.nd.array(x, ctx=dev)
    assert (a.shape, a.dtype, a.ndim) == ((3, 4), "int64", 2)
    np.testing.assert_array_equal(a.numpy(), x)
    b = tvm.nd.empty((3, 4), "int64", dev)
    b.copyfrom(a)                                 # remote to remote, same session
    np.testing.assert_array_equal(np.asarray(b), x)
    b[:] = 7
    np.testing.assert_array_equal(b.numpy(), np.full((3, 4), 7))
    local = b.copyto(tvm.cpu(0))                  # back to a local NDArray
    assert isinstance(local, tvm.nd.NDArray) and local.numpy()[0, 0] == 7
    c = tvm.nd.array(x).copyto(dev)               # local to remote
    assert isinstance(c, rpc.RemoteNDArray)
    np.testing.assert_array_equal(tvm.nd.array(c).numpy(), x)  # remote to local
    with pytest.raises(ValueError, match="does not match"):
        c.copyfrom(np.zeros(3))
    with pytest.raises(ValueError, match="does not match"):  # as for a local NDArray
        tvm.nd.empty((1,), "int64", dev).copyfrom(5)
    with pytest.raises(ValueError, match="shape and dtype must match"):
        b.copyfrom(tvm.nd.empty((3, 4), "int32", dev))
    z = tvm.nd.empty((), "int64", dev)           # a 0-d array takes a scalar
    z.copyfrom(5)
    assert z.numpy() == 5
    assert "remote[127.0.0.1" in repr(dev) and dev.exist
    assert dev != tvm.cpu(0) and tvm.cpu(0) != dev and dev == remote.cpu(0)


def test_files(remote, tmp_path):
    remote.upload(b"hello", "sub/data.bin")
    assert remote.listdir() == ["sub/data.bin"]
    assert bytes(remote.download("sub/data.bin")) == b"hello"
    remote.remove("sub/data.bin")
    assert remote.listdir() == []
    with pytest.raises(tvm.TVMError, match="relative name"):
        remote.upload(b"x", "../escape")
    with pytest.raises(tvm.TVMError, match="relative name"):
        remote.upload(b"x", str(tmp_path / "abs"))


def test_reuploaded_library_is_reloaded(remote, tmp_path):
    """A new library under an old name gives the new code (dlopen caches by path)."""
    dev = remote.cpu()
    a = tvm.nd.array(np.ones(N, "float32"), dev)
    c = tvm.nd.empty((N,), "float32", dev)
    for k, op in enumerate((lambda x, y: x + y, lambda x, y: x * y + 10)):
        A = tvm.te.placeholder((N,), name="a")
        B = tvm.te.placeholder((N,), name="b")
        C = tvm.te.compute((N,), lambda i: op(A[i], B[i]), name="c")  # noqa: B023
        lib = tmp_path / f"lib{k}.so"
        tvm.build(tvm.te.create_schedule(C.op), [A, B, C], "llvm").export_library(str(lib))
        remote.upload(str(lib), "same.so")
        remote.load_module("same.so")(a, a, c)
        np.testing.assert_array_equal(c.numpy(), np.full(N, [2, 11][k], "float32"))


def test_sessions_are_isolated_and_concurrent(server, vadd_tar):
    errors = []

    def client(k):
        try:
            with rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT) as r:
                r.upload(str(k).encode(), "mine.txt")
                _run_book_flow(r, vadd_tar)
                assert bytes(r.download("mine.txt")) == str(k).encode()
                assert sorted(r.listdir()) == ["mine.txt", "vector-add.tar"]
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not errors


def test_remote_time_evaluator(remote, vadd_tar):
    """R4: timed on the server, the same BenchmarkResult type as locally."""
    remote_mod, (a, b, c) = _run_book_flow(remote, vadd_tar)
    ctx = remote.cpu()
    res = remote_mod.time_evaluator(remote_mod.entry_name, ctx=ctx, number=4, repeat=3)(a, b, c)
    assert isinstance(res, BenchmarkResult)
    assert len(res.results) == 3 and res.mean > 0 and res.median > 0
    res = remote_mod.time_evaluator("vector_add", ctx, number=1, min_repeat_ms=2)(a, b, c)
    assert res.mean > 0
    with pytest.raises(tvm.TVMError, match="device of its session"):
        remote_mod.time_evaluator("vector_add", tvm.cpu(0))


def test_cross_compile_target_triple(tmp_path):
    """The book's `llvm -target=<triple>`: the host's triple builds, another is refused."""
    host = kiln.target.host_triple()
    mod = vector_add(target=f"llvm -target={host}")
    a, b, c = d2ltvm.get_abc(N, tvm.nd.array)
    mod(a, b, c)
    np.testing.assert_array_equal(c.numpy(), a.numpy() + b.numpy())
    with pytest.raises(tvm.TVMError, match=f"cannot compile for target triple "
                                           f"'armv6k-unknown-linux-gnueabi'.*'{host}'"):
        vector_add(target="llvm -target=armv6k-unknown-linux-gnueabi")


def test_remote_device_queries(remote):
    """Devices are asked of the server (here the same machine)."""
    assert remote.cpu(0).exist
    assert remote.cuda(0).exist == tvm.cuda(0).exist
    if not tvm.cuda(0).exist:
        with pytest.raises(rpc.RemoteError, match=r"nd_empty.*cuda\(0\)"):
            tvm.nd.empty((4,), "float32", remote.cuda(0))


@pytest.mark.gpu
def test_remote_cuda_arrays(remote):
    if not tvm.cuda(0).exist:
        pytest.skip("no CUDA device")
    dev = remote.cuda(0)
    x = np.arange(10, dtype="float32")
    a = tvm.nd.array(x, dev)
    np.testing.assert_array_equal(a.numpy(), x)
    assert dev.warp_size == 32
    dev.sync()
