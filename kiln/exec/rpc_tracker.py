"""``python -m kiln.exec.rpc_tracker --port 9190``: start an RPC tracker.

It logs ``INFO:RPCTracker:bind to 127.0.0.1:9190`` and hands the servers registered with
it (``python -m kiln.exec.rpc_server --tracker host:9190 --key NAME``) to the clients that
ask (``rpc.connect_tracker(host, 9190).request(NAME)``) until interrupted. The address and
safety options are those of ``rpc_server``; ``python -m kiln.exec.query_rpc_tracker``
prints its queues.
"""

from __future__ import annotations

import argparse
import sys

from kiln.exec._listener_cli import add_listener_args, listener_kwargs, serve
from kiln.rpc.tracker import Tracker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.exec.rpc_tracker",
                                     description="Hand RPC servers to clients by device key.")
    add_listener_args(parser, 9190)
    args = parser.parse_args(argv)
    return serve("rpc_tracker", args, lambda: Tracker(
        args.host, args.port, args.port_end, **listener_kwargs(args)), "RPCTracker")


if __name__ == "__main__":
    sys.exit(main())
