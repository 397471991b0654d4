"""A Python worker in a child process that may crash or hang without harming its parent.

``Worker.call("pkg.module", "function", args, timeout)`` runs ``pkg.module.function(*args)``
in a child interpreter (started fresh, not forked, so it owns its own OpenMP threads) and
returns ``("ok", value)``, ``("error", traceback_text)``, ``("timeout", None)`` (the child is
killed) or ``("crash", exit_status)`` (the child died, e.g. by SIGSEGV). A dead child is
replaced by a fresh one on the next call; startup (with the ``preload`` imports) is not
counted in ``timeout``.

The child speaks length-prefixed pickles over its original stdout; anything the code it
runs prints goes to stderr, so it cannot corrupt the protocol.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

__all__ = ["Worker", "describe_exit"]

_HEADER = struct.Struct("<Q")
_READY = b"kiln-worker-ready"


def describe_exit(status: int | None) -> str:
    """``killed by SIGSEGV`` or ``exit status 3``."""
    if status is None:
        return "unknown exit status"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


class _Timeout(Exception):
    pass


class _Closed(Exception):
    pass


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise _Timeout
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise _Closed
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_frame(fd: int, payload: bytes) -> None:
    data = _HEADER.pack(len(payload)) + payload
    while data:
        data = data[os.write(fd, data):]


def _read_frame(fd: int, deadline: float | None) -> bytes:
    (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    return _read_exact(fd, n, deadline)


class Worker:
    """One child interpreter, started on first use and restarted after a crash or kill."""

    def __init__(self, startup_timeout: float = 120.0, env: dict[str, str] | None = None,
                 preload: tuple[str, ...] = ()):
        self.startup_timeout = startup_timeout
        self.preload = tuple(preload)  # modules imported before the child says it is ready
        self.env = env
        self._proc: subprocess.Popen | None = None

    def _start(self) -> None:
        root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = os.pathsep.join(
            [root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from kiln.autotvm.measure.worker import serve; serve()",
             *self.preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        try:
            msg = _read_frame(self._proc.stdout.fileno(),
                              time.monotonic() + self.startup_timeout)
        except (_Timeout, _Closed):
            status = self.kill()
            raise RuntimeError(f"the measurement worker process did not start "
                               f"({describe_exit(status)})") from None
        if msg != _READY:
            self.kill()
            raise RuntimeError("the measurement worker process sent an unexpected greeting")

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def call(self, module: str, func: str, args: tuple = (), timeout: float | None = None
             ) -> tuple[str, Any]:
        if not self.alive:
            self.close()
            self._start()
        proc = self._proc
        try:
            _write_frame(proc.stdin.fileno(), pickle.dumps((module, func, args)))
        except BrokenPipeError:
            return "crash", self.kill()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            status, value = pickle.loads(_read_frame(proc.stdout.fileno(), deadline))
        except _Timeout:
            self.kill()
            return "timeout", None
        except _Closed:
            return "crash", self.kill()
        return status, value

    def kill(self) -> int | None:
        """Kill the child (if alive) and return its exit status."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        status = proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        return status

    def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()  # the child exits at end of input
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def __del__(self):
        try:
            self.kill()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def serve() -> None:
    """The child's loop: answer calls until stdin closes."""
    out_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints of the code we run go to stderr
    sys.stdout = sys.stderr
    in_fd = sys.stdin.fileno()
    for name in sys.argv[1:]:
        importlib.import_module(name)
    _write_frame(out_fd, _READY)
    while True:
        try:
            module, func, args = pickle.loads(_read_frame(in_fd, None))
        except _Closed:
            return
        try:
            fn = getattr(importlib.import_module(module), func)
            reply = ("ok", fn(*args))
        except BaseException:  # noqa: BLE001 - every error is reported to the parent
            reply = ("error", traceback.format_exc())
        try:
            payload = pickle.dumps(reply)
        except Exception:  # noqa: BLE001
            payload = pickle.dumps(("error", "the result could not be pickled:\n"
                                    + traceback.format_exc()))
        _write_frame(out_fd, payload)


if __name__ == "__main__":
    serve()
