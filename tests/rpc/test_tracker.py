"""The RPC tracker: queue order, server death, leaving clients, the status table, and
real servers handed out through it (each session in a child process of its own)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import kiln
from kiln import rpc
from kiln.rpc.tracker_client import Registration

from .conftest import TIMEOUT


def _until(cond, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _queue(tracker: rpc.TrackerSession, key: str) -> dict:
    return tracker.summary()["queue_info"].get(key, {"free": 0, "pending": 0})


@pytest.fixture
def tracker():
    with rpc.Tracker("127.0.0.1", 0, silent=True) as t:
        yield t


@pytest.fixture
def client(tracker):
    return rpc.connect_tracker("127.0.0.1", tracker.port, timeout=TIMEOUT)


class FakeServer:
    """A registration with no server behind it: the test offers it by hand and sees the
    match keys the tracker hands out (requests are raw, so nobody connects)."""

    def __init__(self, tracker: rpc.Tracker, key: str, port: int) -> None:
        self.assigned: list[str] = []
        self.reg = Registration(("127.0.0.1", tracker.port), key, port, self.assigned.append)
        assert self.reg.connected.wait(TIMEOUT)


def _raw_request(client: rpc.TrackerSession, key: str, priority: int) -> dict:
    return client._call({"op": "request", "key": key, "priority": priority}, TIMEOUT)


def test_priority_first_then_first_come_first_served(tracker, client):
    fake = FakeServer(tracker, "dev", 1)
    try:
        fake.reg.offer()
        _raw_request(client, "dev", 1)  # takes the only offer: the others wait
        served: list[str] = []
        threads = []
        for name, prio in [("a", 1), ("b", 5), ("c", 5), ("d", 1), ("e", 3)]:
            t = threading.Thread(target=lambda n=name, p=prio: (
                _raw_request(client, "dev", p), served.append(n)), daemon=True)
            t.start()
            threads.append(t)
            _until(lambda k=len(threads): _queue(client, "dev")["pending"] == k, "queueing")
        for k in range(len(threads)):
            fake.reg.offer()
            _until(lambda k=k: len(served) == k + 1, "a request served")
        assert served == ["b", "c", "e", "a", "d"]
        for t in threads:
            t.join(TIMEOUT)
    finally:
        fake.reg.close()


def test_free_servers_in_order_and_a_dead_server_is_dropped(tracker, client):
    first, second = FakeServer(tracker, "dev", 1), FakeServer(tracker, "dev", 2)
    try:
        first.reg.offer()
        _until(lambda: _queue(client, "dev")["free"] == 1, "the first offer")
        second.reg.offer()
        _until(lambda: _queue(client, "dev")["free"] == 2, "the second offer")
        assert len(client.summary()["server_info"]) == 2
        first.reg.close()  # the server died: its offer is gone with it
        _until(lambda: len(client.summary()["server_info"]) == 1, "the dead server dropped")
        assert _queue(client, "dev")["free"] == 1
        reply = _raw_request(client, "dev", 1)
        assert reply["port"] == 2
        _until(lambda: second.assigned == [reply["match_key"]], "the server told")
    finally:
        first.reg.close()
        second.reg.close()


def test_a_client_that_leaves_leaves_the_queue(tracker, client):
    from kiln.rpc.auth import dial
    from kiln.rpc.protocol import send_message

    sock, _ = dial("127.0.0.1", tracker.port, timeout=TIMEOUT, auth_key=None)
    send_message(sock, {"op": "request", "key": "nobody", "priority": 1})
    _until(lambda: _queue(client, "nobody")["pending"] == 1, "the request queued")
    sock.close()
    _until(lambda: _queue(client, "nobody")["pending"] == 0, "the request withdrawn")


def test_text_summary_is_the_queue_status_table(tracker, client):
    fake = FakeServer(tracker, "rasp3b", 9091)
    try:
        fake.reg.offer()
        _until(lambda: _queue(client, "rasp3b")["free"] == 1, "the offer")
        text = client.text_summary()
    finally:
        fake.reg.close()
    assert "Server List" in text and "127.0.0.1:9091" in text and "server:rasp3b" in text
    row = next(line for line in text.splitlines() if line.startswith("rasp3b"))
    assert row.split() == ["rasp3b", "1", "1", "0"]
    assert "key      total  free  pending" in text


def test_sessions_through_the_tracker(tracker, client, vadd_so):
    with rpc.Server("127.0.0.1", 0, silent=True, tracker_addr=("127.0.0.1", tracker.port),
                    key="cpu") as server:
        _until(lambda: _queue(client, "cpu")["free"] == 1, "the server's offer")
        with client.request("cpu", session_timeout=TIMEOUT) as remote:
            assert _queue(client, "cpu")["free"] == 0
            with pytest.raises(rpc.RPCError, match="handed out by its tracker"):
                rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT)
            remote.upload(vadd_so)
            f = remote.load_module("vector-add.so")
            dev = remote.cpu()
            a = kiln.nd.array(np.arange(100, dtype="float32"), dev)
            c = kiln.nd.empty((100,), "float32", dev)
            f(a, a, c)
            np.testing.assert_array_equal(c.numpy(), 2 * np.arange(100, dtype="float32"))
        _until(lambda: _queue(client, "cpu")["free"] == 1, "the server offered again")


def test_a_client_the_tracker_sent_that_never_comes_loses_its_turn(tracker, client):
    with rpc.Server("127.0.0.1", 0, silent=True, tracker_addr=("127.0.0.1", tracker.port),
                    key="cpu", match_timeout=0.2):
        _until(lambda: _queue(client, "cpu")["free"] == 1, "the server's offer")
        _raw_request(client, "cpu", 1)  # handed out, never used
        _until(lambda: _queue(client, "cpu")["free"] == 1, "the server offered again", 5)


def test_the_tracker_is_not_a_server_and_a_server_is_not_a_tracker(tracker, server):
    with pytest.raises(rpc.RPCError, match="is an RPC tracker, not a server"):
        rpc.connect("127.0.0.1", tracker.port, timeout=TIMEOUT)
    with pytest.raises(rpc.RPCError, match="is an RPC server, not a tracker"):
        rpc.connect_tracker("127.0.0.1", server.port, timeout=TIMEOUT)
    with pytest.raises(kiln.TVMError, match="needs a key"):
        rpc.Server("127.0.0.1", 0, silent=True, tracker_addr=("127.0.0.1", tracker.port))
