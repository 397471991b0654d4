"""The wire format of kiln's RPC: one message is a JSON header followed by raw byte blobs.

A message on the socket is::

    b"KRPC"  u32 version  u32 header_length   (network byte order, 12 bytes)
    header_length bytes of UTF-8 JSON         (a dict; "blobs" lists the blob sizes)
    the blobs, back to back                   (array contents, file contents)

Nothing is pickled: a peer can only ask for the operations the server's dispatch table
names, and array data travels as raw bytes described by (shape, dtype) in the header.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Sequence
from typing import Any

__all__ = ["MAGIC", "VERSION", "ProtocolError", "send_message", "recv_message"]

MAGIC = b"KRPC"
VERSION = 1
_PREFIX = struct.Struct("!4sII")
#: a header larger than this is refused (it holds names and shapes, never data)
MAX_HEADER = 16 << 20
#: a single blob larger than this is refused (a corrupt length must not allocate terabytes)
MAX_BLOB = 1 << 36

_FIRST_CHUNK = 16 << 20

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


def recv_message(sock: socket.socket) -> tuple[dict[str, Any], list[bytearray]]:
    """Receive one message; raises ProtocolError on a malformed one and ConnectionError
    when the peer goes away."""
    magic, version, length = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size))
    if magic != MAGIC:
        raise ProtocolError(f"not a kiln RPC peer (got {bytes(magic)!r} instead of {MAGIC!r})")
    if version != VERSION:
        raise ProtocolError(f"kiln RPC protocol version {version} is not {VERSION}")
    if length > MAX_HEADER:
        raise ProtocolError(f"message header of {length} bytes is too large")
    try:
        header = json.loads(_recv_exact(sock, length).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"bad message header: {e}") from None
    sizes = header.get("blobs", []) if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(s, int) and 0 <= s <= MAX_BLOB
                                              for s in sizes):
        raise ProtocolError("bad message header: 'blobs' must list sizes")
    return header, [_recv_exact(sock, s) for s in sizes]
