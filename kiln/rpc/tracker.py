"""The RPC tracker: hands the RPC servers of a device key to the clients that ask for one.

``python -m kiln.exec.rpc_tracker`` (or ``Tracker(host, port)``) runs it; servers register
with ``python -m kiln.exec.rpc_server --tracker host:port --key NAME``; clients ask with
``rpc.connect_tracker(host, port).request(NAME, priority=...)``. The semantics are classic
TVM's:

- every device key has one queue of requests: higher ``priority`` first, first come first
  served within a priority; free servers are handed out in the order they became free;
- a server offers itself with a one-time *match key* that the tracker gives to the client it
  chose; the server accepts only a client presenting it, and offers itself again (a new
  match key) when that session ends, or when the chosen client does not come in time;
- a server whose registration connection closes (it stopped, crashed or lost the network)
  is dropped with its offers; a client that disconnects while waiting leaves the queue.

Messages are the RPC wire format (:mod:`kiln.rpc.protocol`) with small limits
(:data:`LIMITS`); the greeting and key check of :mod:`kiln.rpc.auth` come first. A client
connection may send ``request``, ``summary`` and ``ping`` in any number; a server sends
``register`` first and then ``put`` offers, and receives ``assigned`` notices.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import select
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .listener import Listener
from .protocol import Limits, ProtocolError, recv_message, send_message

__all__ = ["Tracker", "LIMITS"]

logger = logging.getLogger("RPCTracker")

#: tracker messages are a few hundred bytes of JSON and never carry data
LIMITS = Limits(header=64 << 10, blobs=0)
#: seconds a connection may stay silent between two messages
IDLE_TIMEOUT = 3600.0


@dataclass(eq=False)
class _ServerEntry:
    """A registered server: where clients reach it and the link it registered on."""

    key: str
    host: str
    port: int
    conn: socket.socket
    send_lock: threading.Lock = field(default_factory=threading.Lock)

    def notify(self, header: dict[str, Any]) -> None:
        with self.send_lock:
            try:
                send_message(self.conn, header)
            except OSError:
                pass  # its handler thread notices the dead link and drops the server


@dataclass(eq=False)
class _Request:
    """A client waiting for a server of ``key``."""

    key: str
    done: threading.Event = field(default_factory=threading.Event)
    match: tuple[_ServerEntry, str] | None = None


@dataclass
class _Queue:
    """One device key: free offers (server, match key), oldest first, and waiting requests
    as a heap of (-priority, arrival, request)."""

    free: deque[tuple[_ServerEntry, str]] = field(default_factory=deque)
    pending: list[tuple[int, int, _Request]] = field(default_factory=list)


class Tracker(Listener):
    """An RPC tracker on ``host:port`` (``port=0``: any free port; ``port_end``: the first
    free one of ``[port, port_end)``), serving in background threads until :meth:`stop`.
    ``auth_key``, ``insecure`` and ``ssl_context`` are those of :class:`kiln.rpc.Server`."""

    role = "tracker"

    def __init__(self, host: str = "127.0.0.1", port: int = 9190, port_end: int | None = None,
                 *, silent: bool = False, auth_key: bytes | str | None = None,
                 insecure: bool = False, ssl_context: Any = None,
                 max_connections: int = 1024) -> None:
        super().__init__(host, port, port_end, logger=logger, silent=silent,
                         auth_key=auth_key, insecure=insecure, ssl_context=ssl_context,
                         max_connections=max_connections)
        self._state = threading.Lock()
        self._queues: dict[str, _Queue] = {}
        self._servers: list[_ServerEntry] = []
        self._arrival = itertools.count()
        self.start()

    # ---- scheduling (called with self._state held) --------------------------------------
    def _queue(self, key: str) -> _Queue:
        return self._queues.setdefault(key, _Queue())

    def _schedule(self, key: str) -> None:
        """Give free servers of ``key`` to its waiting requests, best request first."""
        q = self._queue(key)
        while q.free and q.pending:
            _, _, req = heapq.heappop(q.pending)
            req.match = q.free.popleft()
            req.done.set()

    def _cancel(self, req: _Request) -> None:
        q = self._queue(req.key)
        q.pending = [item for item in q.pending if item[2] is not req]
        heapq.heapify(q.pending)
        self._prune(req.key)

    def _prune(self, key: str) -> None:
        """Forget an empty queue (keys come from clients: they must not pile up)."""
        q = self._queues.get(key)
        if q is not None and not q.free and not q.pending:
            del self._queues[key]

    # ---- connections -------------------------------------------------------------------
    def handle(self, conn: socket.socket, peer: str) -> None:
        conn.settimeout(IDLE_TIMEOUT)
        while not self.stopping:
            try:
                header, _ = recv_message(conn, LIMITS)
            except ProtocolError as e:
                logger.info("%s: refused: %s", peer, e)
                return
            except OSError:
                return
            op = header.get("op")
            if op == "register":
                self._serve_server(conn, peer, header)
                return
            if op == "request":
                reply = self._request(conn, header)
                if reply is None:
                    return
            elif op == "summary":
                reply = self.summary()
            elif op == "ping":
                reply = {}
            else:
                reply = {"status": "error", "message": f"unknown tracker operation {op!r}"}
            send_message(conn, {"status": "ok", **reply})

    def _request(self, conn: socket.socket, header: dict[str, Any]) -> dict[str, Any] | None:
        """Queue a request and wait for its server; None when the client left meanwhile."""
        key, priority = header.get("key"), header.get("priority", 1)
        if not isinstance(key, str) or not isinstance(priority, int):
            return {"status": "error", "message": "request needs a key (str) and an int "
                                                  "priority"}
        req = _Request(key)
        with self._state:
            heapq.heappush(self._queue(key).pending, (-priority, next(self._arrival), req))
            self._schedule(key)
        while not req.done.wait(0.2):
            # the client waits in silence: hanging up, or speaking, withdraws the request
            if self.stopping or select.select([conn], [], [], 0)[0]:
                with self._state:
                    if req.match is None:
                        self._cancel(req)
                        return None
                break  # matched meanwhile: hand it over anyway
        if req.match is None:  # the tracker is stopping
            return None
        with self._state:
            self._prune(key)
        entry, match_key = req.match
        entry.notify({"op": "assigned", "match_key": match_key})
        return {"host": entry.host, "port": entry.port, "match_key": match_key}

    def _serve_server(self, conn: socket.socket, peer: str, header: dict[str, Any]) -> None:
        """A server's registration link: take its offers until the link closes."""
        key, port, host = header.get("key"), header.get("port"), header.get("host")
        if not isinstance(key, str) or not key or not isinstance(port, int):
            send_message(conn, {"status": "error", "message": "register needs key and port"})
            return
        entry = _ServerEntry(key, host if isinstance(host, str) and host
                             else peer.rsplit(":", 1)[0], port, conn)
        with self._state:
            self._servers.append(entry)
        entry.notify({"status": "ok"})
        logger.info("server %s:%d registered for key %r", entry.host, port, key)
        try:
            while not self.stopping:
                msg, _ = recv_message(conn, LIMITS)
                if msg.get("op") == "put" and isinstance(msg.get("match_key"), str):
                    with self._state:
                        q = self._queue(key)
                        q.free = deque(o for o in q.free if o[0] is not entry)  # one offer each
                        q.free.append((entry, msg["match_key"]))
                        self._schedule(key)
        except (OSError, ProtocolError):
            pass
        finally:
            with self._state:
                self._servers.remove(entry)
                q = self._queue(key)
                q.free = deque(o for o in q.free if o[0] is not entry)
                self._prune(key)
            logger.info("server %s:%d (key %r) is gone", entry.host, port, key)

    # ---- status ------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """``{"queue_info": {key: {"free": n, "pending": n}}, "server_info": [{"addr":
        [host, port], "key": "server:KEY"}]}``, TVM's shape."""
        with self._state:
            queues = {k: {"free": len(q.free), "pending": len(q.pending)}
                      for k, q in self._queues.items()}
            for s in self._servers:
                queues.setdefault(s.key, {"free": 0, "pending": 0})
            servers = [{"addr": [s.host, s.port], "key": f"server:{s.key}"}
                       for s in self._servers]
        return {"queue_info": queues, "server_info": servers}

    def on_stop(self) -> None:
        with self._state:
            requests = [r for q in self._queues.values() for _, _, r in q.pending]
        for r in requests:
            r.done.set()  # waiting handlers notice stopping and leave

