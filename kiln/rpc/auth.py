"""Who may talk to an RPC server or tracker: the greeting, the key check and TLS.

Every connection starts with a greeting, before any other message is read::

    peer -> listener   {"op": "greet"}
    listener -> peer   {"kiln": "server" | "tracker", "auth": "hmac-sha256" | null,
                        "nonce": 32 random bytes in hex}
    peer -> listener   {"op": "auth", "mac": HMAC-SHA256(key, "kiln-rpc|" + kiln + "|" + nonce)}
    listener -> peer   {"status": "ok"}  or an error, and the connection is closed

The last two messages are exchanged only when the listener has a key (the peer speaks first
so that a peer reaching something else, an HTTP server say, hears back at once). The
listener reads the greeting and the answer with :data:`HANDSHAKE_LIMITS` and a
:data:`HANDSHAKE_TIMEOUT`, compares it in constant time (``hmac.compare_digest``), and
reads no other message from a peer that failed: an unauthenticated peer cannot upload
anything. The nonce is fresh for every connection, so a recorded answer cannot be replayed.
The key proves who the *peer* is; TLS (:func:`server_tls_context`) hides the traffic and,
with a client ``ssl_context`` that checks the certificate, proves who the *listener* is.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import ssl
from typing import Any

from .protocol import Limits, ProtocolError, recv_message, send_message

__all__ = ["ENV_KEY", "HANDSHAKE_LIMITS", "HANDSHAKE_TIMEOUT", "AuthenticationError",
           "load_auth_key", "is_loopback", "check_exposure", "server_handshake",
           "client_handshake", "server_tls_context", "dial", "peer_role"]

#: the environment variable holding the shared key (servers, tracker and clients)
ENV_KEY = "KILN_RPC_KEY"
#: a greeting or an answer is a few hundred bytes of JSON and carries no blobs
HANDSHAKE_LIMITS = Limits(header=4096, blobs=0)
#: seconds a listener waits for the peer's answer (and a peer for the greeting)
HANDSHAKE_TIMEOUT = 10.0
_SCHEME = "hmac-sha256"


class AuthenticationError(ConnectionError):
    """The peer failed the key check, or the listener wants a key the peer does not have."""


def load_auth_key(key_file: str | None = None) -> bytes | None:
    """The shared key: the contents of ``key_file`` (surrounding whitespace stripped), else
    the ``KILN_RPC_KEY`` environment variable, else None (no key)."""
    if key_file:
        with open(key_file, "rb") as f:
            key = f.read().strip()
        if not key:
            raise ValueError(f"the authentication key file {key_file!r} is empty")
        return key
    env = os.environ.get(ENV_KEY, "")
    return env.encode() if env else None


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (``127.x``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(what: str, host: str, key: bytes | None, insecure: bool) -> str | None:
    """Refuse to listen on a non-loopback ``host`` without a key unless ``insecure``;
    returns the warning to print for an open listener reachable from the network."""
    if is_loopback(host) or key is not None:
        return None
    if not insecure:
        raise PermissionError(
            f"the RPC {what} would listen on {host} without authentication: give a key "
            f"(--auth-key-file FILE or the {ENV_KEY} environment variable), listen on "
            "127.0.0.1, or pass --insecure if the network is trusted")
    return (f"WARNING: the RPC {what} listens on {host} WITHOUT authentication: anyone who "
            "reaches this port can upload and run code on this machine (remote code "
            "execution). Use --auth-key-file on a network you do not fully trust.")


def _mac(key: bytes, role: str, nonce: str) -> str:
    return hmac.new(key, f"kiln-rpc|{role}|{nonce}".encode(), hashlib.sha256).hexdigest()


def server_handshake(sock: socket.socket, role: str, key: bytes | None) -> None:
    """The listener's side: greet, and with a key check the peer's answer. Raises
    AuthenticationError (a wrong or missing answer; the peer was told), ProtocolError or
    OSError; the caller closes the connection then."""
    greet, _ = recv_message(sock, HANDSHAKE_LIMITS)
    if greet.get("op") != "greet":
        raise ProtocolError("the peer did not greet")
    nonce = secrets.token_hex(32)
    send_message(sock, {"kiln": role, "auth": _SCHEME if key else None, "nonce": nonce})
    if key is None:
        return
    header, _ = recv_message(sock, HANDSHAKE_LIMITS)
    mac = header.get("mac") if header.get("op") == "auth" else None
    if not isinstance(mac, str) or not hmac.compare_digest(mac.encode(),
                                                           _mac(key, role, nonce).encode()):
        send_message(sock, {"status": "error", "etype": "AuthenticationError",
                            "message": "authentication failed: wrong or missing key"})
        raise AuthenticationError("a peer failed authentication")
    send_message(sock, {"status": "ok"})


def client_handshake(sock: socket.socket, key: bytes | None) -> str:
    """The peer's side: read the greeting, answer it when the listener wants a key.
    Returns the listener's role (``"server"`` or ``"tracker"``)."""
    greeting: dict[str, Any]
    send_message(sock, {"op": "greet"})
    greeting, _ = recv_message(sock, HANDSHAKE_LIMITS)
    role, scheme, nonce = greeting.get("kiln"), greeting.get("auth"), greeting.get("nonce")
    if role not in ("server", "tracker") or not isinstance(nonce, str):
        raise ProtocolError("the peer is not a kiln RPC server or tracker")
    if scheme is None:
        return role
    if scheme != _SCHEME:
        raise ProtocolError(f"the {role} asks for authentication {scheme!r}, which this "
                            f"client does not speak ({_SCHEME})")
    if key is None:
        raise AuthenticationError(f"the RPC {role} requires an authentication key: pass "
                                  f"auth_key= or set {ENV_KEY}")
    send_message(sock, {"op": "auth", "mac": _mac(key, role, nonce)})
    reply, _ = recv_message(sock, HANDSHAKE_LIMITS)
    if reply.get("status") != "ok":
        raise AuthenticationError(f"the RPC {role} refused the authentication key")
    return role


def server_tls_context(certfile: str, keyfile: str | None = None) -> ssl.SSLContext:
    """A TLS context for a listener with the certificate chain ``certfile``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    return ctx


def dial(host: str, port: int, *, timeout: float | None, auth_key: bytes | str | None,
         ssl_context: ssl.SSLContext | None = None) -> tuple[socket.socket, str]:
    """Connect to a listener (``timeout`` bounds connecting and the handshake; the socket
    is left with ``timeout`` for later reads), wrap in TLS with ``ssl_context``, answer the
    greeting with ``auth_key`` (default: :data:`ENV_KEY`). Returns the socket and the
    listener's role. Raises OSError (AuthenticationError, ssl.SSLError) or ProtocolError."""
    if isinstance(auth_key, str):
        auth_key = auth_key.encode()
    key = auth_key if auth_key is not None else load_auth_key()
    sock = socket.create_connection((host, port), timeout=timeout or HANDSHAKE_TIMEOUT)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=host)
        role = client_handshake(sock, key)
    except BaseException:
        sock.close()
        raise
    sock.settimeout(timeout)
    return sock, role


def peer_role(host: str, port: int, *, timeout: float | None = HANDSHAKE_TIMEOUT,
              auth_key: bytes | str | None = None, ssl_context: ssl.SSLContext | None = None
              ) -> str:
    """``"server"`` or ``"tracker"``: what listens at ``host:port`` (errors as :func:`dial`)."""
    sock, role = dial(host, port, timeout=timeout, auth_key=auth_key, ssl_context=ssl_context)
    sock.close()
    return role
