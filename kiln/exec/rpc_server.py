"""``python -m kiln.exec.rpc_server --host 0.0.0.0 --port 9090``: start an RPC server.

It logs ``INFO:RPCServer:bind to 0.0.0.0:9090`` and serves until interrupted (Ctrl-C or
SIGTERM), then ends the open sessions and exits 0. ``--port 0`` picks a free port (the log
line says which); ``--port-end`` makes it take the first free port of ``[port, port_end)``.
With the tvm alias the book's spelling works too:
``python -m kiln.as_tvm -m tvm.exec.rpc_server --host 0.0.0.0 --port=9090``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from kiln.errors import TVMError
from kiln.rpc.server import Server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.exec.rpc_server",
                                     description="Serve kiln modules to RPC clients.")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=9090, help="port (0: any free port)")
    parser.add_argument("--port-end", type=int, default=None,
                        help="try ports from --port up to (not including) this one")
    parser.add_argument("--log-level", default="INFO", help="logging level (INFO, DEBUG...)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO))
    stopped = threading.Event()
    servers: list[Server] = []

    def stop(signum, frame):  # noqa: ARG001 - signal handler signature
        stopped.set()
        for s in servers:
            s.stop()

    signal.signal(signal.SIGTERM, stop)  # before binding: a client may stop us at once
    try:
        server = Server(args.host, args.port, args.port_end)
    except TVMError as e:
        print(f"rpc_server: {e}", file=sys.stderr)
        return 1
    servers.append(server)
    if stopped.is_set():
        server.stop()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.stop()
    logging.getLogger("RPCServer").info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
