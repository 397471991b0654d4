"""``python -m kiln.exec.query_rpc_tracker --host H --port 9190``: print a tracker's
servers and its queue status table (servers per key, free, pending requests)."""

from __future__ import annotations

import argparse
import sys

from kiln.errors import TVMError
from kiln.rpc.auth import ENV_KEY, load_auth_key
from kiln.rpc.tracker_client import connect_tracker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.exec.query_rpc_tracker",
                                     description="Print an RPC tracker's queue status.")
    parser.add_argument("--host", default="127.0.0.1", help="the tracker's address")
    parser.add_argument("--port", type=int, default=9190, help="the tracker's port")
    parser.add_argument("--auth-key-file", default=None,
                        help=f"file holding the shared key (default: {ENV_KEY})")
    args = parser.parse_args(argv)
    try:
        tracker = connect_tracker(args.host, args.port,
                                  auth_key=load_auth_key(args.auth_key_file))
        print(f"Tracker address {args.host}:{args.port}\n")
        print(tracker.text_summary())
    except (TVMError, OSError, ValueError) as e:
        print(f"query_rpc_tracker: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
