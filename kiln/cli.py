"""The ``kiln`` command: ``kiln demo``, ``kiln bench [SUITE ...]``, ``kiln version``.

``kiln bench`` runs the benchmark suites of a kiln source checkout (the ``benchmarks``
package beside ``kiln/``); an installed kiln without its checkout says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _bench(args: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "__init__.py").exists():
        print("kiln bench: the benchmarks/ folder of a kiln checkout was not found next to "
              f"{root / 'kiln'}; run it from a source checkout", file=sys.stderr)
        return 2
    sys.path.insert(0, str(root))
    from benchmarks.run import main as bench_main

    return bench_main(args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="kiln", description="kiln tensor compiler")
    parser.add_argument("command", choices=["demo", "bench", "version"])
    if not argv:
        parser.print_help()
        return 2
    command, rest = argv[0], argv[1:]
    if command == "bench":
        return _bench(rest)
    args = parser.parse_args([command])
    if args.command == "version":
        import kiln

        print(kiln.__version__)
        return 0
    from kiln import demo

    return demo.main() or 0


if __name__ == "__main__":
    sys.exit(main())
