"""Secure by default: localhost binding, the key check, limits, and sessions that cannot
outlive their client, see each other's memory or leave anything behind."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import numpy as np
import pytest

import kiln
from kiln import rpc
from kiln.rpc.auth import dial
from kiln.rpc.protocol import recv_message, send_message

from .conftest import TIMEOUT

KEY = "correct horse battery staple"


def _until(cond, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def keyed_server(monkeypatch):
    monkeypatch.delenv("KILN_RPC_KEY", raising=False)
    with rpc.Server("127.0.0.1", 0, silent=True, auth_key=KEY) as s:
        yield s


def test_a_network_address_needs_a_key_or_insecure(monkeypatch, caplog):
    monkeypatch.delenv("KILN_RPC_KEY", raising=False)
    with pytest.raises(kiln.TVMError, match="without authentication"):
        rpc.Server("0.0.0.0", 0, silent=True)
    with pytest.raises(kiln.TVMError, match="without authentication"):
        rpc.Tracker("0.0.0.0", 0, silent=True)
    with caplog.at_level(logging.WARNING):
        rpc.Server("0.0.0.0", 0, silent=True, insecure=True).stop()
    assert "remote code execution" in caplog.text
    rpc.Server("0.0.0.0", 0, silent=True, auth_key=KEY).stop()
    monkeypatch.setenv("KILN_RPC_KEY", KEY)
    rpc.Tracker("0.0.0.0", 0, silent=True).stop()


def test_no_key_and_a_wrong_key_are_refused_before_any_upload(keyed_server, tmp_path):
    with pytest.raises(rpc.RPCError, match="requires an authentication key"):
        rpc.connect("127.0.0.1", keyed_server.port, timeout=TIMEOUT)
    with pytest.raises(rpc.RPCError, match="refused the authentication key"):
        rpc.connect("127.0.0.1", keyed_server.port, timeout=TIMEOUT, auth_key="guess")
    # a raw peer that skips the answer and uploads at once is cut off unread
    sock, _ = socket.create_connection(("127.0.0.1", keyed_server.port), TIMEOUT), None
    with sock:
        send_message(sock, {"op": "greet"})
        greeting, _ = recv_message(sock)
        assert greeting["auth"] == "hmac-sha256" and len(greeting["nonce"]) == 64
        send_message(sock, {"op": "upload", "name": "x.so"}, [b"\x7fELF" * 10])
        try:  # an error reply, unless the reset of the unread upload overtook it
            reply, _ = recv_message(sock)
            assert reply["status"] == "error" and "authentication failed" in reply["message"]
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass
    assert keyed_server.num_sessions == 0
    with rpc.connect("127.0.0.1", keyed_server.port, timeout=TIMEOUT, auth_key=KEY) as r:
        r.upload(b"ok", "ok.txt")
        assert r.listdir() == ["ok.txt"]


def test_the_key_from_the_environment(keyed_server, monkeypatch):
    monkeypatch.setenv("KILN_RPC_KEY", KEY)
    with rpc.connect("127.0.0.1", keyed_server.port, timeout=TIMEOUT) as r:
        assert r.listdir() == []


def test_oversize_and_traversal_are_refused_and_the_server_goes_on(tmp_path):
    with rpc.Server("127.0.0.1", 0, silent=True, max_upload=1000) as server:
        with rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT) as r:
            with pytest.raises(rpc.RemoteError, match="over the limit of 1000 bytes"):
                r.upload(b"x" * 2000, "big.bin")
        deadline = time.monotonic() + TIMEOUT  # the first session ends after its client
        while server.sessions() and time.monotonic() < deadline:
            time.sleep(0.01)
        with rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT) as r:
            (_, workspace), = server.sessions()
            os.symlink(tmp_path, os.path.join(workspace, "out"))
            with pytest.raises(rpc.RemoteError, match="through a link"):
                r.upload(b"x", "out/escaped.txt")
            with pytest.raises(kiln.TVMError, match="relative name"):
                r.upload(b"x", "../escaped.txt")
            r.upload(b"x" * 1000, "fits.bin")
            assert r.listdir() == ["fits.bin"]
    assert not os.listdir(tmp_path)


def test_sessions_are_processes_that_die_with_their_client(server, vadd_so):
    """A time_evaluator with number=10**9 stops when its client goes; nd.empty is zeroed;
    loaded libraries and workspaces go with the session."""
    with open("/proc/self/maps") as f:
        maps_before = len(f.readlines())
    r = rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT)
    r.upload(vadd_so)
    f = r.load_module("vector-add.so")
    dev = r.cpu()
    a = kiln.nd.array(np.full(100, 7, "float32"), dev)
    c = kiln.nd.empty((100,), "float32", dev)
    (pid, workspace), = server.sessions()
    busy = threading.Thread(target=lambda: pytest.raises(
        rpc.RPCError, f.time_evaluator(f.entry_name, dev, number=10**9), a, a, c),
        daemon=True)
    busy.start()
    time.sleep(0.3)
    r._transport.close()  # the client vanishes mid-call
    _until(lambda: not _alive(pid), "the busy session's process to be killed")
    _until(lambda: server.num_sessions == 0, "the session to end")
    assert not os.path.exists(workspace)
    busy.join(TIMEOUT)
    with rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT) as r2:
        e = kiln.nd.empty((100,), "float32", r2.cpu())
        np.testing.assert_array_equal(e.numpy(), np.zeros(100, "float32"))
    with open("/proc/self/maps") as f:
        assert len(f.readlines()) < maps_before + 20  # the libraries never loaded here


def test_a_hung_session_times_out_and_the_server_serves_the_next(server, vadd_so):
    r = rpc.connect("127.0.0.1", server.port, session_timeout=1.0, timeout=TIMEOUT)
    r.upload(vadd_so)
    f = r.load_module("vector-add.so")
    a = kiln.nd.array(np.ones(100, "float32"), r.cpu())
    c = kiln.nd.empty((100,), "float32", r.cpu())
    (pid, _), = server.sessions()
    with pytest.raises(rpc.RPCError, match="lost"):
        f.time_evaluator(f.entry_name, r.cpu(), number=10**9)(a, a, c)
    _until(lambda: not _alive(pid), "the hung session's process to be killed")
    with rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT) as r2:
        assert r2.listdir() == []


def test_a_silent_connection_is_dropped():
    with rpc.Server("127.0.0.1", 0, silent=True, idle_timeout=0.3) as server:
        sock, _ = dial("127.0.0.1", server.port, timeout=TIMEOUT, auth_key=None)
        with sock:
            send_message(sock, {"op": "hello"})
            assert recv_message(sock)[0]["status"] == "ok"
            assert sock.recv(1) == b""  # nothing said for 0.3 s: the server hung up
        _until(lambda: server.num_sessions == 0, "the idle session to end")


def test_stop_kills_sessions_and_deletes_their_workspaces():
    server = rpc.Server("127.0.0.1", 0, silent=True)
    r = rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT)
    r.upload(b"data", "file.txt")
    (pid, workspace), = server.sessions()
    server.stop()
    assert not os.path.exists(workspace)
    assert not _alive(pid)
    r.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1: (certfile, keyfile)."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = str(d / "cert.pem"), str(d / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True,
                   timeout=TIMEOUT)
    return cert, key


def test_tls_with_a_key(certificate, monkeypatch):
    import ssl

    from kiln.rpc.auth import server_tls_context

    monkeypatch.delenv("KILN_RPC_KEY", raising=False)
    cert, key = certificate
    client_ctx = ssl.create_default_context(cafile=cert)
    with rpc.Server("127.0.0.1", 0, silent=True, auth_key=KEY,
                    ssl_context=server_tls_context(cert, key)) as server:
        with rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT, auth_key=KEY,
                         ssl_context=client_ctx) as r:
            a = r.array(np.arange(6, dtype="float32"), r.cpu())
            np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype="float32"))
        with pytest.raises(rpc.RPCError):  # plain TCP to a TLS server
            rpc.connect("127.0.0.1", server.port, timeout=2, auth_key=KEY)
