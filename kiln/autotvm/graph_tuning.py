"""Tuning a whole model within a time budget (what ``kiln tune`` runs).

``tune_graph(mod, params, "tune.json", budget_s=600)`` extracts the model's tasks
(:func:`~kiln.autotvm.task.extract_from_program`), then tunes them one after the other,
biggest first. Each task gets a share of the time that is left, in proportion to a weight
of ``0.2 / n_tasks + 0.8 * its share of the model's flops`` (a task's flops count once per
kernel using it), but at least :data:`MIN_TASK_S`, so the heavy convolutions get most of
the time; time a task leaves unused (early stopping, a small space) goes to the tasks after
it, and when the budget is spent the remaining (lightest) tasks are skipped.

Every task measures the hand schedule (the template's fallback config) first. On a machine
shared with other work, one measurement of a 2-thread kernel varies up to ~1.7x with the
load of the moment, so the fastest of a hundred trials is often a config measured in a
quiet moment rather than a faster one. After its search, each task therefore runs a
*verification round*: the hand config and the ``verify_top`` fastest configs found are
measured again, interleaved, ``verify_rounds`` times, and the config with the lowest median
wins (the hand config when nothing beats it). The winners go to a best-records file (TVM's
``pick_best`` step): compile with ``autotvm.apply_history_best(best_file)``. The full log
keeps every trial (the verification measurements included).
"""

from __future__ import annotations

import re
import statistics
import sys
import time

from . import record
from .measure import (
    DaskBuilder,
    DaskRunner,
    LocalBuilder,
    LocalRunner,
    MeasureInput,
    MeasureResult,
    measure_option,
)
from .measure.measure import create_measure_batch
from .task.relay_integration import extract_from_program
from .task.space import FallbackConfigEntity
from .tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner, callback
from .tuner.transfer import load_records

__all__ = ["parse_budget", "budget_weights", "hand_config_index", "measure_first", "make_tuner",
           "verify_best", "tune_tasks", "tune_graph", "TUNERS"]

TUNERS = ("xgb", "ga", "random", "grid")

#: the least time a task gets while the budget lasts: starting the measurement worker,
#: the reference run and the verification round take ~3 s (on a loaded 2-core machine), so
#: a smaller share would measure nothing; the lightest tasks (tuned last) are skipped when
#: the budget runs out
MIN_TASK_S = 6.0

_UNITS = {"h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0, "": 1.0}


def parse_budget(text) -> float:
    """Seconds of a budget: ``"10m"``, ``"90s"``, ``"1h30m"``, ``"2.5m"``, ``"45"``
    (seconds). Raises ValueError on anything else or a budget that is not positive."""
    s = str(text).strip().lower()
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)\s*(h|min|m|s|)\s*", s)
    ok = bool(s) and "".join(a + u for a, u in parts) == s.replace(" ", "")
    if not ok or (len(parts) > 1 and any(u == "" for _, u in parts)):
        raise ValueError(f"budget {text!r}: expected a duration such as 10m, 90s, 1h30m or "
                         "a number of seconds")
    total = sum(float(a) * _UNITS[u] for a, u in parts)
    if total <= 0:
        raise ValueError(f"budget {text!r}: must be more than zero")
    return total


def budget_weights(tasks) -> list[float]:
    """Each task's share of the budget (summing to 1): ``0.2 / n + 0.8 * flop share``."""
    if not tasks:
        return []
    work = [max(t.flop, 1.0) * getattr(t, "num_uses", 1) for t in tasks]
    total = sum(work)
    return [0.2 / len(tasks) + 0.8 * w / total for w in work]


def hand_config_index(task) -> int | None:
    """The index, in ``task.config_space``, of the config the template's fallback (the hand
    schedule) chooses; None when the fallback is not a point of the space."""
    cfg = FallbackConfigEntity()
    task.instantiate(cfg)
    space = task.config_space
    choice = []
    for name, knob in space.space_map.items():
        if name not in cfg:
            return None
        found = [i for i in range(len(knob)) if knob[i] == cfg[name]]
        if not found:
            return None
        choice.append(found[0])
    return space.index_of(choice)


