"""The wire format of kiln's RPC: one message is a JSON header followed by raw byte blobs.

A message on the socket is::

    b"KRPC"  u32 version  u32 header_length   (network byte order, 12 bytes)
    header_length bytes of UTF-8 JSON         (a dict; "blobs" lists the blob sizes)
    the blobs, back to back                   (array contents, file contents)

Nothing is pickled: a peer can only ask for the operations the server's dispatch table
names, and array data travels as raw bytes described by (shape, dtype) in the header.
Every receiver states its limits (:class:`Limits`): the largest header and the largest total
of blobs it accepts; a message over them is refused before its body is read, so a peer
cannot make the receiver allocate memory. Read timeouts are the socket's own
(``sock.settimeout``), set by whoever owns the socket.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MAGIC", "VERSION", "Limits", "ProtocolError", "send_message", "recv_message",
           "peer_closed"]

MAGIC = b"KRPC"
VERSION = 1
_PREFIX = struct.Struct("!4sII")
#: a header larger than this is refused (it holds names and shapes, never data)
MAX_HEADER = 16 << 20
#: a single blob larger than this is refused (a corrupt length must not allocate terabytes)
MAX_BLOB = 1 << 36

_FIRST_CHUNK = 16 << 20


@dataclass(frozen=True)
class Limits:
    """The largest message a receiver accepts: ``header`` bytes of JSON, ``blobs`` bytes of
    blob data in all (an RPC session's uploads and arrays; a tracker takes none)."""

    header: int = MAX_HEADER
    blobs: int = MAX_BLOB


Blob = bytes | bytearray | memoryview


class ProtocolError(ConnectionError):
    """The peer sent something that is not a kiln RPC message."""


def send_message(sock: socket.socket, header: dict[str, Any], blobs: Sequence[Blob] = ()) -> None:
    """Send ``header`` (JSON-serialisable) and ``blobs`` as one message."""
    views = [memoryview(b).cast("B") for b in blobs]
    header = dict(header, blobs=[v.nbytes for v in views])
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    sock.sendall(_PREFIX.pack(MAGIC, VERSION, len(text)) + text)
    for v in views:
        sock.sendall(v)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    """Read exactly ``n`` bytes. The buffer grows as data arrives (from 16 MiB, doubling),
    so a corrupt length cannot make the receiver allocate memory no data fills."""
    buf = bytearray(min(n, _FIRST_CHUNK))
    got = 0
    while got < n:
        if got == len(buf):
            buf.extend(bytes(min(n, 2 * len(buf)) - len(buf)))
        k = sock.recv_into(memoryview(buf)[got:], len(buf) - got)
        if k == 0:
            raise ConnectionResetError("the peer closed the connection")
        got += k
    return buf


def recv_message(sock: socket.socket, limits: Limits = Limits(),
                 ) -> tuple[dict[str, Any], list[bytearray]]:
    """Receive one message; raises ProtocolError on a malformed one or one over ``limits``,
    ConnectionError when the peer goes away and TimeoutError when the socket's timeout
    expires."""
    magic, version, length = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size))
    if magic != MAGIC:
        raise ProtocolError(f"not a kiln RPC peer (got {bytes(magic)!r} instead of {MAGIC!r})")
    if version != VERSION:
        raise ProtocolError(f"kiln RPC protocol version {version} is not {VERSION}")
    if length > limits.header:
        raise ProtocolError(f"message header of {length} bytes is over the limit of "
                            f"{limits.header} bytes")
    try:
        header = json.loads(_recv_exact(sock, length).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"bad message header: {e}") from None
    sizes = header.get("blobs", []) if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(s, int) and 0 <= s <= MAX_BLOB
                                              for s in sizes):
        raise ProtocolError("bad message header: 'blobs' must list sizes")
    if sum(sizes) > limits.blobs:
        raise ProtocolError(f"message data of {sum(sizes)} bytes is over the limit of "
                            f"{limits.blobs} bytes")
    return header, [_recv_exact(sock, s) for s in sizes]


def peer_closed(sock: socket.socket) -> bool:
    """True when the peer closed ``sock`` (a read would give end-of-file now). It peeks on a
    duplicate of the descriptor, so it consumes nothing and works under TLS too."""
    raw = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        return raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        raw.close()
