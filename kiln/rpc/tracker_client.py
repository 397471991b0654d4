"""The two kinds of tracker clients: users asking for a server, servers offering themselves.

``rpc.connect_tracker(host, port)`` gives a :class:`TrackerSession`; its
``request(key, priority=, session_timeout=)`` waits for a free server registered under
``key`` and returns an :class:`~kiln.rpc.client.RPCSession` with it. :class:`Registration`
is a server's link to its tracker (see :mod:`kiln.rpc.tracker` for the protocol): it
registers, offers the server with a fresh match key whenever the server is free, and
reconnects when the tracker restarts.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

from .auth import AuthenticationError, dial
from .client import RPCError, RPCSession, connect
from .protocol import ProtocolError, recv_message, send_message
from .tracker import LIMITS

__all__ = ["TrackerSession", "connect_tracker", "Registration"]

logger = logging.getLogger("RPCServer")


class TrackerSession:
    """A client of the tracker at ``host:port`` (made by :func:`connect_tracker`). Each
    call opens its own connection, so threads may share one TrackerSession."""

    def __init__(self, host: str, port: int, *, timeout: float | None = 10.0,
                 auth_key: bytes | str | None = None, ssl_context: Any = None) -> None:
        self.host, self.port = host, int(port)
        self._timeout = timeout
        self._auth_key, self._ssl = auth_key, ssl_context
        self._call({"op": "ping"}, timeout)  # fail now, not at the first request

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def _call(self, header: dict[str, Any], reply_timeout: float | None) -> dict[str, Any]:
        try:
            sock, role = dial(self.host, self.port, timeout=self._timeout,
                              auth_key=self._auth_key, ssl_context=self._ssl)
        except AuthenticationError as e:
            raise RPCError(f"tracker {self.addr}: {e}") from None
        except (OSError, ProtocolError) as e:
            raise RPCError(f"cannot connect to the RPC tracker at {self.addr}: "
                           f"{getattr(e, 'strerror', None) or e} (is `python -m "
                           "kiln.exec.rpc_tracker` running there?)") from None
        with sock:
            if role != "tracker":
                raise RPCError(f"{self.addr} is an RPC {role}, not a tracker: use "
                               f"rpc.connect({self.host!r}, {self.port})")
            try:
                sock.settimeout(reply_timeout)
                send_message(sock, header)
                reply, _ = recv_message(sock, LIMITS)
            except TimeoutError:
                raise RPCError(f"tracker {self.addr} did not answer {header['op']!r} in "
                               "time") from None
            except (OSError, ProtocolError) as e:
                raise RPCError(f"lost the RPC tracker {self.addr}: {e}") from None
        if reply.get("status") != "ok":
            raise RPCError(f"tracker {self.addr}: {reply.get('message')}")
        return reply

    def summary(self) -> dict[str, Any]:
        """``{"queue_info": {key: {"free", "pending"}}, "server_info": [{"addr", "key"}]}``."""
        reply = self._call({"op": "summary"}, self._timeout)
        return {"queue_info": reply["queue_info"], "server_info": reply["server_info"]}

    def text_summary(self) -> str:
        """The summary as the two tables ``query_rpc_tracker`` prints."""
        return format_summary(self.summary())

    def request(self, key: str, priority: int = 1, session_timeout: float = 0,
                max_retry: int = 5, *, timeout: float | None = None) -> RPCSession:
        """A session with a free server of ``key``: waits in the key's queue (higher
        ``priority`` first; ``timeout`` seconds at most, None: as long as it takes), then
        connects; a server that vanished meanwhile costs one of ``max_retry`` tries.
        ``session_timeout`` is passed to the server (0: none)."""
        last = ""
        for _ in range(max(1, max_retry)):
            reply = self._call({"op": "request", "key": str(key), "priority": int(priority)},
                               timeout)
            try:
                return connect(reply["host"], reply["port"], reply["match_key"],
                               session_timeout, self._timeout, auth_key=self._auth_key,
                               ssl_context=self._ssl)
            except RPCError as e:
                last = str(e)
        raise RPCError(f"no server of key {key!r} could be reached in {max_retry} tries "
                       f"through the tracker {self.addr}: {last}")

    def __repr__(self) -> str:
        return f"<TrackerSession {self.addr}>"


def connect_tracker(url: str, port: int, *, timeout: float | None = 10.0,
                    auth_key: bytes | str | None = None,
                    ssl_context: Any = None) -> TrackerSession:
    """Connect to the RPC tracker at ``url:port`` (``python -m kiln.exec.rpc_tracker``).
    ``timeout`` bounds connecting and each answer but a request's wait for a server."""
    return TrackerSession(url, port, timeout=timeout, auth_key=auth_key,
                          ssl_context=ssl_context)