def make_tuner(kind: str, task, seed: int = 0, n_trial: int = 64):
    """A tuner by name: ``xgb`` (knob features, a plan a quarter of the trials, at least 8),
    ``ga``, ``random`` or ``grid``."""
    if kind == "xgb":
        return XGBTuner(task, plan_size=max(8, min(64, n_trial // 4)), feature_type="knob",
                        seed=seed)
    if kind == "ga":
        return GATuner(task, pop_size=max(4, min(50, n_trial // 2)))
    if kind == "random":
        return RandomTuner(task, seed=seed)
    if kind == "grid":
        return GridSearchTuner(task)
    raise ValueError(f"unknown tuner {kind!r}; use one of {', '.join(TUNERS)}")


def measure_first(tuner, index: int) -> None:
    """Make ``tuner``'s first batch start with config ``index`` (the hand schedule), so the
    best record of a tuning run is never slower than the untuned schedule."""
    original = tuner.next_batch

    def first_batch(batch_size: int) -> list:
        tuner.next_batch = original
        tuner.visited.add(index)
        rest = original(batch_size - 1) if batch_size > 1 else []
        return [tuner.space.get(index), *rest]

    tuner.next_batch = first_batch


class _OutOfTime(Exception):
    pass


def _stop_at(deadline: float):
    def cb(tuner, inputs, results):
        if time.monotonic() >= deadline:
            raise _OutOfTime
    return cb


def _watch(index: int | None, stats: dict):
    """Record the hand config's GFLOP/s when it is measured."""
    def cb(tuner, inputs, results):
        for inp, res in zip(inputs, results, strict=True):
            if inp.config.index == index:
                stats["hand_flops"] = tuner.flops_of(tuner.task, res)
    return cb


def verify_best(task, candidates, option, rounds: int = 3, log_file=None):
    """Measure config indices ``candidates`` of ``task`` again, interleaved (the order
    rotated each round), ``rounds`` times; returns ``(winner record, {index: median
    seconds})``: the record's costs are the winner's per-round times. Failed measurements
    count as infinitely slow. Every measurement is appended to ``log_file`` when given."""
    cands = list(dict.fromkeys(candidates))
    times: dict[int, list[float]] = {i: [] for i in cands}
    batch = create_measure_batch(task, option)
    try:
        for r in range(rounds):
            order = cands[r % len(cands):] + cands[:r % len(cands)]
            inputs = [MeasureInput(task.target, task, task.config_space.get(i)) for i in order]
            results = batch(inputs)
            if log_file is not None:
                record.save_to_file(zip(inputs, results, strict=True), log_file)
            for i, res in zip(order, results, strict=True):
                times[i].append(res.cost)
    finally:
        batch.close()
    med = {i: statistics.median(v) for i, v in times.items()}
    win = min(cands, key=lambda i: (med[i], cands.index(i)))
    res = MeasureResult(tuple(times[win]), 0, 0.0, time.time())
    return (MeasureInput(task.target, task, task.config_space.get(win)), res), med


def default_measure_option(dask_client=None, resource: str = "device:cpu"):
    """Builds on every core, each candidate timed as 3 repeats of at least 20 ms; with a
    ``distributed.Client``, builds on every worker of its Dask cluster and timings on the
    workers holding ``resource`` (kiln/autotvm/measure/dask.py)."""
    timing = dict(timeout=30, number=2, repeat=3, min_repeat_ms=20)
    if dask_client is None:
        return measure_option(builder=LocalBuilder(timeout=60), runner=LocalRunner(**timing))
    return measure_option(builder=DaskBuilder(dask_client, timeout=60),
                          runner=DaskRunner(dask_client, resource=resource, **timing))


def describe_task(task) -> str:
    """``conv2d_NCHWc.x86 data[1,4,56,56,16] weight[4,4,3,3,16,16] s1 x2``."""
    parts = [task.name]
    for a, label in zip(task.workload[1:3], ("data", "weight"), strict=False):
        if isinstance(a, tuple) and a and a[0] == "TENSOR":
            parts.append(f"{label}[{','.join(str(d) for d in a[1])}]")
    if task.name.startswith(("conv2d", "depthwise")):
        parts.append(f"stride {task.workload[3][0]}")
    uses = getattr(task, "num_uses", 1)
    if uses > 1:
        parts.append(f"x{uses}")
    return " ".join(parts)


def _collect(measured: dict):
    """Keep the fastest cost of every successful config index."""
    def cb(tuner, inputs, results):
        for inp, res in zip(inputs, results, strict=True):
            if res.error_no == 0:
                measured[inp.config.index] = min(res.cost, measured.get(inp.config.index,
                                                                        float("inf")))
    return cb


def _ms(s: float) -> str:
    if s == float("inf"):
        return "failed"
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} µs"


def tune_tasks(tasks, log_file, budget_s: float, option=None, tuner: str = "xgb",
               n_trial: int = 200, early_stopping: int | None = None, seed: int = 0,
               best_file=None, verify_top: int = 3, verify_rounds: int = 3,
               stream=None, history=None, min_seed_records: int = 500) -> list[dict]:
    """Tune ``tasks`` within ``budget_s`` seconds in all (see the module doc), appending
    every measurement to ``log_file``. At most ``n_trial`` trials per task, stopping a task
    after ``early_stopping`` trials without improvement; the search of a task stops at 80 %
    of its share, leaving the rest to its verification round (``verify_top`` = 0: none).
    The winner of each task is written to ``best_file`` (replaced) when given. Returns one
    dict per task, in tuning order: ``task``, ``trials``, ``seconds``, ``best_flops`` (of
    the search), ``best_config`` (the verified winner), ``hand_s`` and ``best_s`` (verified
    median seconds; None without verification).

    ``history`` (records of earlier tuning, or a log path) is given to every task's tuner
    (``Tuner.load_history``): configs of a workload measured before are not measured again
    and, with ``xgb``, the cost model of a template starts from the records of that template
    when at least ``min_seed_records`` of them fit the task."""
    if tuner not in TUNERS:
        raise ValueError(f"unknown tuner {tuner!r}; use one of {', '.join(TUNERS)}")
    out = stream or sys.stdout
    option = option or default_measure_option()
    history = load_records(history) if history is not None else None
    weights = budget_weights(tasks)
    order = sorted(range(len(tasks)), key=lambda i: -weights[i])
    end = time.monotonic() + budget_s
    left_weight = sum(weights)
    report, winners = [], []
    for k, i in enumerate(order):
        task = tasks[i]
        now = time.monotonic()
        left = max(0.0, end - now)
        share = min(max(left * weights[i] / max(left_weight, 1e-12), MIN_TASK_S), left)
        left_weight -= weights[i]
        stats = {"task": task, "trials": 0, "seconds": 0.0, "best_flops": 0.0,
                 "hand_flops": 0.0, "best_config": None, "hand_s": None, "best_s": None}
        report.append(stats)
        prefix = f"[Task {k + 1:2d}/{len(tasks):2d}] "
        if share < 1.0:
            out.write(f"{prefix}{describe_task(task)}: skipped (budget spent)\n")
            continue
        t = make_tuner(tuner, task, seed=seed, n_trial=n_trial)
        if history:
            before = len(t.visited)
            t.load_history(history, min_seed_records)
            out.write(f"{prefix}{describe_task(task)}: history: {len(t.visited) - before} "
                      "configs measured before"
                      + (", cost model trained on its template's records"
                         if getattr(t, "history_fitted", False) else "") + "\n")
        hand = hand_config_index(task)
        if hand is not None:
            measure_first(t, hand)
        trials = min(n_trial, len(task.config_space))
        measured: dict[int, float] = {}
        search_end = now + (share * 0.8 if verify_top > 0 else share)
        cbs = [callback.log_to_file(log_file), _watch(hand, stats), _collect(measured),
               callback.progress_bar(trials, prefix=prefix, stream=out), _stop_at(search_end)]
        try:
            t.tune(trials, option, early_stopping=early_stopping, callbacks=cbs)
        except _OutOfTime:
            pass
        stats.update(trials=t.trials_done, best_flops=t.best_flops, best_config=t.best_config)
        line = f"{prefix}{describe_task(task)}: {t.trials_done} trials"
        top = sorted(measured, key=measured.get)[:verify_top]
        if verify_top > 0 and top:
            cands = ([hand] if hand is not None else []) + top
            (inp, res), med = verify_best(task, cands, option, verify_rounds, log_file)
            winners.append((inp, res))
            stats.update(best_config=inp.config, best_s=med[inp.config.index],
                         hand_s=med.get(hand))
            line += (f"; verified ({verify_rounds} interleaved rounds, median): "
                     f"hand {_ms(med[hand]) if hand in med else '-'}, best config "
                     f"#{inp.config.index} {_ms(med[inp.config.index])}")
            if hand in med and med[inp.config.index] > 0:
                line += f" ({med[hand] / med[inp.config.index]:.2f}x)"
        elif t.best_measure_pair is not None:
            winners.append(t.best_measure_pair)
            line += f"; best {t.best_flops / 1e9:.2f} GFLOPS (config #{t.best_config.index})"
        stats["seconds"] = time.monotonic() - now
        out.write(f"{line}; {stats['seconds']:.0f} s\n")
        out.flush()
    if best_file is not None:
        record.save_to_file(winners, best_file, mode="w")
    return report


def tune_graph(mod, params, log_file, budget_s: float, target="llvm", ops=None, **kwargs):
    """Extract the tasks of ``mod`` and tune them within ``budget_s`` seconds (keyword
    arguments as :func:`tune_tasks`). Returns ``(tasks, report)``; compile with the result
    under ``autotvm.apply_history_best(best_file)`` (or the full log)."""
    tasks = extract_from_program(mod, params, target, ops=ops)
    return tasks, tune_tasks(tasks, log_file, budget_s, **kwargs)
