"""Tuning logs: one JSON object per line, one line per measured state.

``{"i": [[workload_key, target], [step, ...]], "r": [[seconds, ...], error_no, all_cost,
timestamp], "v": "v0.6"}``: the input names the computation (its workload key, see
:mod:`.workload_registry`) and the target, and holds the state as its transform steps
(:mod:`.loop_state`), so :meth:`SearchTask.apply_best` replays the best one. This is the
shape of TVM's ``auto_scheduler`` records, with stages and loops named instead of numbered.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

from .loop_state import State
from .measure import MeasureErrorNo, MeasureInput, MeasureResult

__all__ = ["save_records", "load_records", "load_best_record", "RecordReader", "same_target"]

VERSION = "v0.6"


@dataclass(frozen=True)
class RecordTask:
    """What a record says of its task."""

    workload_key: str
    target: str


def encode(inp: MeasureInput, res: MeasureResult) -> str:
    """One log line."""
    costs = [float(c) for c in res.costs] if res.error_no == MeasureErrorNo.NO_ERROR \
        else [str(c)[-2000:] for c in res.costs]  # an error's message, its end kept
    return json.dumps({"i": [[inp.task.workload_key, str(inp.task.target)],
                             inp.state.to_json()],
                       "r": [costs, int(res.error_no), res.all_cost, res.timestamp],
                       "v": VERSION})


def decode(line: str) -> tuple[MeasureInput, MeasureResult]:
    """The input and result of one log line."""
    row = json.loads(line)
    (key, target), steps = row["i"]
    costs, error_no, all_cost, timestamp = row["r"]
    return (MeasureInput(RecordTask(key, target), State.from_json(steps)),
            MeasureResult(tuple(costs), int(error_no), float(all_cost), float(timestamp)))


def save_records(filename: str, inputs, results) -> None:
    """Append ``inputs`` with their ``results`` to the log ``filename``."""
    with open(filename, "a") as f:
        for inp, res in zip(inputs, results, strict=True):
            f.write(encode(inp, res) + "\n")


def load_records(filename: str) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """The records of a log, in order (a malformed line raises with its number)."""
    with open(filename) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield decode(line)
            except (ValueError, KeyError, TypeError, IndexError) as e:
                raise ValueError(f"{filename}:{n}: not an auto_scheduler record ({e})") from e


class RecordReader:
    """TVM's ``RecordReader(filename)``: iterate the records, or ``read_lines()``."""

    def __init__(self, filename: str) -> None:
        self.filename = filename

    def __iter__(self):
        return load_records(self.filename)

    def read_lines(self, max_lines: int | None = None, skip_lines: int = 0):
        rows = list(load_records(self.filename))[skip_lines:]
        rows = rows[:max_lines] if max_lines is not None else rows
        return [r[0] for r in rows], [r[1] for r in rows]


def load_best_record(filename: str, workload_key: str | None = None,
                     target: str | None = None) -> tuple[MeasureInput, MeasureResult] | None:
    """The fastest successful record of ``workload_key`` (any when None) on ``target``
    (records of ``llvm`` and ``c`` are interchangeable); None when there is none. Records
    are ranked by their median time, as AutoTVM's."""
    best, best_cost = None, math.inf
    for inp, res in load_records(filename):
        if res.error_no != MeasureErrorNo.NO_ERROR:
            continue
        if workload_key is not None and inp.task.workload_key != workload_key:
            continue
        if target is not None and not same_target(inp.task.target, str(target)):
            continue
        if res.cost < best_cost:
            best, best_cost = (inp, res), res.cost
    return best


def same_target(a: str, b: str) -> bool:
    """Do records of target ``a`` apply to target ``b``: the same kind, or two CPU kinds
    (``llvm`` and ``c`` compile alike)."""
    cpu = ("llvm", "c")
    return a.split()[0] == b.split()[0] or (a.split()[0] in cpu and b.split()[0] in cpu)