def format_summary(data: dict[str, Any]) -> str:
    """The server list and the queue status table of a tracker summary."""
    servers = sorted(data["server_info"], key=lambda s: (s["key"], s["addr"]))
    total: dict[str, int] = {}
    rule = "-" * 40
    lines = ["Server List", rule, f"{'server-address':<24} key", rule]
    for s in servers:
        lines.append(f"{':'.join(map(str, s['addr'])):<24} {s['key']}")
        key = s["key"].split(":", 1)[1]
        total[key] = total.get(key, 0) + 1
    lines += [rule, "", "Queue Status"]
    queues = data["queue_info"]
    width = max([len("key"), *map(len, queues)])
    title = f"{'key':<{width}}   total  free  pending"
    lines += ["-" * len(title), title, "-" * len(title)]
    for key in sorted(queues):
        q = queues[key]
        lines.append(f"{key:<{width}}   {total.get(key, 0):<5}  {q['free']:<4}  "
                     f"{q['pending']}")
    lines.append("-" * len(title))
    return "\n".join(lines) + "\n"


class Registration:
    """A server's link to its tracker: registered under ``key`` for clients to reach at
    ``port`` (and ``custom_addr`` when the tracker cannot use the address it sees).

    :meth:`offer` makes the server available with a fresh match key (which it returns);
    :meth:`accepts` takes the offer when a client presents its key (the server is then
    busy until it offers again). ``on_assigned(match_key)`` runs when the tracker gave that
    key to a client. The link lives in a daemon thread
    and reconnects every ``retry`` seconds when the tracker is away.
    """

    def __init__(self, tracker: tuple[str, int], key: str, port: int,
                 on_assigned: Callable[[str], None], *, custom_addr: str | None = None,
                 auth_key: bytes | str | None = None, ssl_context: Any = None,
                 retry: float = 1.0) -> None:
        self.tracker = (str(tracker[0]), int(tracker[1]))
        self.key, self.port, self.custom_addr = key, port, custom_addr
        self._on_assigned = on_assigned
        self._auth_key, self._ssl, self._retry = auth_key, ssl_context, retry
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._match_key: str | None = None  # the key offered now; None while busy
        self._stop = threading.Event()
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="kiln-rpc-registration")
        self._thread.start()

    def offer(self) -> str:
        """Offer the server with a fresh match key (the old one is no longer valid)."""
        with self._lock:
            self._match_key = secrets.token_hex(16)
            self._send_locked({"op": "put", "match_key": self._match_key})
            return self._match_key

    def renew(self, match_key: str) -> None:
        """Offer the server again if ``match_key`` is still the unclaimed offer (the client
        the tracker sent with it did not come)."""
        with self._lock:
            stale = self._match_key == match_key
        if stale:
            self.offer()

    def accepts(self, match_key: Any) -> bool:
        """True when ``match_key`` is the one offered now (then the offer is taken)."""
        with self._lock:
            if self._match_key is None or not isinstance(match_key, str) \
                    or not secrets.compare_digest(match_key, self._match_key):
                return False
            self._match_key = None
            return True

    def _send_locked(self, header: dict[str, Any]) -> None:
        if self._sock is not None:
            try:
                send_message(self._sock, header)
            except OSError:
                pass  # the link thread reconnects and offers again

    def _run(self) -> None:
        host, port = self.tracker
        while not self._stop.is_set():
            try:
                sock, role = dial(host, port, timeout=10.0, auth_key=self._auth_key,
                                  ssl_context=self._ssl)
                if role != "tracker":
                    raise ProtocolError(f"{host}:{port} is not an RPC tracker")
                send_message(sock, {"op": "register", "key": self.key, "port": self.port,
                                    "host": self.custom_addr})
                reply, _ = recv_message(sock, LIMITS)
                if reply.get("status") != "ok":
                    raise ProtocolError(str(reply.get("message")))
            except (OSError, ProtocolError) as e:
                logger.warning("cannot register with the tracker %s:%d: %s", host, port, e)
                self._stop.wait(self._retry)
                continue
            sock.settimeout(None)
            with self._lock:
                self._sock = sock
                if self._match_key is not None:
                    self._send_locked({"op": "put", "match_key": self._match_key})
            self.connected.set()
            logger.info("registered with the tracker %s:%d as %r", host, port, self.key)
            self._listen(sock)
            with self._lock:
                self._sock = None
            sock.close()
            self.connected.clear()

    def _listen(self, sock: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                msg, _ = recv_message(sock, LIMITS)
            except (OSError, ProtocolError):
                return
            if msg.get("op") == "assigned" and isinstance(msg.get("match_key"), str):
                self._on_assigned(msg["match_key"])

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._thread.join(5.0)
