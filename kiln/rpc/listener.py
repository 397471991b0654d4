"""What an RPC server and the tracker share: a listening socket that is safe by default.

:class:`Listener` binds ``host:port`` (``127.0.0.1`` unless told otherwise; any other
address needs a key or ``insecure=True``, see :func:`kiln.rpc.auth.check_exposure`), accepts
in a background thread, and gives each connection a thread of its own that wraps it in TLS
(with an ``ssl_context``), runs the greeting and key check (:mod:`kiln.rpc.auth`, within
:data:`~kiln.rpc.auth.HANDSHAKE_TIMEOUT`) and only then calls the subclass's
:meth:`Listener.handle`. At most ``max_connections`` connections are open at once; one
more is closed at once. ``stop()`` closes the socket, shuts every connection down and waits
for their threads.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from typing import Any

from ..errors import TVMError
from .auth import HANDSHAKE_TIMEOUT, check_exposure, load_auth_key, server_handshake

__all__ = ["Listener", "shutdown"]


def shutdown(conn: socket.socket) -> None:
    """Wake whatever thread reads ``conn``: both directions are shut, errors ignored."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Listener:
    """A listening socket whose connections are authenticated before :meth:`handle`."""

    #: ``"server"`` or ``"tracker"``: sent in the greeting, used in messages
    role = "server"

    def __init__(self, host: str, port: int, port_end: int | None, *, logger: logging.Logger,
                 silent: bool = False, auth_key: bytes | str | None = None,
                 insecure: bool = False, ssl_context: ssl.SSLContext | None = None,
                 max_connections: int = 64) -> None:
        if isinstance(auth_key, str):
            auth_key = auth_key.encode()
        self.auth_key = auth_key if auth_key is not None else load_auth_key()
        try:
            warning = check_exposure(self.role, host, self.auth_key, insecure)
        except PermissionError as e:
            raise TVMError(str(e)) from None
        self.host = host
        self.logger = logger
        self._ssl = ssl_context
        self._max_connections = max_connections
        self._sock = _bind(host, port, port_end, self.role)
        self.port: int = self._sock.getsockname()[1]
        self._sock.settimeout(0.2)  # the accept loop wakes to notice stop()
        if warning:
            logger.warning(warning)
        if not silent:
            logger.info("bind to %s:%d", host, self.port)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"kiln-{self.role}-accept")

    def start(self) -> None:
        """Start accepting (subclasses call this at the end of their ``__init__``)."""
        self._thread.start()

    # ---- connections -------------------------------------------------------------------
    def handle(self, conn: socket.socket, peer: str) -> None:
        """Serve one authenticated connection (in its own thread; it is closed after)."""
        raise NotImplementedError

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break  # the listening socket was closed
            with self._lock:
                full = len(self._conns) >= self._max_connections
                if not full:
                    t = threading.Thread(target=self._serve, args=(conn, f"{addr[0]}:{addr[1]}"),
                                         name=f"kiln-{self.role}-conn", daemon=True)
                    self._conns[conn] = t
            if full:
                self.logger.warning("refused %s:%d: %d connections are open", addr[0], addr[1],
                                    self._max_connections)
                conn.close()
                continue
            t.start()

    def _serve(self, conn: socket.socket, peer: str) -> None:
        sock = conn
        try:
            conn.settimeout(HANDSHAKE_TIMEOUT)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(conn, server_side=True)
                with self._lock:  # stop() must shut the wrapped socket down
                    self._conns[sock] = self._conns.pop(conn)
            server_handshake(sock, self.role, self.auth_key)
        except (OSError, ValueError) as e:  # ssl.SSLError and AuthenticationError are OSErrors
            self.logger.info("refused %s: %s", peer, e or type(e).__name__)
            self._drop(sock)
            return
        try:
            self.handle(sock, peer)
        except Exception:  # a bug must not take the listener down
            self.logger.exception("connection %s failed", peer)
        finally:
            self._drop(sock)

    def _drop(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.pop(conn, None)
        shutdown(conn)
        conn.close()

    # ---- lifetime ----------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, shut every connection down and wait (up to ``timeout`` s)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._sock.close()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.on_stop()
        with self._lock:
            conns = list(self._conns.items())
        for conn, _ in conns:
            shutdown(conn)
        deadline = time.monotonic() + timeout
        for _, t in conns:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))

    def on_stop(self) -> None:
        """Called by :meth:`stop` once no new connection can arrive (subclass hook)."""

    terminate = stop

    def serve_forever(self) -> None:
        """Block until :meth:`stop` is called (from a signal handler or another thread)."""
        while self._thread.is_alive():
            self._thread.join(0.5)

    @property
    def num_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.host}:{self.port})"


def _bind(host: str, port: int, port_end: int | None, role: str) -> socket.socket:
    ports = [port] if port == 0 or port_end is None else list(range(port, port_end))
    last: OSError | None = None
    for p in ports:
        try:
            return socket.create_server((host, p), backlog=64)
        except OSError as e:
            last = e
    span = f"{host}:{port}" if len(ports) <= 1 else f"{host}:{port}-{port_end - 1}"
    raise TVMError(f"RPC {role} cannot bind to {span}: {last}")
