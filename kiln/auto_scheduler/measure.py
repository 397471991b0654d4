"""Measurement of candidate states: TVM's ``auto_scheduler`` builders, runners and
callbacks on kiln's AutoTVM measurement machinery.

:class:`LocalBuilder` compiles candidates in forked children and :class:`LocalRunner`
times them in a worker interpreter, exactly as AutoTVM's (docs/autotvm.md): a crash, a hang
or a wrong answer is one failed :class:`MeasureResult`, and every candidate's output is
checked against the unscheduled computation. Only the constructor arguments are TVM's
``auto_scheduler`` ones. :class:`ProgramMeasurer` measures states of any task with one
builder and runner (a task scheduler's tasks in turn); :class:`RecordToFile` appends each
measured batch to a log (:mod:`.measure_record`).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from kiln.autotvm.measure import LocalBuilder as _AutoTVMBuilder
from kiln.autotvm.measure import LocalRunner as _AutoTVMRunner
from kiln.autotvm.measure import MeasureErrorNo, MeasureResult, create_measure_batch
from kiln.autotvm.measure import MeasureInput as _BuildInput

__all__ = ["MeasureInput", "MeasureResult", "MeasureErrorNo", "LocalBuilder", "LocalRunner",
           "MeasureCallback", "RecordToFile", "ProgramMeasurer"]


class MeasureInput(NamedTuple):
    """A state of a task (for a record read from a log, ``task`` has only
    ``workload_key`` and ``target``)."""

    task: object
    state: object


class LocalBuilder(_AutoTVMBuilder):
    """Compile candidates here, ``n_parallel`` at a time, each within ``timeout`` s."""

    def __init__(self, timeout: float = 15, n_parallel: int | None = None,
                 build_func: str = "default") -> None:
        if build_func != "default":
            raise NotImplementedError(f"auto_scheduler.LocalBuilder(build_func={build_func!r})"
                                      f": kiln builds shared libraries only (\"default\")")
        super().__init__(timeout=timeout, n_parallel=n_parallel or os.cpu_count() or 1)


class LocalRunner(_AutoTVMRunner):
    """Time candidates here: ``repeat`` measurements of ``number`` calls (``number`` grows
    until one lasts ``min_repeat_ms``), after a run checked against the reference."""

    def __init__(self, timeout: float = 10, number: int = 3, repeat: int = 1,
                 min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False) -> None:
        if enable_cpu_cache_flush:
            raise NotImplementedError("auto_scheduler.LocalRunner(enable_cpu_cache_flush=True)"
                                      ": kiln's runner does not flush caches between runs")
        super().__init__(timeout=timeout, number=number, repeat=repeat,
                         min_repeat_ms=min_repeat_ms, cooldown_interval=cooldown_interval)


class MeasureCallback:
    """Called after each measured batch with the policy, inputs and results."""

    def callback(self, policy, inputs, results) -> None:
        raise NotImplementedError


class RecordToFile(MeasureCallback):
    """Append every measured state with its result to the log ``filename``."""

    def __init__(self, filename: str) -> None:
        self.filename = str(filename)

    def callback(self, policy, inputs, results) -> None:
        from .measure_record import save_records

        save_records(self.filename, inputs, results)


class ProgramMeasurer:
    """Builds and times states of tasks with one builder and runner (``"local"`` or None:
    a default :class:`LocalBuilder`/:class:`LocalRunner`), then calls the measure
    callbacks. Switching to another task makes the runner compute that task's reference
    result anew; its worker process is kept until :meth:`close`."""

    def __init__(self, builder="local", runner="local", callbacks=()) -> None:
        self.builder = LocalBuilder() if builder in (None, "local") else builder
        self.runner = LocalRunner() if runner in (None, "local") else runner
        self.callbacks = list(callbacks)
        self._task = None
        self._batch = None

    def measure(self, task, policy, states) -> tuple[list[MeasureInput], list[MeasureResult]]:
        """Measure ``states`` of ``task``; ``(inputs, results)``, one each."""
        if task is not self._task:
            self._task = task
            self._batch = create_measure_batch(task, {"builder": self.builder,
                                                      "runner": self.runner})
        results = self._batch([_BuildInput(task.target, task, s) for s in states])
        inputs = [MeasureInput(task, s) for s in states]
        for cb in self.callbacks:
            cb.callback(policy, inputs, results)
        return inputs, results

    def close(self) -> None:
        if self._batch is not None:
            self._batch.close()
        self._task = self._batch = None
