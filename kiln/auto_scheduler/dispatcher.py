"""``ApplyHistoryBest``: the best logged state of each workload, for code asking by key.

``with ApplyHistoryBest(log): ...`` makes :func:`query` (and ``DispatchContext.current``)
answer ``(workload_key, target) -> State`` from the fastest successful records of the log.
:func:`schedule_from_history` is what ``relay.build``'s op strategy asks first under
``PassContext(config={"relay.backend.use_auto_scheduler": True})``: the best logged
schedule of a fused group's computation, found by its DAG's workload key.
"""

from __future__ import annotations

import json

from .compute_dag import ComputeDAG
from .loop_state import State
from .measure import MeasureErrorNo
from .measure_record import load_records, same_target

__all__ = ["DispatchContext", "ApplyHistoryBest", "schedule_from_history"]


class DispatchContext:
    """The innermost active dispatch context (``DispatchContext.current``)."""

    current: DispatchContext | None = None

    def query(self, target, workload_key: str) -> State | None:
        raise NotImplementedError

    def __enter__(self):
        self._previous, DispatchContext.current = DispatchContext.current, self
        return self

    def __exit__(self, *exc):
        DispatchContext.current = self._previous


class ApplyHistoryBest(DispatchContext):
    """The fastest record per (workload key, target) of logs or loaded records."""

    def __init__(self, records, n_lines: int | None = None,
                 include_compatible: bool = False) -> None:
        self.best: dict[str, list] = {}  # workload key -> [(target, cost, state)]
        sources = records if isinstance(records, (list, tuple)) else [records]
        for src in sources:
            rows = load_records(src) if isinstance(src, str) else [src]
            for k, (inp, res) in enumerate(rows):
                if n_lines is not None and k >= n_lines:
                    break
                if res.error_no == MeasureErrorNo.NO_ERROR:
                    self._add(inp.task.workload_key, str(inp.task.target), res.cost, inp.state)

    def _add(self, key: str, target: str, cost: float, state: State) -> None:
        rows = self.best.setdefault(key, [])
        for k, (t, c, _) in enumerate(rows):
            if t == target:
                if cost < c:
                    rows[k] = (t, cost, state)
                return
        rows.append((target, cost, state))

    def query(self, target, workload_key: str) -> State | None:
        """The best state of ``workload_key`` on ``target`` (records of ``llvm`` and ``c``
        are interchangeable); None when the logs have none."""
        rows = [r for r in self.best.get(workload_key, []) if same_target(r[0], str(target))]
        return min(rows, key=lambda r: r[1])[2] if rows else None


def schedule_from_history(outs: list, target) -> tuple[object, str] | None:
    """``(schedule, label)`` of the computation of ``outs`` with the state the current
    dispatch context holds for its DAG's workload key (``label`` names its hash), or None
    outside a dispatch context or when it has no record of the computation."""
    ctx = DispatchContext.current
    if ctx is None:
        return None
    dag = ComputeDAG(outs)
    key = dag.workload_key()
    state = ctx.query(target, key)
    if state is None:
        return None
    sch, _ = dag.apply_steps_from_state(state)
    return sch, f"best state of DAG {json.loads(key)[0][:12]}"
