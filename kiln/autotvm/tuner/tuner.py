"""The tuning loop shared by every tuner.

``tuner.tune(n_trial, measure_option, early_stopping=None, callbacks=())`` repeats: ask the
tuner for a batch of unmeasured configs (``next_batch``), measure them (one batch =
``builder.n_parallel`` candidates), tell the tuner (``update``), call the callbacks; it stops
after ``n_trial`` candidates, when the space is exhausted, or after ``early_stopping``
candidates without a better one. A failed candidate counts as a trial with 0 FLOP/s.
"""

from __future__ import annotations

import logging

import numpy as np

from ..measure.measure import MeasureInput, create_measure_batch

logger = logging.getLogger("autotvm")

__all__ = ["Tuner"]


class Tuner:
    """Base class: subclasses implement ``next_batch``, ``has_next`` and ``update``."""

    def __init__(self, task, **kwargs):
        if kwargs:
            raise TypeError(f"unexpected tuner options: {', '.join(kwargs)}")
        if task.config_space is None:
            raise ValueError("the task has no config space; make it with autotvm.task.create")
        self.task = task
        self.space = task.config_space
        self.visited: set[int] = set()
        self.best_config = None
        self.best_flops = 0.0
        self.best_measure_pair = None
        self.best_iter = 0
        self.trials_done = 0

    # ---- to implement ----
    def next_batch(self, batch_size: int) -> list:
        raise NotImplementedError

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def update(self, inputs, results) -> None:
        """Learn from measured candidates (default: nothing)."""

    # ---- helpers ----
    @staticmethod
    def flops_of(task, result) -> float:
        if result.error_no != 0:
            return 0.0
        cost = result.cost
        return (task.flop if task.flop else 1.0) / cost if cost > 0 else 0.0

    def _random_unvisited(self, rng: np.random.Generator) -> int | None:
        n = len(self.space)
        if len(self.visited) >= n:
            return None
        if n - len(self.visited) < 64 or n <= 4096 and len(self.visited) > n // 2:
            free = [i for i in range(n) if i not in self.visited]
            return int(free[rng.integers(len(free))])
        while True:
            i = int(rng.integers(n))
            if i not in self.visited:
                return i

    def load_history(self, data_set, min_seed_records: int = 500) -> list:
        """Learn from earlier tuning records (transfer learning). ``data_set``:
        ``(MeasureInput, MeasureResult)`` pairs (``autotvm.record.load_from_file(log)``) or
        a log path. Records of this very workload (same template, arguments and target
        family, a config of this space) mark their configs as visited: they are not
        measured again. Model-based tuners also train their cost model on the records of
        the same template (see ModelBasedTuner.load_history); ``min_seed_records`` is for
        them. Returns the records, as a list."""
        from .transfer import compatible_history, load_records

        del min_seed_records
        records = load_records(data_set)
        groups = compatible_history(records, self.task)
        if groups and groups[0].task is self.task:
            seen = {idx for idx, _ in groups[0].records if self._in_range(idx)} - self.visited
            if seen:
                logger.info("history: %d configs of %s were measured before and are skipped",
                            len(seen), self.task.name)
            self.visited |= seen
        return records

    def _in_range(self, index: int) -> bool:
        """Whether the tuner may propose config ``index`` (all of the space by default)."""
        return True

    def reset(self) -> None:
        self.visited = set()
        self.best_config, self.best_flops, self.best_measure_pair = None, 0.0, None
        self.best_iter = self.trials_done = 0

    # ---- the loop ----
    def tune(self, n_trial: int, measure_option: dict, early_stopping: int | None = None,
             callbacks=(), si_prefix: str = "G") -> None:
        measure_batch = create_measure_batch(self.task, measure_option)
        n_parallel = measure_batch.n_parallel
        early = early_stopping if early_stopping is not None else float("inf")
        i = 0
        try:
            while i < n_trial and self.has_next():
                configs = self.next_batch(min(n_parallel, n_trial - i))
                if not configs:
                    break
                inputs = [MeasureInput(self.task.target, self.task, c) for c in configs]
                results = measure_batch(inputs)
                for k, (inp, res) in enumerate(zip(inputs, results, strict=True)):
                    flops = self.flops_of(self.task, res)
                    if flops > self.best_flops:
                        self.best_flops = flops
                        self.best_config = inp.config
                        self.best_measure_pair = (inp, res)
                        self.best_iter = i + k
                    logger.debug("No: %d\t%s GFLOPS: %.2f\terror_no: %d\t%s", i + k + 1,
                                 si_prefix, flops / 1e9, res.error_no, inp.config)
                i += len(results)
                self.trials_done = i
                self.update(inputs, results)
                for cb in callbacks:
                    cb(self, inputs, results)
                if i >= self.best_iter + early:
                    logger.info("early stopping after %d trials without improvement", early)
                    break
        finally:
            measure_batch.close()
