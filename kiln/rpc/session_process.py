"""One RPC session in a child process of its own.

The server never runs a client's code in its own process. Each session gets a fresh child
interpreter (:func:`child_main`, in a new process group) holding the
session's :class:`~kiln.rpc.server.SessionHandler`, and talks to it over a socket pair. The
server's thread for the session :func:`relay` s each request of the client to the child and
the reply back, and meanwhile watches for the ends of a session:

- the client hangs up (even while the child is busy in a kernel that never returns, or in a
  ``time_evaluator`` with ``number=10**9``),
- the session's deadline passes (``session_timeout``), or the client stays silent longer
  than the idle timeout (a half-open connection),
- the child dies (a kernel crashed it).

Then :meth:`SessionProcess.kill` kills the child's whole process group and the server
deletes the workspace directory. What one session loaded, allocated or left running dies
with its process, so sessions cannot see each other's memory, and 300 sessions leave the
server as they found it.

A fresh interpreter takes a fraction of a second to import the runtime, so a server keeps
one spare child started ahead (:meth:`SessionProcess.start` is cheap; the child imports
while the server waits for a client).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .protocol import Limits, ProtocolError, peer_closed, recv_message, send_message

__all__ = ["SessionProcess", "relay", "child_main"]

#: seconds between two looks at a busy session's client and deadline
_POLL = 0.2


class SessionProcess:
    """A child interpreter waiting to serve one session (see the module doc)."""

    def __init__(self) -> None:
        self.sock, child_end = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from kiln.rpc.session_process import "
                 "child_main; child_main(int(sys.argv[1]))", str(child_end.fileno())],
                pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)
        finally:
            child_end.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def open(self, workspace: str, peer: str, timeout: float = 60.0) -> None:
        """Give the child its session (its workspace directory and the client's address)
        and wait until it is ready; raises OSError or ProtocolError when it is not."""
        send_message(self.sock, {"op": "open", "workspace": workspace, "peer": peer})
        self.sock.settimeout(timeout)
        recv_message(self.sock)
        self.sock.settimeout(None)

    def kill(self) -> None:
        """Kill the child and everything it started (its process group), and reap it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
        self.proc.wait()
        self.sock.close()


def _await_reply(client: socket.socket, child: SessionProcess, deadline: float,
                 ) -> tuple[dict[str, Any], list[Any]] | str:
    """The child's reply, or why the session ends instead (the client left, the deadline
    passed, the child died, or the client spoke out of turn)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "session timeout"
        ready, _, _ = select.select([child.sock, client], [], [], min(_POLL, left))
        if child.sock in ready:
            try:
                return recv_message(child.sock)
            except (OSError, ProtocolError):
                return "the session process died"
        if client in ready:
            return ("the client went away" if peer_closed(client)
                    else "protocol error: the client spoke before the reply")


def relay(client: socket.socket, child: SessionProcess, deadline: float,
          idle_timeout: float, limits: Limits) -> str:
    """Serve a session: pass the client's requests (each checked against ``limits``) to
    ``child`` and its replies back until the session ends; returns why it ended."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "session timeout"
        client.settimeout(min(idle_timeout, left))
        try:
            header, blobs = recv_message(client, limits)
        except TimeoutError:
            return "session timeout" if idle_timeout >= left else "idle timeout"
        except ProtocolError as e:
            _try_send(client, {"status": "error", "etype": "ProtocolError",
                               "message": f"refused: {e}"})
            return f"protocol error: {e}"
        except OSError:
            return "closed by the client"
        try:
            send_message(child.sock, header, blobs)
        except OSError:
            return "the session process died"
        del blobs
        reply = _await_reply(client, child, deadline)
        if isinstance(reply, str):
            return reply
        client.settimeout(idle_timeout)
        if not _try_send(client, *reply):
            return "closed by the client"


def _try_send(sock: socket.socket, header: dict[str, Any], blobs: list[Any] = ()) -> bool:
    try:
        send_message(sock, header, blobs)
        return True
    except OSError:
        return False


def child_main(fd: int) -> None:
    """The child: wait for its session, then answer requests until the server hangs up."""
    from .server import SessionHandler

    sock = socket.socket(fileno=fd)
    try:
        opening, _ = recv_message(sock)
    except (OSError, ProtocolError):
        return  # a spare the server never used
    handler = SessionHandler(str(opening["peer"]), str(opening["workspace"]))
    send_message(sock, {"status": "ok"})
    try:
        while True:
            try:
                header, blobs = recv_message(sock)
            except (OSError, ProtocolError):
                return
            reply, out = handler.handle(header, blobs)
            try:
                send_message(sock, reply, out)
            except (TypeError, ValueError) as e:  # a reply JSON cannot carry
                send_message(sock, {"status": "error", "etype": type(e).__name__,
                                    "message": f"the reply cannot be sent: {e}"})
    finally:
        handler.close()

