"""Shared pieces of the benchmark suites: timing, machine description, memory, reports.

Timing follows *Dive into Deep Learning Compiler* (§4.2): warm the workload up, run it enough
times that one measurement lasts long enough to be trusted, and summarise repeated
measurements by their median. kiln and its reference (numpy, ...) are measured in the same
process with their repeats interleaved (kiln, numpy, kiln, numpy, ...), so a change in machine
load during the run affects both alike.

Nothing here asserts anything about timings: the suites measure and report, nothing fails.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
import timeit
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "results"


def load_example(folder: str, name: str) -> ModuleType:
    """Import ``examples/<folder>/<name>.py`` by path (examples/ is not a package), as a
    fresh module that is not entered in ``sys.modules``."""
    path = REPO_ROOT / "examples" / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kiln_example_{folder}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------


def bench_workload(workload: Callable[[int], float], min_time: float = 1.0) -> float:
    """Seconds per run of ``workload``, the book's way (d2ltvm.bench_workload, §4.2).

    ``workload(k)`` runs the work ``k`` times and returns the total seconds (e.g. the
    ``timeit`` method of a ``timeit.Timer``). One warm-up run, one run to estimate the cost,
    then enough runs to last at least ``min_time`` seconds (and at least 5); returns their
    mean. The book uses ``min_time=1.0``.
    """
    workload(1)  # warm-up
    once = workload(1)
    if once > min_time:
        return once
    runs = max(int(min_time / max(once, 1e-9)), 5)
    return workload(runs) / runs


@dataclass
class Timing:
    """Repeated measurements of one workload: seconds per call, one entry per repeat."""

    results: list[float]
    number: int  # calls per measurement

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "median_s": self.median,
            "mean_s": self.mean,
            "min_s": self.min,
            "max_s": max(self.results),
            "repeat": len(self.results),
            "number": self.number,
            "results_s": self.results,
        }


def _timer(stmt: str | Callable[[], Any], env: Mapping[str, Any] | None) -> timeit.Timer:
    return timeit.Timer(stmt, globals=dict(env or {}))


def calls_for(timer: timeit.Timer, min_time: float) -> int:
    """How many calls make one measurement last at least ``min_time`` seconds."""
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= min_time:
            return number
        if elapsed <= 0:
            number *= 10
        else:
            number = max(number + 1, int(number * min(10.0, 1.2 * min_time / elapsed)))


def interleaved(
    candidates: Mapping[str, str | Callable[[], Any]],
    env: Mapping[str, Any] | None = None,
    *,
    repeat: int = 15,
    min_time: float = 0.05,
    warmup: int = 3,
    settle: Mapping[str, float] | None = None,
) -> dict[str, Timing]:
    """Time several workloads with their repeats interleaved, in this process.

    ``candidates`` maps a name to a statement (a string run with ``env`` as its globals, as
    with ``timeit``, so only the statement itself is timed) or a callable. Each is warmed up
    with ``warmup`` calls; then its number of calls per measurement is chosen so that one
    measurement lasts at least ``min_time`` seconds; then ``repeat`` rounds each measure every
    candidate once, in an order rotated from round to round. ``settle`` maps a name to
    seconds to sleep after each of its measurements (not timed): a BLAS whose worker threads
    keep spinning after a call would otherwise slow down whichever candidate runs next.
    Returns seconds per call.
    """
    timers = {name: _timer(stmt, env) for name, stmt in candidates.items()}
    for t in timers.values():
        t.timeit(warmup)
    numbers = {name: calls_for(t, min_time) for name, t in timers.items()}
    results: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    for r in range(repeat):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            results[name].append(timers[name].timeit(numbers[name]) / numbers[name])
            if settle and settle.get(name):
                time.sleep(settle[name])
    return {name: Timing(results[name], numbers[name]) for name in names}


def interleaved_book(
    candidates: Mapping[str, str | Callable[[], Any]],
    env: Mapping[str, Any] | None = None,
    *,
    rounds: int = 3,
    min_time: float = 1.0,
) -> dict[str, Timing]:
    """Like :func:`interleaved`, but each measurement is one :func:`bench_workload` call
    (warm-up, then runs lasting ``min_time``), repeated for ``rounds`` interleaved rounds."""
    timers = {name: _timer(stmt, env) for name, stmt in candidates.items()}
    results: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            results[name].append(bench_workload(timers[name].timeit, min_time))
    return {name: Timing(results[name], 0) for name in names}


@contextmanager
def threads_limited(n: int) -> Iterator[None]:
    """Inside, kiln's OpenMP loops, numpy's BLAS and PyTorch (if imported) use ``n`` threads.

    threadpoolctl sets the thread count of every BLAS and OpenMP runtime loaded *now* (so
    build kiln's modules before entering); PyTorch's intra-op pool is set with
    ``torch.set_num_threads``. Restores the previous counts on exit. Raises RuntimeError
    without threadpoolctl (there is no other portable way to change them in a process)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError as e:
        raise RuntimeError("threads_limited needs threadpoolctl (the bench extra)") from e
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    with threadpool_limits(limits=n):
        if torch is not None:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if torch is not None:
                torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------


def rss_bytes() -> int:
    """Resident memory of this process now, in bytes.

    Read from ``/proc/self/status`` (VmRSS); where there is no /proc, psutil if installed,
    else ``resource.getrusage`` (which gives the *peak* resident size, not the current one).
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


def rss_method() -> str:
    """Which source :func:`rss_bytes` reads."""
    if os.path.exists("/proc/self/status"):
        return "/proc/self/status VmRSS"
    try:
        import psutil  # noqa: F401

        return "psutil rss"
    except ImportError:
        return "resource.getrusage ru_maxrss (peak)"


def settled_rss() -> int:
    """Resident bytes after a full garbage collection."""
    gc.collect()
    return rss_bytes()


MB = 1024.0 * 1024.0

# ---------------------------------------------------------------------------------------
# Machine description
# ---------------------------------------------------------------------------------------


def _cpuinfo() -> tuple[str | None, int | None]:
    """CPU model name and number of physical cores, from /proc/cpuinfo (Linux)."""
    model, cores = None, set()
    phys = core = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key in ("model name", "Model", "cpu model") and model is None:
                    model = value
                elif key == "physical id":
                    phys = value
                elif key == "core id":
                    core = value
                elif not key and core is not None:
                    cores.add((phys, core))
                    phys = core = None
        if core is not None:
            cores.add((phys, core))
    except OSError:
        pass
    return model, (len(cores) or None)


def _numpy_blas() -> dict[str, Any]:
    """numpy's BLAS: threadpoolctl's view if it is installed, else numpy's build config."""
    try:
        from threadpoolctl import threadpool_info

        pools = [
            {k: p.get(k) for k in ("internal_api", "version", "num_threads", "user_api",
                                   "threading_layer", "architecture", "filepath")}
            for p in threadpool_info()
        ]
        return {"source": "threadpoolctl", "pools": pools}
    except ImportError:
        pass
    try:
        import numpy as np

        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        return {"source": "numpy.show_config (threadpoolctl not installed)",
                "name": blas.get("name"), "version": blas.get("version")}
    except Exception as e:  # older numpy: no mode="dicts"
        return {"source": "unknown", "error": str(e)}


def _compiler() -> dict[str, Any]:
    try:
        from kiln.runtime.compiler import DEFAULT_FLAGS, compiler_version, find_compiler

        version = compiler_version((find_compiler(),)).strip().splitlines()
        return {"path": find_compiler(), "version": version[0] if version else "",
                "default_flags": " ".join(DEFAULT_FLAGS)}
    except Exception as e:
        return {"error": str(e)}


def omp_threads() -> int:
    """Threads an OpenMP parallel loop of kiln uses by default: ``OMP_NUM_THREADS`` if set,
    else the CPUs this process may run on (libgomp's default)."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return available_cpus()


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info(load_start: list[float] | None = None) -> dict[str, Any]:
    """What the numbers were measured on; with ``load_start`` (the :func:`load_average` taken
    when the run began) also ``load_average_start``, which :func:`load_lines` reports."""
    import numpy as np

    model, physical = _cpuinfo()
    mem_total = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = round(int(line.split()[1]) / MB * 1024, 1)  # kB -> MB
    except OSError:
        pass
    try:
        import kiln

        kiln_version = getattr(kiln, "__version__", "?")
        from kiln.runtime import fastcall

        call_backend = fastcall.backend()
    except Exception as e:
        kiln_version, call_backend = f"unavailable ({e})", "?"
    info = {
        "cpu_model": model or platform.processor() or platform.machine(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": physical,
        "cpus_available": available_cpus(),
        "kiln_threads": omp_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "omp_wait_policy_env": os.environ.get("OMP_WAIT_POLICY"),
        "gomp_spincount_env": os.environ.get("GOMP_SPINCOUNT"),
        "memory_mb": mem_total,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "numpy_blas": _numpy_blas(),
        "kiln": kiln_version,
        "kiln_call_backend": call_backend,
        "load_average": load_average(),
        "c_compiler": _compiler(),
    }
    if load_start is not None:
        info["load_average_start"] = load_start
    return info


def machine_lines(m: Mapping[str, Any]) -> list[str]:
    """The machine description as short ``key: value`` lines."""
    blas = m.get("numpy_blas", {})
    if blas.get("source") == "threadpoolctl":
        blas_text = "; ".join(
            f"{p.get('internal_api')} {p.get('version')} ({p.get('num_threads')} threads)"
            for p in blas.get("pools", [])
        ) or "none loaded"
    else:
        blas_text = f"{blas.get('name')} {blas.get('version')} ({blas.get('source')})"
    cc = m.get("c_compiler", {})
    return [
        f"CPU: {m['cpu_model']}",
        f"cores: {m['physical_cores']} physical, {m['logical_cpus']} logical, "
        f"{m['cpus_available']} available to this process",
        f"threads used by kiln's parallel loops: {m['kiln_threads']} "
        f"(OMP_NUM_THREADS={m['omp_num_threads_env'] or 'unset'}, "
        f"OMP_WAIT_POLICY={m.get('omp_wait_policy_env') or 'unset'}, "
        f"GOMP_SPINCOUNT={m.get('gomp_spincount_env') or 'unset'}); numpy's np.add: 1",
        f"memory: {m['memory_mb']} MB",
        f"Python {m['python']}, numpy {m['numpy']}, numpy BLAS: {blas_text}",
        f"kiln {m['kiln']}, call path: {m['kiln_call_backend']}, C compiler: "
        f"{cc.get('version', cc.get('error'))}",
        f"platform: {m['platform']}",
        *load_lines(m),
    ]


def load_lines(m: Mapping[str, Any]) -> list[str]:
    """The load average at the start and end of the run, flagged when the machine was busy
    (other processes competing for the cores disturb the timings, parallel ones most)."""
    start, end = m.get("load_average_start"), m.get("load_average")
    if not end:
        return []
    text = f"load average (1, 5, 15 min): at start {start}, at end {end}"
    cpus = m.get("cpus_available") or 1
    # The suite itself accounts for about 1 of the load at the end.
    busy = (start or [0])[0] > 0.5 * cpus or end[0] > cpus
    if busy:
        text += (f" — BUSY: other work competed for the {cpus} cores during the run; "
                 "timings (parallel ones most) are disturbed")
    return [text]


# ---------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------


def results_dir(out_dir: str | Path | None = None) -> Path:
    """The folder a suite writes to (``out_dir``, default ``results/``), created."""
    out = Path(out_dir or RESULTS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_date(started: float) -> str:
    """``started`` (a ``time.time()``) as the reports give it: local ISO date, to the second."""
    return _dt.datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds")


def write_results(name: str, data: Mapping[str, Any], markdown: str,
                  out_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Every suite's output: ``data`` as ``<out_dir>/<name>.json`` (indented, values JSON
    does not know written as ``str``) and ``markdown`` as ``<out_dir>/<name>.md``.
    Returns both paths."""
    out = results_dir(out_dir)
    json_path = out / f"{name}.json"
    json_path.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    md_path = out / f"{name}.md"
    md_path.write_text(markdown, encoding="utf-8")
    return json_path, md_path


def show_report(text: str, md_path: Path, verbose: bool = True) -> None:
    """Print a suite's markdown report and where it and its JSON were written."""
    if verbose:
        print(text)
        print(f"written: {md_path} and {md_path.with_suffix('.json')}")


def progress(name: str, verbose: bool = True) -> Callable[[str], None]:
    """``say(msg)``: a progress line ``[name] msg`` on stderr (nothing unless ``verbose``)."""

    def say(msg: str) -> None:
        if verbose:
            print(f"[{name}] {msg}", file=sys.stderr, flush=True)

    return say


def suite_parser(name: str, description: str, quick_help: str = "fewer repeats"
                 ) -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.<name>``: ``--quick`` and ``--out``; a
    suite adds its own options."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=description)
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--out", default=None, help="results directory (default: results/)")
    return p


def tuning_parser(name: str, description: str, default_trials: int,
                  workloads: Sequence[str]) -> argparse.ArgumentParser:
    """:func:`suite_parser` of a tuning suite: ``--quick`` (16 trials a workload),
    ``--trials N`` and ``--workloads`` (a comma-separated subset of ``workloads``); read it
    with :func:`parse_tuning_args`."""
    p = suite_parser(name, description,
                     quick_help=f"16 trials a workload instead of {default_trials}")
    p.add_argument("--trials", type=int, default=None, help="trials per workload")
    p.add_argument("--workloads", default=",".join(workloads),
                   help=f"comma-separated subset of {','.join(workloads)}")
    return p


def parse_tuning_args(p: argparse.ArgumentParser, argv, workloads: Sequence[str]
                      ) -> argparse.Namespace:
    """The arguments of a :func:`tuning_parser`, ``workloads`` as a checked list."""
    args = p.parse_args(argv)
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = sorted(set(args.workloads) - set(workloads))
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(workloads)}")
    if args.trials is not None and args.trials < 1:
        p.error("--trials must be at least 1")
    return args


