"""``ApplyHistoryBest``: the best logged state of each workload, for code asking by key.

``with ApplyHistoryBest(log): ...`` makes :func:`query` (and ``DispatchContext.current``)
answer ``(workload_key, target) -> State`` from the fastest successful records of the log.
:func:`schedule_from_history` is what ``relay.build``'s op strategy asks first under
``PassContext(config={"relay.backend.use_auto_scheduler": True})``: the best logged
schedule of a fused group's computation, found by its DAG's workload key, its constant
weights re-laid out once, at compile time, for the state's tiling (TVM's
``auto_scheduler_layout_rewrite`` pass).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from kiln.te.tensor import PlaceholderOp, Tensor

from .compute_dag import ComputeDAG
from .layout_rewrite import LayoutRewriteOption, apply_steps_with_rewrites
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


def schedule_from_history(outs: list, target, constants: Mapping[str, np.ndarray] | None = None
                          ) -> tuple | None:
    """``(schedule, label)`` of the computation of ``outs`` with the state the current
    dispatch context holds for its DAG's workload key (``label`` names its hash), or None
    outside a dispatch context or when it has no record of the computation.

    Where the state re-lays out layout-free weights (:mod:`.layout_rewrite`), those named
    in ``constants`` (placeholder name -> its value, known now) are transformed now
    (``REWRITE_FOR_PRE_TRANSFORMED``), the others copied by a stage of the kernel, and
    the result is ``(schedule, label, replaced)``: ``replaced`` maps each tensor of the
    computation that the kernel takes in another form (a pre-transformed weight, the
    outputs) to ``(its replacement, the replacement's value or None)``."""
    ctx = DispatchContext.current
    if ctx is None:
        return None
    dag = ComputeDAG(outs)
    key = dag.workload_key()
    state = ctx.query(target, key)
    if state is None:
        return None
    label = f"best state of DAG {json.loads(key)[0][:12]}"
    known = constants or {}
    in_graph = LayoutRewriteOption.get_target_default(target, in_relay_integration=True)
    rewrites = dag.layout_rewrites(state) if in_graph else []
    if not rewrites:
        sch, _ = dag.apply_steps_from_state(state)
        return sch, label
    pre = [r for r in rewrites if r.placeholder in known]
    sch, new_outs = apply_steps_with_rewrites(
        dag, state, lambda r: LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED if r in pre
        else LayoutRewriteOption.INSERT_TRANSFORM_STAGE)
    replaced = {old: (new, None) for old, new in zip(outs, new_outs, strict=True)}
    old_inputs, new_inputs = _placeholders(dag), _placeholders(ComputeDAG(new_outs))
    for r in pre:
        replaced[old_inputs[r.placeholder]] = (new_inputs[r.new_name],
                                               r.transform(known[r.placeholder]))
    names = ", ".join(f"{r.placeholder} {list(r.new_shape)}" for r in rewrites)
    return sch, f"{label}, layout of {names}", replaced


def _placeholders(dag: ComputeDAG) -> dict[str, Tensor]:
    return {op.name: op.output(0) for op in dag.ops if isinstance(op, PlaceholderOp)}
