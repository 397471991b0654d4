"""Fuzzing the server and the tracker: well over 10,000 random and mutated messages, after
which both still serve and their resident memory has not grown without bound."""

from __future__ import annotations

import json
import random
import socket
import struct

import numpy as np
import pytest

from kiln import rpc
from kiln.rpc.protocol import MAGIC, VERSION, ProtocolError, recv_message

from .conftest import TIMEOUT, start_server_process

SESSION_OPS = ["upload", "download", "remove", "listdir", "load_module", "get_source", "call",
               "has_function", "time_evaluator", "nd_empty", "nd_write", "nd_read", "nd_copy",
               "free", "dev_exist", "dev_sync", "dev_attr", "graph_create", "graph_set_input",
               "graph_run", "graph_get_output", "graph_get_input", "graph_benchmark", "hello",
               "__init__", "_path", ""]
TRACKER_OPS = ["summary", "ping", "put", "register", "request", "assigned", "nope", ""]
FIELDS = ["name", "mod", "func", "args", "nd", "dst", "src", "dev", "shape", "dtype", "number",
          "repeat", "min_repeat_ms", "index", "key", "g", "free", "port", "host", "match_key",
          "priority", "session_timeout", "graph_json", "fmt"]


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return rng.randint(-5, 1000)
    if kind == 1:
        return rng.choice([0.5, -1.0, 1e300, float("nan")])
    if kind == 2:
        return rng.choice(["", "../../etc/passwd", "/tmp/x", "a.so", "float32", "x" * 300,
                           "cpu", "\x00"])
    if kind == 3:
        return None
    if kind == 4:
        return rng.choice([True, False])
    if kind == 5:
        return [rng.randint(0, 8) for _ in range(rng.randrange(4))]
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 7:
        return {rng.choice(FIELDS): _value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return [[1, 0], {"nd": rng.randint(0, 5)}, {"i": "x"}, {"f": None}]


def _message(rng: random.Random, ops: list[str], mutate: bool = True) -> bytes:
    """A framed message: random op and fields, random blobs; with ``mutate``, then
    (sometimes) flipped bytes, a lying length or a truncation."""
    header = {rng.choice(FIELDS): _value(rng) for _ in range(rng.randrange(5))}
    header["op"] = rng.choice(ops)
    blobs = [bytes(rng.randrange(256) for _ in range(rng.randrange(32)))
             for _ in range(rng.randrange(3))]
    header["blobs"] = [len(b) for b in blobs]
    text = json.dumps(header).encode()
    data = bytearray(struct.pack("!4sII", MAGIC, VERSION, len(text)) + text + b"".join(blobs))
    mutation = rng.randrange(6) if mutate else 0
    if mutation == 1:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif mutation == 2:  # a lying length
        data[8:12] = struct.pack("!I", rng.choice([0, 1, 1 << 31, 0xFFFFFFFF,
                                                   len(text) + 5]))
    elif mutation == 3:  # truncated
        data = data[:rng.randrange(len(data))]
    return bytes(data)


def _send(sock: socket.socket, payload: bytes) -> bool:
    """Send ``payload`` and drain what came back without waiting; False once the peer
    closed the connection (then the fuzzer opens a new one)."""
    try:
        sock.settimeout(TIMEOUT)
        sock.sendall(payload)
        sock.settimeout(0)
        while sock.recv(1 << 16):
            pass
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def _ask(sock: socket.socket, payload: bytes) -> bool:
    """Send a well-framed request and wait for the reply; False when none came."""
    try:
        sock.sendall(payload)
        sock.settimeout(TIMEOUT)
        recv_message(sock)
        return True
    except (OSError, ProtocolError):
        return False


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _greet(port: int, rng: random.Random) -> socket.socket:
    """A connection past the greeting (a mutated greeting one time in four)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    if rng.randrange(4) == 0:
        _send(sock, _message(rng, ["greet"]))
        return sock
    text = json.dumps({"op": "greet", "blobs": []}).encode()
    sock.sendall(struct.pack("!4sII", MAGIC, VERSION, len(text)) + text)
    sock.settimeout(TIMEOUT)
    sock.recv(1 << 16)
    return sock


@pytest.mark.slow
def test_fuzz_server_and_tracker():
    rng = random.Random(0)
    tracker, tport = start_server_process("-m", "kiln.exec.rpc_tracker", "--port", "0")
    server, sport = start_server_process("-m", "kiln.exec.rpc_server", "--port", "0",
                                         "--max-upload-mb", "1")
    sent = {"tracker": 0, "server": 0, "session": 0}
    try:
        rss0 = {"tracker": _rss_kib(tracker.proc.pid), "server": _rss_kib(server.proc.pid)}
        for target, port, n in [("tracker", tport, 5000), ("server", sport, 3000)]:
            while sent[target] < n:
                with _greet(port, rng) as sock:
                    sent[target] += 1
                    while sent[target] < n:
                        sent[target] += 1
                        if not _send(sock, _message(rng, TRACKER_OPS if target == "tracker"
                                                    else ["hello"] + SESSION_OPS)):
                            break
        while sent["session"] < 2500:  # inside sessions: every operation with random fields
            with rpc.connect("127.0.0.1", sport, timeout=TIMEOUT) as remote:
                sock = remote._transport._sock
                while sent["session"] < 2500:
                    sent["session"] += 1
                    if not _ask(sock, _message(rng, SESSION_OPS, mutate=False)):
                        break
        # both still serve, and memory stayed bounded
        assert rpc.connect_tracker("127.0.0.1", tport).summary()["server_info"] == []
        with rpc.connect("127.0.0.1", sport, timeout=TIMEOUT) as remote:
            a = remote.array(np.arange(3, dtype="int32"), remote.cpu())
            assert a.numpy().tolist() == [0, 1, 2]
        rss1 = {"tracker": _rss_kib(tracker.proc.pid), "server": _rss_kib(server.proc.pid)}
        print(f"fuzz: {sum(sent.values())} messages {sent}; resident KiB before {rss0} "
              f"after {rss1}")
        for k in rss0:
            assert rss1[k] < rss0[k] + 64 * 1024, (k, rss0[k], rss1[k])
    finally:
        assert server.stop() == 0
        assert tracker.stop() == 0
    assert sum(sent.values()) >= 10_000
