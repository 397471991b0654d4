"""Compile time of ``relay.build`` (issue 23): cold and cached, Python against the C compiler.

``python -m benchmarks.compile_time [resnet18] [mobilenet_v2] [--rounds N] [--profile N]``

Each round is a fresh Python process (so no in-process memo of an earlier round helps) that
imports kiln, builds the model's ONNX graph with ``kiln.relay.testing`` (not timed), then
times ``from_onnx`` + ``relay.build`` (``llvm``, opt_level 3) twice in one empty
``KILN_CACHE_DIR`` (removed after): *cold* (every kernel lowered and compiled) and *cached*
(the same model again: the kernels' objects and the library come from the cache). Besides
the wall time it reports the CPU seconds of the Python process itself and of its children
(the C compiler), and the load average, since other jobs on the machine slow both. The best
round (least cold wall time) is printed, with every round's figures. ``--profile N`` runs
the cold and the cached build of the first round under cProfile and prints, for each, the N
functions of most cumulative time and the total count of Python function calls (a
deterministic measure where other jobs make the times vary).
Not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

_RESULT = "RESULT "


def measure(model: str, profile: int = 0) -> dict:
    """This process's cold and cached build of ``model`` (a builder of
    ``kiln.relay.testing``): wall, Python and compiler CPU seconds of each, the kernel count,
    and with ``profile`` each build's cProfile listing."""
    import cProfile
    import io
    import pstats

    from benchmarks.foundation import fresh_cache
    from kiln import relay
    from kiln.relay import testing

    onnx_model = getattr(testing, model)()

    def build():
        mod, params = relay.frontend.from_onnx(onnx_model)
        with relay.build_config(opt_level=3):
            return relay.build(mod, target="llvm", params=params)

    out: dict = {}
    with fresh_cache(prefix="kiln-bench-compile-"):
        for kind in ("cold", "cached"):
            prof = cProfile.Profile() if profile else None
            before, t0 = os.times(), time.perf_counter()
            lib = prof.runcall(build) if prof else build()
            wall, after = time.perf_counter() - t0, os.times()
            # os.times counts in clock ticks: rounded, a difference of equal times is 0
            cc = after.children_user + after.children_system - before.children_user \
                - before.children_system
            python = after.user + after.system - before.user - before.system
            out[kind] = {"wall": wall, "python": round(python, 3), "cc": round(cc, 3) + 0.0}
            if prof:
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(profile)
                out[f"profile_{kind}"] = text.getvalue()
    out["kernels"] = len(lib.plan["steps"])
    return out


def run_round(model: str, profile: int = 0) -> dict:
    """:func:`measure` in a fresh process, with the load average before it ran."""
    load = os.getloadavg()[0]
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-m", "benchmarks.compile_time", "--one-round",
                          model, "--profile", str(profile)], cwd=root, capture_output=True,
                         text=True, check=True)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith(_RESULT))
    return {"load": load, **json.loads(line[len(_RESULT):])}


def _fmt(r: dict, kind: str) -> str:
    k = r[kind]
    return f"{kind} {k['wall']:.2f} s (CPU: Python {k['python']:.2f} + C compiler {k['cc']:.2f} s)"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["resnet18"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--one-round", metavar="MODEL", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one_round:
        print(_RESULT + json.dumps(measure(args.one_round, args.profile)))
        return
    for model in args.models:
        rounds = [run_round(model, args.profile if i == 0 else 0) for i in range(args.rounds)]
        for kind in ("cold", "cached") if args.profile else ():
            print(f"{model}, {kind} build under cProfile:\n{rounds[0].pop(f'profile_{kind}')}")
        for i, r in enumerate(rounds):
            print(f"  {model} round {i + 1} (load {r['load']:.2f}): {_fmt(r, 'cold')}; "
                  f"{_fmt(r, 'cached')}")
        best = min(rounds, key=lambda r: r["cold"]["wall"])
        print(f"{model} ({best['kernels']} kernels), best of {args.rounds}: {_fmt(best, 'cold')}; "
              f"{_fmt(best, 'cached')}")


if __name__ == "__main__":
    main()
