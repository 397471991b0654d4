"""What ``python -m kiln.exec.rpc_server`` and ``rpc_tracker`` share: the address and
safety options, and serving until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from kiln.errors import TVMError
from kiln.rpc.auth import ENV_KEY, load_auth_key, server_tls_context


def add_listener_args(parser: argparse.ArgumentParser, default_port: int) -> None:
    """``--host/--port/--port-end``, the key, ``--insecure``, TLS and ``--log-level``."""
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; any other address "
                             "needs --auth-key-file or --insecure)")
    parser.add_argument("--port", type=int, default=default_port,
                        help="port (0: any free port)")
    parser.add_argument("--port-end", type=int, default=None,
                        help="try ports from --port up to (not including) this one")
    parser.add_argument("--auth-key-file", default=None,
                        help=f"file holding the shared key clients must prove they know "
                             f"(default: the {ENV_KEY} environment variable)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow listening on a network address without a key: anyone "
                             "who reaches the port can run code here")
    parser.add_argument("--certfile", default=None, help="TLS certificate chain (PEM)")
    parser.add_argument("--keyfile", default=None, help="TLS private key (PEM)")
    parser.add_argument("--log-level", default="INFO", help="logging level (INFO, DEBUG...)")


def listener_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``Server``/``Tracker`` the options above give."""
    return {"auth_key": load_auth_key(args.auth_key_file), "insecure": args.insecure,
            "ssl_context": server_tls_context(args.certfile, args.keyfile)
            if args.certfile else None}


def serve(prog: str, args: argparse.Namespace, make: Callable[[], Any], logger_name: str
          ) -> int:
    """Start the listener ``make()`` and serve until interrupted (Ctrl-C or SIGTERM); the
    exit status (1 when it cannot start)."""
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO))
    stopped = threading.Event()
    listeners: list[Any] = []

    def stop(signum, frame):  # noqa: ARG001 - signal handler signature
        stopped.set()
        for s in listeners:
            s.stop()

    signal.signal(signal.SIGTERM, stop)  # before binding: a client may stop us at once
    try:
        listener = make()
    except (TVMError, OSError, ValueError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    listeners.append(listener)
    if stopped.is_set():
        listener.stop()
    try:
        listener.serve_forever()
    except KeyboardInterrupt:
        pass
    listener.stop()
    logging.getLogger(logger_name).info("stopped")
    return 0
