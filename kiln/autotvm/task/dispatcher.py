"""Dispatch contexts: which config a template gets when it is called.

A template asks the innermost context for the config of ``(target, workload)``:

* :class:`ApplyConfig` gives one fixed config (used to instantiate a task's candidates);
* :class:`ApplyHistoryBest` gives the best config measured for the workload in tuning
  records (``with autotvm.apply_history_best("tune.log"): s, args = matmul(...)``), and
  asks the context below it when the records have none;
* :class:`FallbackContext`, always at the bottom, gives a :class:`FallbackConfigEntity`
  and logs once per workload that nothing was tuned for it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .space import FallbackConfigEntity

logger = logging.getLogger("autotvm")

__all__ = ["DispatchContext", "ApplyConfig", "ApplyHistoryBest", "FallbackContext",
           "apply_history_best", "target_key", "has_tuned_config"]


def target_key(target) -> str:
    """The family a target's records are shared within: ``cpu`` (llvm, c) or ``cuda``."""
    kind = str(target if target is not None else "llvm").split()[0]
    return "cpu" if kind in ("llvm", "c") else kind


class DispatchContext:
    """Base of the context stack; ``DispatchContext.current`` is the innermost."""

    _local = threading.local()

    def __init__(self) -> None:
        self._old: DispatchContext | None = None

    @classmethod
    def _stack(cls) -> list:
        st = getattr(cls._local, "stack", None)
        if st is None:
            st = cls._local.stack = [FallbackContext()]
        return st

    @classmethod
    def current(cls) -> DispatchContext:
        return cls._stack()[-1]

    def query(self, target, workload) -> Any:
        """The config for ``workload`` on ``target``: this context's answer, or the answer
        of the context below it."""
        cfg = self._query_inside(target, workload)
        if cfg is not None:
            return cfg
        stack = self._stack()
        below = stack[stack.index(self) - 1] if self in stack and stack.index(self) > 0 \
            else stack[0]
        return below.query(target, workload)

    def _query_inside(self, target, workload):
        raise NotImplementedError

    def __enter__(self):
        self._stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        stack = self._stack()
        if stack and stack[-1] is self:
            stack.pop()


class ApplyConfig(DispatchContext):
    """Every template called inside gets ``config``."""

    def __init__(self, config) -> None:
        super().__init__()
        self._config = config
        self.workload = None

    def _query_inside(self, target, workload):
        self.workload = workload
        return self._config


class ApplyHistoryBest(DispatchContext):
    """The best (median repeat) successful config per workload from tuning records:
    a log file name, or an iterable of ``(MeasureInput, MeasureResult)``."""

    def __init__(self, records) -> None:
        super().__init__()
        self.best_by_workload: dict[tuple, tuple[Any, float]] = {}
        if records is not None:
            self.load(records)

    def load(self, records) -> None:
        from kiln.autotvm.record import load_from_file

        if isinstance(records, str | bytes) or hasattr(records, "__fspath__"):
            records = load_from_file(records)
        n = 0
        for inp, res in records:
            n += 1
            if res.error_no != 0:
                continue
            cost = res.cost
            key = (target_key(inp.target), inp.task.workload)
            best = self.best_by_workload.get(key)
            if best is None or cost < best[1]:
                self.best_by_workload[key] = (inp.config, cost)
        logger.debug("apply_history_best: %d records, %d workloads", n,
                     len(self.best_by_workload))

    def _query_inside(self, target, workload):
        best = self.best_by_workload.get((target_key(target), workload))
        return None if best is None else best[0]


class FallbackContext(DispatchContext):
    """The bottom of the stack: a FallbackConfigEntity per workload (kept, so an operator
    library may preset its knobs), with one log line per workload."""

    def __init__(self) -> None:
        super().__init__()
        self.memory: dict[tuple, FallbackConfigEntity] = {}
        self.silent = False

    def _query_inside(self, target, workload):
        key = (target_key(target), workload)
        cfg = self.memory.get(key)
        if cfg is None:
            if not self.silent:
                logger.warning(
                    "Cannot find config for target=%s, workload=%s. A fallback configuration "
                    "is used, which may bring great performance regression.",
                    target if target is not None else "llvm", workload)
            cfg = self.memory[key] = FallbackConfigEntity()
        return cfg

    def query(self, target, workload):
        return self._query_inside(target, workload)

    def clear_cache(self, target, workload) -> None:
        self.memory.pop((target_key(target), workload), None)


def apply_history_best(records) -> ApplyHistoryBest:
    """``with autotvm.apply_history_best("tune.log"):`` templates (and
    ``task.instantiate``) called inside use the best configs found in the records."""
    return ApplyHistoryBest(records)


def has_tuned_config(target, workload) -> bool:
    """Whether tuning records in a context on the stack (an :class:`ApplyHistoryBest`) hold
    a config for ``workload`` on ``target``; asks without the fallback's log line, so an
    operator library can choose among templates by what was tuned."""
    return any(isinstance(ctx, ApplyHistoryBest) and ctx._query_inside(target, workload)
               is not None for ctx in DispatchContext._stack())

