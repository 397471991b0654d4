"""Run kiln's benchmark suites: ``python -m benchmarks [SUITE ...] [--quick] [--list]``.

Without suite names it runs every suite registered in ``benchmarks.SUITES``. Each writes
``results/<suite>.json`` and ``results/<suite>.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import NOT_DEFAULT, SUITES, get_suite  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="Run kiln's benchmark suites.")
    p.add_argument("suites", nargs="*", metavar="SUITE",
                   help=f"suites to run (default: all but {', '.join(sorted(NOT_DEFAULT))})")
    p.add_argument("--quick", action="store_true", help="fewer repeats: a quick look")
    p.add_argument("--out", default=None, help="results directory (default: results/)")
    p.add_argument("--profile", action="store_true",
                   help="let suites that support it profile their builds")
    p.add_argument("--list", action="store_true", help="list the suites and exit")
    p.add_argument("--models", default=None, metavar="M1,M2",
                   help="the models suite's models, comma-separated (default: all)")
    p.add_argument("--batch", type=int, default=1, metavar="N",
                   help="the models suite's models built for a batch of N (throughput)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "int8"),
                   help="bf16 / int8: the models suite's models in bf16 (int8: quantized "
                        "by onnxruntime, QDQ) against fp32, accuracy and latency (the "
                        "precision suite)")
    args = p.parse_args(argv)
    if args.list:
        for name in SUITES:
            print(f"{name:12} {get_suite(name).DESCRIPTION}")
        return 0
    if args.batch != 1 and args.precision != "fp32":
        p.error("--batch is for the fp32 models suite")
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        p.error(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}")
    for name in args.suites or [s for s in SUITES if s not in NOT_DEFAULT]:
        chosen = {"models": args.models.split(",")} if name == "models" and args.models else {}
        if name == "models" and args.precision != "fp32":
            name, chosen = "precision", dict(chosen, precision=args.precision)
        if name == "models" and args.batch != 1:
            chosen["batch"] = args.batch
        get_suite(name).run(quick=args.quick, out_dir=args.out, profile=args.profile, **chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