@dataclass
class Figure:
    """One row of a results table."""

    key: str  # stable identifier, e.g. "vector_add.parallel16"
    label: str  # what was measured
    kiln: float | None  # the measured kiln value (seconds, or bytes for memory)
    unit: str  # "s" or "bytes"
    reference: float | None = None
    reference_label: str = ""
    goal: str = ""  # human-readable target, e.g. "<= 1.2x numpy"
    within_goal: bool | None = None  # informational only; nothing fails on it
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.kiln is None or not self.reference:
            return None
        return self.kiln / self.reference


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e9:.0f} ns"


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "s":
        return fmt_time(value)
    if unit == "bytes":
        return f"{value / MB:+.2f} MB"
    return f"{value:.4g} {unit}"


def markdown_table(figures: list[Figure]) -> str:
    head = ["#", "measurement", "kiln", "reference", "kiln / ref", "goal", "met", "notes"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, f in enumerate(figures, 1):
        ref = "—" if f.reference is None else (
            f"{fmt_value(f.reference, f.unit)} ({f.reference_label})"
            if f.reference_label else fmt_value(f.reference, f.unit))
        ratio = "—" if f.ratio is None else f"{f.ratio:.2f}×"
        met = {True: "yes", False: "no", None: "—"}[f.within_goal]
        cells = [str(i), f.label, fmt_value(f.kiln, f.unit), ref, ratio, f.goal or "—", met,
                 f.notes]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def write_report(
    name: str,
    figures: list[Figure],
    *,
    machine: Mapping[str, Any],
    settings: Mapping[str, Any],
    details: Mapping[str, Any],
    started: float,
    duration_s: float,
    out_dir: str | Path | None = None,
    title: str = "",
) -> tuple[Path, Path, str]:
    """The report of a suite whose results are a list of :class:`Figure`: write
    ``<out_dir>/<name>.json`` and ``<out_dir>/<name>.md`` (a table of the figures) with
    :func:`write_results`; return both paths and the markdown text."""
    when = run_date(started)
    data = {
        "suite": name,
        "date": when,
        "duration_s": round(duration_s, 2),
        "machine": dict(machine),
        "settings": dict(settings),
        "figures": [
            {**{k: v for k, v in asdict(f).items() if k != "extra"}, "ratio": f.ratio,
             **({"extra": f.extra} if f.extra else {})}
            for f in figures
        ],
        "details": dict(details),
    }
    md = [
        f"# {title or name} benchmarks",
        "",
        f"Run {when}, {duration_s:.0f} s, settings: "
        + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
        *(f"- {line}" for line in machine_lines(machine)),
        "",
        markdown_table(figures),
        "",
        "The goal column is informational; nothing fails on it. See docs/benchmarks.md.",
        "",
    ]
    text = "\n".join(md)
    json_path, md_path = write_results(name, data, text, out_dir)
    return json_path, md_path, text


# ---------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------


def plot_series(path: Path, title: str, x: list, series: Mapping[str, list[float | None]], *,
                xlabel: str = "size", ylabel: str = "GFLOP/s", logx: bool = False,
                logy: bool = False, xticklabels: list[str] | None = None,
                categorical: bool = False) -> Path | None:
    """One PNG line plot, the book's way (``d2ltvm.plot``): ``series`` maps a legend entry
    to one value per ``x`` (None: not measured), kiln's series solid, references dashed.
    ``categorical``: equally spaced points named ``xticklabels``; otherwise the points sit
    at ``x`` (log base 2 with ``logx``), labelled ``xticklabels`` or their values.
    Returns the path, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(5.0, 3.4), dpi=110)
    xs = list(range(len(x))) if categorical else list(x)
    for name, ys in series.items():
        pts = [(a, b) for a, b in zip(xs, ys, strict=True) if b is not None]
        if not pts:
            continue
        ax.plot([a for a, _ in pts], [b for _, b in pts], "o-" if "kiln" in name else "s--",
                label=name, markersize=3.5)
    if logx and not categorical:
        ax.set_xscale("log", base=2)
    if categorical or len(xs) <= 12:  # the measured sizes as the ticks
        ax.set_xticks(xs)
        ax.set_xticklabels(xticklabels or [f"{v:g}" for v in xs], fontsize=7)
        ax.minorticks_off()
    if logy:
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
