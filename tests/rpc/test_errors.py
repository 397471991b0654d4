"""R3: every failure is a clear TVMError, and the server survives its clients."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc
from kiln.rpc.protocol import send_message

from .conftest import TIMEOUT, N


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connect_to_a_closed_port():
    port = _free_port()
    with pytest.raises(tvm.TVMError, match=f"cannot connect to the RPC server at "
                                           f"127.0.0.1:{port}"):
        rpc.connect("127.0.0.1", port, timeout=TIMEOUT)


def test_connect_to_something_that_is_not_a_kiln_server():
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        port = lst.getsockname()[1]

        def http_like():
            conn, _ = lst.accept()
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

        threading.Thread(target=http_like, daemon=True).start()
        with pytest.raises(tvm.TVMError, match="not a kiln RPC peer"):
            rpc.connect("127.0.0.1", port, timeout=TIMEOUT)


def test_upload_of_a_missing_file(remote, tmp_path):
    missing = tmp_path / "nope.tar"
    with pytest.raises(tvm.TVMError, match=f"local file '{missing}' does not exist"):
        remote.upload(str(missing))


def test_load_of_a_file_not_uploaded(remote, vadd_tar):
    remote.upload(vadd_tar)
    with pytest.raises(tvm.TVMError, match=r"'other.tar' was not uploaded to this session "
                                           r"\(workspace files: \['vector-add.tar'\]\)"):
        remote.load_module("other.tar")
    for op in (remote.download, remote.remove):
        with pytest.raises(tvm.TVMError, match="was not uploaded"):
            op("other.tar")


def test_load_of_a_file_that_is_not_a_module(remote):
    remote.upload(b"not a library", "junk.so")
    with pytest.raises(rpc.RemoteError, match="load_module.*TVMError: cannot load") as info:
        remote.load_module("junk.so")
    assert "Traceback" in info.value.remote_traceback


def test_remote_exception_shows_the_last_traceback_line(remote, vadd_tar):
    remote.upload(vadd_tar)
    mod = remote.load_module("vector-add.tar")
    dev = remote.cpu()
    a = tvm.nd.array(np.ones(N, "float32"), dev)
    short = tvm.nd.array(np.ones(3, "float32"), dev)
    with pytest.raises(rpc.RemoteError, match="raised during 'call': .*Error: ") as info:
        mod(a, a, short)
    last = info.value.remote_traceback.strip().splitlines()[-1]
    assert last in str(info.value)
    mod(a, a, tvm.nd.empty((N,), "float32", dev))  # the session goes on


def test_wrong_arguments_are_refused_before_sending(remote, vadd_tar):
    remote.upload(vadd_tar)
    mod = remote.load_module("vector-add.tar")
    local = tvm.nd.array(np.ones(N, "float32"))
    with pytest.raises(TypeError, match="local NDArray on cpu\\(0\\) cannot be passed"):
        mod(local, local, local)
    with pytest.raises(TypeError, match="cannot pass str"):
        mod("a")
    with rpc.LocalSession() as other:
        x = tvm.nd.array(np.ones(N, "float32"), other.cpu())
        with pytest.raises(tvm.TVMError, match="another RPC session"):
            mod(x, x, x)
        with pytest.raises(tvm.TVMError, match="another RPC session"):
            remote.empty((2,), "float32", other.cpu())


def test_dropped_connection(server, vadd_tar):
    remote = rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT)
    remote.upload(vadd_tar)
    server.stop()
    with pytest.raises(rpc.RPCError, match="127.0.0.1:.*(was lost|closed)"):
        remote.load_module("vector-add.tar")
    with pytest.raises(rpc.RPCError, match="is closed"):
        remote.listdir()


def test_session_timeout_ends_the_session(server):
    remote = rpc.connect("127.0.0.1", server.port, session_timeout=0.3, timeout=TIMEOUT)
    remote.listdir()
    time.sleep(0.8)
    with pytest.raises(rpc.RPCError):
        remote.listdir()


def test_server_survives_crashing_clients(server, vadd_tar):
    # a client that vanishes mid-message, one that sends garbage, one that sends a bad op
    s = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
    s.sendall(b"KRPC\x00\x00\x00\x01\x00\x00\x10\x00{\"op\"")
    s.close()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    s.settimeout(TIMEOUT)
    try:  # the server hangs up on a non-kiln peer
        assert s.recv(10) == b""
    except ConnectionResetError:
        pass
    s.close()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
    send_message(s, {"op": "__init__"})
    s.close()
    with rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT) as remote:
        with pytest.raises(rpc.RemoteError, match="unknown RPC operation"):
            remote._request({"op": "no_such_op"})
        remote.upload(vadd_tar)
        assert remote.load_module("vector-add.tar").entry_name == "vector_add"
    deadline = time.monotonic() + TIMEOUT
    while server.num_sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.num_sessions == 0


def test_a_bad_free_field_is_an_error_of_the_request_not_of_the_session(remote):
    """A request whose ``free`` field is not a list of handles gets an error reply; the
    session process lives on (it used to die, so the client had to start a new session)."""
    a = tvm.nd.array(np.arange(3, dtype="int32"), remote.cpu())
    for free in (None, True, 7, [[1, 0]], [{"nd": 1}], ["x"]):
        with pytest.raises(rpc.RemoteError, match="bad 'free' field"):
            remote._request({"op": "listdir", "free": free})
    assert a.numpy().tolist() == [0, 1, 2]


def test_a_silent_server_times_out():
    """A peer that accepts and never answers: the client's timeout, not a hang."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        t0 = time.monotonic()
        with pytest.raises(rpc.RPCError, match="did not answer the greeting in time"):
            rpc.connect("127.0.0.1", lst.getsockname()[1], timeout=0.5)
        assert time.monotonic() - t0 < TIMEOUT


def test_large_arrays_cross_the_wire(remote):
    x = np.random.default_rng(0).standard_normal((3, 1 << 21)).astype("float32")  # 24 MiB
    a = tvm.nd.array(x, remote.cpu())
    np.testing.assert_array_equal(a.numpy(), x)
