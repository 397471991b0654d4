"""Fixtures for the RPC tests: vector-add libraries, in-process servers and a server
started as ``python -m kiln.exec.rpc_server`` in a subprocess. Every socket has a timeout,
so a hung server fails a test instead of hanging the suite."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kiln
from kiln import rpc, te

N = 100
#: seconds any client waits for a reply before the test fails
TIMEOUT = 20.0
ROOT = Path(__file__).resolve().parents[2]


def vector_add(n: int = N, target: str = "llvm"):
    a = te.placeholder((n,), name="a")
    b = te.placeholder((n,), name="b")
    c = te.compute(a.shape, lambda i: a[i] + b[i], name="c")
    s = te.create_schedule(c.op)
    return kiln.build(s, [a, b, c], target, name="vector_add")


@pytest.fixture(scope="session")
def vadd_tar(tmp_path_factory) -> str:
    """The book's §1.4 library: vector add built for the host triple, exported as a tar."""
    path = tmp_path_factory.mktemp("rpc-lib") / "vector-add.tar"
    vector_add(target="llvm -target=x86_64-pc-linux-gnu"
               if kiln.target.host_triple().startswith("x86_64") else "llvm"
               ).export_library(str(path))
    return str(path)


@pytest.fixture(scope="session")
def vadd_so(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("rpc-lib") / "vector-add.so"
    vector_add().export_library(str(path))
    return str(path)


@pytest.fixture
def server():
    """An in-process server on a free localhost port."""
    with rpc.Server("127.0.0.1", 0, silent=True) as s:
        yield s


@pytest.fixture
def remote(server):
    with rpc.connect("127.0.0.1", server.port, timeout=TIMEOUT) as r:
        yield r


class ServerProcess:
    """``python -m <module> --host 127.0.0.1 --port 0`` with its stderr read by a thread."""

    def __init__(self, *cmd: str) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        self.proc = subprocess.Popen([sys.executable, *cmd], stderr=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            self.log.append(line)
            if text in line:
                return line
        raise AssertionError(f"server did not log {text!r}; log: {self.log}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start_server_process(*module_args: str) -> tuple[ServerProcess, int]:
    sp = ServerProcess(*module_args)
    line = sp.wait_for("bind to")
    return sp, int(line.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def server_process():
    """(process, port) of ``python -m kiln.exec.rpc_server`` on a free port."""
    sp, port = start_server_process("-m", "kiln.exec.rpc_server", "--host", "127.0.0.1",
                                    "--port", "0")
    yield sp, port
    sp.stop()
