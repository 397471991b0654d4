"""The tracker as programs: ``rpc_tracker``, ``rpc_server --tracker --key`` and
``query_rpc_tracker``, and the refusal to listen on the network without a key."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from kiln import rpc

from .conftest import ROOT, TIMEOUT, ServerProcess, start_server_process


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env)


@pytest.mark.slow
def test_tracker_server_and_query_programs():
    tracker, tport = start_server_process("-m", "kiln.as_tvm", "-m", "tvm.exec.rpc_tracker",
                                          "--port", "0")
    server = None
    try:
        assert "INFO:RPCTracker:bind to 127.0.0.1:" in tracker.log[-1]
        server, _ = start_server_process("-m", "kiln.exec.rpc_server", "--port", "0",
                                         "--tracker", f"127.0.0.1:{tport}", "--key", "cpu")
        server.wait_for("registered with the tracker")
        out = _run("-m", "kiln.exec.query_rpc_tracker", "--port", str(tport))
        assert out.returncode == 0, out.stderr
        assert f"Tracker address 127.0.0.1:{tport}" in out.stdout
        assert "server:cpu" in out.stdout and "Queue Status" in out.stdout
        row = next(line for line in out.stdout.splitlines() if line.startswith("cpu "))
        assert row.split() == ["cpu", "1", "1", "0"]
        with rpc.connect_tracker("127.0.0.1", tport).request("cpu") as remote:
            a = remote.array(np.arange(4, dtype="int32"), remote.cpu())
            np.testing.assert_array_equal(a.numpy(), np.arange(4))
    finally:
        if server is not None:
            assert server.stop() == 0
        assert tracker.stop() == 0


@pytest.mark.slow
def test_network_address_without_a_key_is_refused_or_warned():
    env = {k: v for k, v in os.environ.items() if k != "KILN_RPC_KEY"}
    out = _run("-m", "kiln.exec.rpc_server", "--host", "0.0.0.0", "--port", "0", env=env)
    assert out.returncode == 1 and "--insecure" in out.stderr
    sp = ServerProcess("-m", "kiln.exec.rpc_tracker", "--host", "0.0.0.0", "--port", "0",
                       "--insecure")
    try:
        assert "remote code execution" in sp.wait_for("WITHOUT authentication")
    finally:
        sp.stop()
