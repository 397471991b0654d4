"""``python -m kiln.driver``: print the pipeline table, or write it into docs/lowering.md."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from .pipeline import render_markdown, with_table


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m kiln.driver [--write-docs PATH]``: print the table, or rewrite
    the generated section of docs/lowering.md (default path) in place."""
    ap = argparse.ArgumentParser(prog="python -m kiln.driver", description=main.__doc__)
    ap.add_argument("--write-docs", nargs="?", const="docs/lowering.md", metavar="PATH")
    args = ap.parse_args(argv)
    if args.write_docs is None:
        print(render_markdown(), end="")
        return
    path = Path(args.write_docs)
    path.write_text(with_table(path.read_text()))


if __name__ == "__main__":
    main()
