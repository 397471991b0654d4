"""``python -m kiln.exec.rpc_server --port 9090``: start an RPC server.

It logs ``INFO:RPCServer:bind to 127.0.0.1:9090`` and serves until interrupted (Ctrl-C or
SIGTERM), then kills the open sessions and exits 0. ``--port 0`` picks a free port (the log
line says which); ``--port-end`` makes it take the first free port of ``[port, port_end)``.
``--host 0.0.0.0`` (other machines may connect) needs ``--auth-key-file`` (or the
``KILN_RPC_KEY`` environment variable), or ``--insecure`` on a trusted network.
``--tracker host:port --key NAME`` registers the server with an RPC tracker. With the tvm
alias the book's spelling works too:
``python -m kiln.as_tvm -m tvm.exec.rpc_server --host 0.0.0.0 --port=9090 --insecure``.
"""

from __future__ import annotations

import argparse
import sys

from kiln.exec._listener_cli import add_listener_args, listener_kwargs, serve
from kiln.rpc.server import Server


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not host:port")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.exec.rpc_server",
                                     description="Serve kiln modules to RPC clients.")
    add_listener_args(parser, 9090)
    parser.add_argument("--tracker", type=_address, default=None,
                        help="host:port of an RPC tracker to register with")
    parser.add_argument("--key", default="",
                        help="device key to register under (with --tracker)")
    parser.add_argument("--custom-addr", default=None,
                        help="address the tracker gives clients (default: the one it sees)")
    parser.add_argument("--idle-timeout", type=float, default=900.0,
                        help="seconds a session may stay silent (default 900)")
    parser.add_argument("--max-upload-mb", type=float, default=1024.0,
                        help="largest message data (an upload, an array) in MiB")
    args = parser.parse_args(argv)
    if args.tracker is not None and not args.key:
        parser.error("--tracker needs --key (the device name clients ask the tracker for)")
    return serve("rpc_server", args, lambda: Server(
        args.host, args.port, args.port_end, tracker_addr=args.tracker, key=args.key,
        custom_addr=args.custom_addr, idle_timeout=args.idle_timeout,
        max_upload=int(args.max_upload_mb * (1 << 20)), **listener_kwargs(args)),
        "RPCServer")


if __name__ == "__main__":
    sys.exit(main())
