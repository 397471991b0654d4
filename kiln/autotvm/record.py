"""Tuning records: one JSON object per line, one line per measured candidate.

A line looks like::

    {"input": ["llvm", "matmul", [64, 64, 64, "float32"]],
     "config": {"index": 17, "code_hash": null,
                "entity": [["tile_x", "split", [-1, 8]], ["unroll", "knob", 16]]},
     "result": [[0.000012, 0.000011], 0, 0.41, 1763900000.0],
     "version": 1}

``result`` is ``[costs, error_no, all_cost, timestamp]``; for a failed candidate ``costs``
holds its error message. ``load_from_file`` yields ``(MeasureInput, MeasureResult)``;
``pick_best`` keeps the fastest successful record (by its median repeat) of each workload.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator

from .measure.measure import MeasureInput, MeasureResult
from .task.dispatcher import target_key
from .task.space import ConfigEntity
from .task.task import Task

__all__ = ["encode", "decode", "load_from_file", "save_to_file", "pick_best"]

VERSION = 1


def _jsonable(x):
    if isinstance(x, tuple | list):
        return [_jsonable(v) for v in x]
    if isinstance(x, float | int | str | bool) or x is None:
        return x
    return str(x)


def encode(inp: MeasureInput, result: MeasureResult) -> str:
    """One record as a JSON line (without the newline)."""
    costs = [float(c) for c in result.costs] if result.error_no == 0 \
        else [str(c)[-2000:] for c in result.costs]
    return json.dumps({
        "input": [str(inp.target or "llvm"), inp.task.name, _jsonable(inp.task.workload[1:])],
        "config": inp.config.to_json_dict(),
        "result": [costs, int(result.error_no), float(result.all_cost),
                   float(result.timestamp)],
        "version": VERSION,
    })


def _tuplify(x):
    return tuple(_tuplify(v) for v in x) if isinstance(x, list) else x


def decode(line: str) -> tuple[MeasureInput, MeasureResult] | None:
    """A record from one line; None for a blank line. Raises ValueError on a malformed one."""
    if not line.strip():
        return None
    try:
        row = json.loads(line)
        target, name, args = row["input"]
        task = Task(name, _tuplify(args), target)
        config = ConfigEntity.from_json_dict(row["config"])
        costs, error_no, all_cost, timestamp = row["result"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a kiln tuning record: {line[:120]!r} ({e})") from None
    return (MeasureInput(task.target, task, config),
            MeasureResult(tuple(costs), int(error_no), float(all_cost), float(timestamp)))


def load_from_file(filename) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """Every record of a log file, in order."""
    with open(os.fspath(filename), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                rec = decode(line)
            except ValueError as e:
                raise ValueError(f"{os.fspath(filename)}:{n}: {e}") from None
            if rec is not None:
                yield rec


def save_to_file(records: Iterable[tuple[MeasureInput, MeasureResult]], filename,
                 mode: str = "a") -> None:
    with open(os.fspath(filename), mode, encoding="utf-8") as f:
        for inp, res in records:
            f.write(encode(inp, res) + "\n")


def pick_best(in_file, out_file) -> None:
    """Write the fastest successful record of each (target, workload) of ``in_file``."""
    best: dict = {}
    for inp, res in load_from_file(in_file):
        if res.error_no != 0:
            continue
        key = (target_key(inp.target), inp.task.workload)
        if key not in best or res.cost < best[key][1].cost:
            best[key] = (inp, res)
    save_to_file(best.values(), out_file, mode="w")
