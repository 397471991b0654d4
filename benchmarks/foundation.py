"""The foundation suite: vector add speed, per-call overhead, build time, memory.

``python -m benchmarks.foundation [--quick] [--profile] [--out DIR]`` writes
``results/foundation.json`` and ``results/foundation.md`` and prints the table. What each
figure means and how it is measured: docs/benchmarks.md.

1. vector add of 2**20 float32: kiln (parallel + vectorized schedules, and the default one)
   against ``np.add(a, b, out=c)``, repeats interleaved, medians compared;
2. per-call overhead, the book's way (§4.2): a vector add of 2..14 elements, where the work is
   negligible, timed with ``bench_workload``; mean over the sizes;
3. build time: cold (empty compile cache, fresh process), warm (cache populated, fresh
   process and in-process); the fast-call extension's one-off compile shown apart;
4. memory: resident memory before and after 10**5 calls, and before and after 10**3 builds.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from . import common
from .common import MB, Figure, fmt_time

NAME = "foundation"
DESCRIPTION = "vector add vs numpy, call overhead, build time, memory (issue 2, point 3)"

N = 1 << 20  # vector add length of figure 1
FACTORS = (16, 64)  # split factors of the parallel + vectorized schedules
OVERHEAD_SIZES = tuple(int(n) for n in 2 * np.arange(1, 8))  # 2, 4, ..., 14 as in the book
GOAL_RATIO = 1.2
GOAL_OVERHEAD_S = 1e-6
GOAL_COLD_S = 0.5
GOAL_WARM_S = 0.020


# ---------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------


def vector_add_schedule(n: int, factor: int | None = None):
    """``c[i] = a[i] + b[i]`` for ``i < n`` and its schedule: the default one (``factor``
    None) or split by ``factor``, outer loop parallel, inner loop vectorized (book §4.3)."""
    from kiln import te

    A = te.placeholder((n,), name="a")
    B = te.placeholder((n,), name="b")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="c")
    s = te.create_schedule(C.op)
    if factor is not None:
        outer, inner = s[C].split(C.op.axis[0], factor=factor)
        s[C].parallel(outer)
        s[C].vectorize(inner)
    return s, [A, B, C]


def build_vector_add(n: int, factor: int | None = None):
    import kiln

    s, args = vector_add_schedule(n, factor)
    return kiln.build(s, args, target="llvm", name="vector_add")


def schedule_name(factor: int | None) -> str:
    return "default schedule" if factor is None else f"parallel + vectorize, factor {factor}"


@contextmanager
def fresh_cache(prefix: str = "kiln-bench-cache-", variable: str = "KILN_CACHE_DIR"):
    """Point the cache directory ``variable`` (kiln's by default) at a new empty directory
    for the duration; remove it after."""
    old = os.environ.get(variable)
    path = tempfile.mkdtemp(prefix=prefix)
    os.environ[variable] = path
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = old
        shutil.rmtree(path, ignore_errors=True)


def _inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32"))


# ---------------------------------------------------------------------------------------
# 1. vector add
# ---------------------------------------------------------------------------------------


def bench_vector_add(cfg: dict[str, Any]) -> tuple[list[Figure], dict[str, Any]]:
    import kiln

    x, y = _inputs(N)
    z = np.empty_like(x)
    expected = x + y
    a, b = kiln.nd.array(x), kiln.nd.array(y)
    c = kiln.nd.empty((N,), "float32")
    env: dict[str, Any] = {"np": np, "x": x, "y": y, "z": z, "a": a, "b": b, "c": c}
    candidates: dict[str, str] = {"numpy": "np.add(x, y, out=z)"}
    names: dict[str, str] = {}
    correct: dict[str, bool] = {}
    for factor in (*FACTORS, None):
        key = "default" if factor is None else f"parallel{factor}"
        mod = build_vector_add(N, factor)
        c.copyfrom(np.zeros(N, "float32"))
        mod(a, b, c)
        correct[key] = bool(np.array_equal(c.numpy(), expected))
        env[f"m_{key}"] = mod
        candidates[key] = f"m_{key}(a, b, c)"
        names[key] = schedule_name(factor)
    timings = common.interleaved(candidates, env, repeat=cfg["repeat"],
                                 min_time=cfg["min_time"])
    ref = timings["numpy"].median

    # Cross-check with kiln's own timer on the first parallel schedule.
    first = f"parallel{FACTORS[0]}"
    mod = env[f"m_{first}"]
    number = timings[first].number
    te_result = mod.time_evaluator(mod.entry_name, kiln.cpu(0), number=number,
                                   repeat=cfg["repeat"])(a, b, c)

    figures = []
    for key, label in names.items():
        t = timings[key]
        notes = f"median of {len(t.results)} × {t.number} calls, min {fmt_time(t.min)}"
        if not correct[key]:
            notes += "; WRONG RESULT"
        if key == first:
            notes += f"; time_evaluator median {fmt_time(te_result.median)}"
        figures.append(Figure(
            key=f"vector_add.{key}",
            label=f"vector add 2^20 f32, {label}",
            kiln=t.median, unit="s", reference=ref, reference_label="np.add",
            goal=f"≤ {GOAL_RATIO}× numpy",
            within_goal=t.median <= GOAL_RATIO * ref,
            notes=notes,
        ))
    details = {
        "n": N,
        "timings": {k: t.to_dict() for k, t in timings.items()},
        "correct": correct,
        "time_evaluator": {"schedule": first, "median_s": te_result.median,
                           "results_s": list(te_result.results), "number": number},
        "bandwidth_gb_s": {k: 3 * 4 * N / t.median / 1e9 for k, t in timings.items()},
    }
    return figures, details


# ---------------------------------------------------------------------------------------
# 2. per-call overhead
# ---------------------------------------------------------------------------------------


def bench_overhead(cfg: dict[str, Any]) -> tuple[list[Figure], dict[str, Any]]:
    import kiln

    per_size: dict[str, dict[int, float]] = {"kiln": {}, "np_add": {}, "np_copyto": {}}
    raw: dict[str, Any] = {}
    for n in OVERHEAD_SIZES:
        mod = build_vector_add(n)
        x, y = _inputs(n, seed=n)
        env = {
            "np": np, "mod": mod, "x": x, "y": y, "z": np.empty_like(x),
            "a": kiln.nd.array(x), "b": kiln.nd.array(y), "c": kiln.nd.empty((n,), "float32"),
        }
        timings = common.interleaved_book(
            {"kiln": "mod(a, b, c)", "np_add": "np.add(x, y, out=z)",
             "np_copyto": "np.copyto(z, x)"},
            env, rounds=cfg["overhead_rounds"], min_time=cfg["overhead_min_time"])
        for k, t in timings.items():
            per_size[k][n] = t.median
        raw[str(n)] = {k: t.results for k, t in timings.items()}
    mean = {k: statistics.fmean(v.values()) for k, v in per_size.items()}
    figure = Figure(
        key="overhead.call",
        label="per-call overhead, vector add of n = 2..14 (mean over n)",
        kiln=mean["kiln"], unit="s", reference=mean["np_copyto"],
        reference_label="np.copyto",
        goal="≤ 1 µs",
        within_goal=mean["kiln"] <= GOAL_OVERHEAD_S,
        notes=f"kiln `mod(a, b, c)`; np.add(x, y, out=z): {fmt_time(mean['np_add'])}; "
              f"call path: {_call_backend()}",
    )
    details = {
        "sizes": list(OVERHEAD_SIZES),
        "mean_s": mean,
        "median_per_size_s": {k: {str(n): t for n, t in v.items()} for k, v in
                              per_size.items()},
        "rounds_s": raw,
        "rounds": cfg["overhead_rounds"],
        "min_time_s": cfg["overhead_min_time"],
    }
    return [figure], details


def _call_backend() -> str:
    from kiln.runtime import fastcall

    return fastcall.backend()


# ---------------------------------------------------------------------------------------
# 3. build time
# ---------------------------------------------------------------------------------------

# Run in a fresh interpreter: imports first (not timed), then build_probe times the builds.
_CHILD = (
    "import json, sys\n"
    "import numpy, kiln\n"
    "from benchmarks.foundation import build_probe\n"
    "print('KILN-BENCH ' + json.dumps(build_probe(json.loads(sys.argv[1]))))\n"
)


def build_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Run in a child process by :func:`bench_build`: build the vector add ``spec["builds"]``
    times (same schedule), then time ``kiln.lower`` alone and the first call."""
    import cProfile

    import kiln

    n, factor = spec["n"], spec["factor"]
    profile = spec.get("profile")  # {"build index": path to write the stats to}
    builds = []
    mod = None
    for i in range(spec.get("builds", 1)):
        t0 = time.perf_counter()
        s, args = vector_add_schedule(n, factor)
        t1 = time.perf_counter()
        prof_path = (profile or {}).get(str(i))
        prof = cProfile.Profile() if prof_path else None
        if prof:
            prof.enable()
        mod = kiln.build(s, args, target="llvm", name="vector_add")
        if prof:
            prof.disable()
            prof.dump_stats(prof_path)
        t2 = time.perf_counter()
        builds.append({"schedule_s": t1 - t0, "build_s": t2 - t1})
    s, args = vector_add_schedule(n, factor)
    t0 = time.perf_counter()
    kiln.lower(s, args, simple_mode=True)
    lower_s = time.perf_counter() - t0
    x, y = _inputs(n)
    a, b, c = kiln.nd.array(x), kiln.nd.array(y), kiln.nd.empty((n,), "float32")
    t0 = time.perf_counter()
    mod(a, b, c)
    first_call_s = time.perf_counter() - t0
    from kiln.runtime import fastcall

    return {"builds": builds, "lower_s": lower_s, "first_call_s": first_call_s,
            "correct": bool(np.array_equal(c.numpy(), x + y)),
            "call_backend": fastcall.backend()}


def _run_child(spec: dict[str, Any], cache: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["KILN_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(common.REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], env=env,
                         cwd=common.REPO_ROOT, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    for line in res.stdout.splitlines():
        if line.startswith("KILN-BENCH "):
            out = json.loads(line[len("KILN-BENCH "):])
            out["process_wall_s"] = wall
            return out
    tail = (res.stderr or res.stdout).strip().splitlines()[-5:]
    raise RuntimeError(f"build probe failed (exit {res.returncode}): " + " / ".join(tail))


def bench_build(cfg: dict[str, Any]) -> tuple[list[Figure], dict[str, Any]]:
    reps = cfg["build_reps"]
    cold_factors = [32, 128, 256, 512, 8][:reps]  # all differ from the first build's
    profile_dir = cfg.get("profile_dir")
    details: dict[str, Any] = {"n": N, "first": None, "cold": [], "warm": []}
    figures: list[Figure] = []
    try:
        with fresh_cache() as cache:
            # (a) The very first build with an empty cache, then its first call: the first
            # call of any kiln function compiles the fast-call C extension.
            first = _run_child({"n": N, "factor": FACTORS[0]}, cache)
            details["first"] = first
            # (b) Cold builds of other schedules: the extension is now cached.
            for factor in cold_factors:
                details["cold"].append(_run_child({"n": N, "factor": factor}, cache))
            # (c) Warm: the same schedules again in new processes (cache hits), each built
            # several times; the second and later builds are in-process warm builds.
            for factor in cold_factors:
                spec = {"n": N, "factor": factor, "builds": 1 + cfg["warm_builds"]}
                details["warm"].append(_run_child(spec, cache))
            # (d) With --profile: extra probes (not in the figures) under cProfile.
            if profile_dir:
                stats = {k: str(Path(profile_dir) / f"{k}.prof")
                         for k in ("build_cold", "build_warm_new_process", "build_warm")}
                details["profiled"] = [
                    _run_child({"n": N, "factor": 1024, "profile": {"0": stats["build_cold"]}},
                               cache),
                    _run_child({"n": N, "factor": 1024, "builds": 2, "profile": {
                        "0": stats["build_warm_new_process"], "1": stats["build_warm"]}}, cache),
                ]
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        details["error"] = str(e)
        figures.append(Figure(key="build.error", label="build time", kiln=None, unit="s",
                              notes=f"failed: {e}"))
        return figures, details

    first_build = first["builds"][0]["build_s"]
    cold = [r["builds"][0]["build_s"] for r in details["cold"]]
    warm_new = [r["builds"][0]["build_s"] for r in details["warm"]]
    warm_in = [b["build_s"] for r in details["warm"] for b in r["builds"][1:]]
    lower = [r["lower_s"] for r in details["cold"]]
    cold_calls = [r["first_call_s"] for r in details["cold"]]
    med = statistics.median
    figures += [
        Figure(key="build.first", label="first build ever: empty cache, new process",
               kiln=first_build, unit="s", goal="≤ 0.5 s",
               within_goal=first_build <= GOAL_COLD_S,
               notes="kiln.build of the factor-16 schedule; import kiln not counted"),
        Figure(key="build.first_call", label="its first call (compiles the fast-call "
               "C extension)", kiln=first["first_call_s"], unit="s",
               notes=f"one-off per cache dir; later first calls: {fmt_time(med(cold_calls))}"),
        Figure(key="build.cold", label="cold build: new process, library not cached",
               kiln=med(cold), unit="s", goal="≤ 0.5 s",
               within_goal=med(cold) <= GOAL_COLD_S,
               notes=f"median of {len(cold)} schedules (factors "
                     f"{', '.join(map(str, cold_factors))}); kiln.lower alone: "
                     f"{fmt_time(med(lower))}"),
        Figure(key="build.warm_new_process", label="warm build: new process, cache hit",
               kiln=med(warm_new), unit="s", goal="≤ 20 ms",
               within_goal=med(warm_new) <= GOAL_WARM_S,
               notes=f"median of {len(warm_new)} processes"),
        Figure(key="build.warm_in_process", label="warm build: same process, cache hit",
               kiln=med(warm_in), unit="s", goal="≤ 20 ms",
               within_goal=med(warm_in) <= GOAL_WARM_S,
               notes=f"median of {len(warm_in)} builds"),
    ]
    details["summary_s"] = {"first_build": first_build, "first_call": first["first_call_s"],
                            "cold": cold, "warm_new_process": warm_new,
                            "warm_in_process": warm_in, "lower": lower}
    return figures, details


# ---------------------------------------------------------------------------------------
# 4. memory
# ---------------------------------------------------------------------------------------

def _count(k: int) -> str:
    """10**5 as "10^5", other counts as they are."""
    e = len(str(k)) - 1
    return f"10^{e}" if k == 10**e and e > 2 else str(k)


MEM_SIZES = (1024, 2048, 4096, 8192)
MEM_FACTORS = (4, 8, 16, 32, 64)  # 4 sizes x 5 factors = 20 distinct schedules


def bench_memory(cfg: dict[str, Any]) -> tuple[list[Figure], dict[str, Any]]:
    import kiln

    calls, builds = cfg["mem_calls"], cfg["mem_builds"]
    n = 1024
    mod = build_vector_add(n, 16)
    x, y = _inputs(n)
    z = np.empty_like(x)
    a, b, c = kiln.nd.array(x), kiln.nd.array(y), kiln.nd.empty((n,), "float32")
    for _ in range(1000):  # warm-up
        mod(a, b, c)
        np.add(x, y, out=z)
    before = common.settled_rss()
    for _ in range(calls):
        mod(a, b, c)
    after = common.settled_rss()
    np_before = after
    for _ in range(calls):
        np.add(x, y, out=z)
    np_after = common.settled_rss()
    call_growth, np_growth = after - before, np_after - np_before

    variants = [(size, f) for size in MEM_SIZES for f in MEM_FACTORS]
    with fresh_cache():
        b0 = common.settled_rss()
        t0 = time.perf_counter()
        first_pass = 0.0
        b1 = b0
        checkpoints: dict[int, int] = {}  # builds done -> RSS, every 10% of the builds
        for i in range(builds):
            size, factor = variants[i % len(variants)]
            build_vector_add(size, factor)
            if i + 1 == len(variants):
                first_pass = time.perf_counter() - t0
                b1 = common.settled_rss()
            if (i + 1) % max(builds // 10, 1) == 0:
                checkpoints[i + 1] = common.settled_rss()
        total = time.perf_counter() - t0
        b2 = common.settled_rss()
    hits = max(builds - len(variants), 0)
    half = min(checkpoints, key=lambda k: abs(k - builds // 2), default=builds)
    late = b2 - checkpoints.get(half, b2)
    figures = [
        Figure(key="memory.calls",
               label=f"RSS growth over {_count(calls)} calls of a vector add (n = 1024)",
               kiln=call_growth, unit="bytes",
               notes=f"same count of np.add(x, y, out=z): {np_growth / MB:+.2f} MB; "
                     f"RSS {before / MB:.1f} → {after / MB:.1f} MB"),
        Figure(key="memory.builds",
               label=f"RSS growth over {_count(builds)} builds "
                     f"({len(variants)} distinct schedules)",
               kiln=b2 - b0, unit="bytes",
               notes=f"first pass ({len(variants)} compiles): {(b1 - b0) / MB:+.2f} MB in "
                     f"{first_pass:.1f} s; then {hits} cache hits: {(b2 - b1) / MB:+.2f} MB, "
                     f"{fmt_time((total - first_pass) / hits if hits else None)} each; "
                     f"last {builds - half} builds: {late / MB:+.2f} MB"),
    ]
    details = {
        "method": common.rss_method(),
        "calls": {"count": calls, "n": n, "schedule": schedule_name(16),
                  "rss_before_mb": before / MB, "rss_after_mb": after / MB,
                  "growth_mb": call_growth / MB, "numpy_growth_mb": np_growth / MB},
        "builds": {"count": builds, "distinct": len(variants),
                   "variants": [f"n={s}, factor={f}" for s, f in variants],
                   "rss_before_mb": b0 / MB, "rss_after_first_pass_mb": b1 / MB,
                   "rss_after_mb": b2 / MB, "growth_mb": (b2 - b0) / MB,
                   "first_pass_s": first_pass, "total_s": total,
                   "rss_checkpoints_mb": {str(k): v / MB for k, v in checkpoints.items()}},
    }
    return figures, details


# ---------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {"quick": True, "repeat": 7, "min_time": 0.02, "overhead_rounds": 1,
                "overhead_min_time": 0.05, "build_reps": 1, "warm_builds": 5,
                "mem_calls": 10**4, "mem_builds": 200}
    return {"quick": False, "repeat": 25, "min_time": 0.05, "overhead_rounds": 3,
            "overhead_min_time": 0.25, "build_reps": 3, "warm_builds": 10,
            "mem_calls": 10**5, "mem_builds": 10**3}


SECTIONS = (
    ("vector_add", bench_vector_add),
    ("overhead", bench_overhead),
    ("build", bench_build),
    ("memory", bench_memory),
)


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    """Run the suite, write ``<out_dir>/foundation.{json,md}``, return the markdown."""
    started = time.time()
    t0 = time.perf_counter()
    cfg = settings(quick)
    load_start = common.load_average()
    out = Path(out_dir or common.RESULTS_DIR)
    if profile:
        out.mkdir(parents=True, exist_ok=True)
        cfg["profile_dir"] = str(out)
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    with fresh_cache():  # hermetic: this run's builds never touch the user's cache
        for name, section in SECTIONS:
            if verbose:
                print(f"[{NAME}] {name} ...", file=sys.stderr, flush=True)
            s0 = time.perf_counter()
            figs, det = section(cfg)
            det["section_s"] = round(time.perf_counter() - s0, 2)
            figures += figs
            details[name] = det
            gc.collect()
        machine = common.machine_info(load_start)
    shown = {k: v for k, v in cfg.items() if k != "profile_dir"}
    _, md_path, text = common.write_report(
        NAME, figures, machine=machine, settings=shown, details=details, started=started,
        duration_s=time.perf_counter() - t0, out_dir=out, title="Foundation")
    common.show_report(text, md_path, verbose)
    if verbose and profile:
        _print_profiles(out)
    return text


def _print_profiles(out: Path, top: int = 15) -> None:
    import pstats

    for name in ("build_cold.prof", "build_warm_new_process.prof", "build_warm.prof"):
        path = out / name
        if path.exists():
            print(f"\n== cProfile of {name[:-5]} (saved in {path}), by internal time ==")
            pstats.Stats(str(path)).sort_stats("tottime").print_stats(top)


def main(argv: Sequence[str] | None = None) -> int:
    p = common.suite_parser(NAME, DESCRIPTION,
                            "fewer repeats, 10^4 calls and 200 builds (about a minute)")
    p.add_argument("--profile", action="store_true",
                   help="also cProfile one cold and one warm build and print the hot spots")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out, profile=args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
