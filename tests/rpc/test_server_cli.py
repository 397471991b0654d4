"""R1: the server as a program: its log line, the tvm alias spelling, clean shutdown."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from kiln import rpc

from .conftest import TIMEOUT, ServerProcess, start_server_process


def test_server_logs_bind_line_and_serves(server_process):
    sp, port = server_process
    assert "INFO:RPCServer:bind to 127.0.0.1:" in sp.log[-1]
    with rpc.connect("127.0.0.1", port, timeout=TIMEOUT) as remote:
        a = remote.array(np.arange(5, dtype="int32"), remote.cpu())
        np.testing.assert_array_equal(a.numpy(), np.arange(5))


def test_book_spelling_under_the_tvm_alias():
    """`python -m tvm.exec.rpc_server --host ... --port=...` through kiln.as_tvm."""
    sp, port = start_server_process("-m", "kiln.as_tvm", "-m", "tvm.exec.rpc_server",
                                    "--host", "127.0.0.1", "--port=0")
    try:
        with rpc.connect("127.0.0.1", port, timeout=TIMEOUT) as remote:
            assert remote.listdir() == []
    finally:
        assert sp.stop() == 0  # SIGTERM ends the server cleanly


def test_busy_port_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        sp = ServerProcess("-m", "kiln.exec.rpc_server", "--host", "127.0.0.1",
                           "--port", str(port))
        line = sp.wait_for("cannot bind")
        assert f"127.0.0.1:{port}" in line
        assert sp.proc.wait(timeout=TIMEOUT) == 1


def test_port_range_takes_the_next_free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        try:
            srv = rpc.Server("127.0.0.1", port, port + 20, silent=True)
        except Exception as e:  # every port of the range taken: unlikely, not a failure
            pytest.skip(f"no free port near {port}: {e}")
        with srv:
            assert port < srv.port < port + 20


def test_stop_ends_open_sessions(server):
    remote = rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT)
    remote.listdir()
    server.stop()
    assert server.num_sessions == 0
    with pytest.raises(rpc.RPCError, match="lost|closed"):
        remote.listdir()
