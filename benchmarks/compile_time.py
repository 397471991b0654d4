"""Compile time of ``relay.build`` (issue 23): cold and cached, Python against the C compiler.

``python -m benchmarks.compile_time [resnet18] [mobilenet_v2] [--rounds N] [--profile N]
[--kernels]``

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
deterministic measure where other jobs make the times vary). ``--kernels`` ranks the first
round's kernels by their cost in the cold build: the CPU seconds of each one's lowering
(recorded by ``relay.build``) and of the C compiler on its translation unit, compiled again
alone after the build (one at a time, so no compiler shares the CPU with another), and the
lines of C.
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


def measure(model: str, profile: int = 0, kernels: bool = False) -> dict:
    """This process's cold and cached build of ``model`` (a builder of
    ``kiln.relay.testing``): wall, Python and compiler CPU seconds of each, the kernel count,
    with ``profile`` each build's cProfile listing and with ``kernels`` the cost of each
    kernel (:func:`kernel_costs`)."""
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
    with fresh_cache(prefix="kiln-bench-compile-") as cache:
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
        if kernels:
            out["kernel_costs"] = kernel_costs(Path(cache))
    out["kernels"] = len(lib.plan["steps"])
    return out


def kernel_costs(cache: Path) -> list[dict]:
    """The kernels ``relay.build`` compiled into ``cache`` for ``llvm``, most costly first:
    each one's name, lines of C, lowering CPU seconds (``lower``, from its record) and C
    compiler CPU seconds (``cc``: its translation unit compiled again now, alone)."""
    from kiln.codegen.backend import backend_for
    from kiln.runtime.compiler import object_argv
    from kiln.target import Target

    target = Target("llvm")
    with target:
        argv = object_argv(backend_for(target).flags(target))
    rows = []
    for record in sorted(cache.glob("*.json")):
        info = json.loads(record.read_text()).get("info", {})
        source = record.with_suffix(".c")
        if "lower_seconds" not in info or not source.is_file():
            continue  # not a kernel's object (the library, the runtime header, a work record)
        proc = subprocess.Popen([*argv, "-o", str(cache / "kernel-cost.o"), str(source)])
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise RuntimeError(f"the C compiler failed on {source}")
        rows.append({"name": record.stem.rsplit("-", 1)[0], "lines": info["source"].count("\n"),
                     "lower": info["lower_seconds"],
                     "cc": round(usage.ru_utime + usage.ru_stime, 3)})
    return sorted(rows, key=lambda r: -(r["lower"] + r["cc"]))


def _kernel_table(rows: list[dict]) -> str:
    lines = [f"  {'kernel':44s} {'lines':>6s} {'lower s':>8s} {'cc s':>6s}"]
    lines += [f"  {r['name']:44s} {r['lines']:6d} {r['lower']:8.3f} {r['cc']:6.3f}" for r in rows]
    lines.append(f"  {'all ' + str(len(rows)) + ' translation units':44s} "
                 f"{sum(r['lines'] for r in rows):6d} {sum(r['lower'] for r in rows):8.3f} "
                 f"{sum(r['cc'] for r in rows):6.3f}")
    return "\n".join(lines)


def run_round(model: str, profile: int = 0, kernels: bool = False) -> dict:
    """:func:`measure` in a fresh process, with the load average before it ran."""
    load = os.getloadavg()[0]
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-m", "benchmarks.compile_time", "--one-round",
                          model, "--profile", str(profile), *(["--kernels"] if kernels else [])],
                         cwd=root, capture_output=True, text=True, check=True)
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
    ap.add_argument("--kernels", action="store_true",
                    help="rank the first round's kernels by lowering and C compiler CPU")
    ap.add_argument("--one-round", metavar="MODEL", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one_round:
        print(_RESULT + json.dumps(measure(args.one_round, args.profile, args.kernels)))
        return
    for model in args.models:
        rounds = [run_round(model, args.profile if i == 0 else 0, args.kernels and i == 0)
                  for i in range(args.rounds)]
        for kind in ("cold", "cached") if args.profile else ():
            print(f"{model}, {kind} build under cProfile:\n{rounds[0].pop(f'profile_{kind}')}")
        if args.kernels:
            print(f"{model}, the cold build's kernels:\n"
                  f"{_kernel_table(rounds[0].pop('kernel_costs'))}")
        for i, r in enumerate(rounds):
            print(f"  {model} round {i + 1} (load {r['load']:.2f}): {_fmt(r, 'cold')}; "
                  f"{_fmt(r, 'cached')}")
        best = min(rounds, key=lambda r: r["cold"]["wall"])
        print(f"{model} ({best['kernels']} kernels), best of {args.rounds}: {_fmt(best, 'cold')}; "
              f"{_fmt(best, 'cached')}")


if __name__ == "__main__":
    main()
