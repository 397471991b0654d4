"""Which records of earlier tuning a tuner can learn from (transfer learning).

``Tuner.load_history(records)`` gets ``(MeasureInput, MeasureResult)`` pairs of any tasks.
:func:`compatible_history` keeps those of the same template on the same target family
whose config space has the same knobs (names and kinds, in order) as the task being tuned,
groups them by workload, recreates each workload's task (its space and flop count) and
checks every record's config against that space: a record whose index names another
config (a log of an older version of the template) is dropped. The result is what a cost
model trains on (see ``XGBoostCostModel.fit_log``); records of the task's own workload also
tell any tuner which configs were measured already.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, NamedTuple

from ..task.dispatcher import target_key
from ..task.task import _workload_to_args, create

logger = logging.getLogger("autotvm")

__all__ = ["load_records", "same_knobs", "config_index", "HistoryGroup",
           "compatible_history"]


def load_records(data_set) -> list[tuple[Any, Any]]:
    """``data_set`` as a list of ``(MeasureInput, MeasureResult)``: a log path, or an
    iterable of pairs (e.g. ``autotvm.record.load_from_file(log)``)."""
    from ..record import load_from_file

    if isinstance(data_set, str | bytes | os.PathLike):
        return list(load_from_file(data_set))
    records = list(data_set)
    for r in records:
        if not (isinstance(r, tuple | list) and len(r) == 2 and hasattr(r[0], "task")
                and hasattr(r[1], "error_no")):
            raise TypeError("load_history takes (MeasureInput, MeasureResult) pairs, e.g. "
                            "autotvm.record.load_from_file(log), or a log path; got "
                            f"{type(r).__name__}")
    return records


def same_knobs(a, b) -> bool:
    """True when two config spaces have the same knobs: names and kinds, in order."""
    return [(k, type(s)) for k, s in a.space_map.items()] == \
        [(k, type(s)) for k, s in b.space_map.items()]


def _entities(config) -> list:
    return json.loads(json.dumps(config.to_json_dict()["entity"], default=str))


def config_index(space, config) -> int | None:
    """The index of ``config`` (from a record) in ``space``: its own index when that names
    the same knob values, else None."""
    idx = getattr(config, "index", None)
    if not isinstance(idx, int) or not 0 <= idx < len(space):
        return None
    return idx if _entities(space.get(idx)) == _entities(config) else None


class HistoryGroup(NamedTuple):
    """The usable records of one workload: its task and ``(config index, result)`` pairs."""

    task: Any
    records: list


def compatible_history(records, task) -> list[HistoryGroup]:
    """Records of ``task``'s template usable for it, one group per workload (the task's own
    workload first, when present; its group's task is ``task`` itself)."""
    by_workload: dict[tuple, list] = {}
    family = target_key(task.target)
    for inp, res in records:
        t = inp.task
        if t.name != task.name or target_key(inp.target) != family:
            continue
        by_workload.setdefault(t.workload, []).append((inp, res))
    groups = []
    for workload, recs in by_workload.items():
        if workload == task.workload:
            htask = task
        else:
            try:
                htask = create(task.name, _workload_to_args(recs[0][0].task.args), task.target)
            except Exception as e:  # noqa: BLE001 - a workload the template no longer takes
                logger.debug("history: skipping workload %s (%s)", workload, e)
                continue
            if not same_knobs(htask.config_space, task.config_space):
                logger.debug("history: skipping workload %s: its knobs differ", workload)
                continue
        pairs = []
        for inp, res in recs:
            idx = config_index(htask.config_space, inp.config)
            if idx is not None:
                pairs.append((idx, res))
        if pairs:
            groups.append(HistoryGroup(htask, pairs))
    groups.sort(key=lambda g: g.task is not task)
    return groups
