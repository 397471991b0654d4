"""Measurement of candidate states: TVM's ``auto_scheduler`` builders, runners and
callbacks on kiln's AutoTVM measurement machinery.

:class:`LocalBuilder` compiles candidates in forked children and :class:`LocalRunner`
times them in a worker interpreter, exactly as AutoTVM's (docs/autotvm.md): a crash, a hang
or a wrong answer is one failed :class:`MeasureResult`, and every candidate's output is
checked against the unscheduled computation. Only the constructor arguments are TVM's
``auto_scheduler`` ones. :class:`RecordToFile` appends each measured batch to a log
(:mod:`.measure_record`).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from kiln.autotvm.measure import LocalBuilder as _AutoTVMBuilder
from kiln.autotvm.measure import LocalRunner as _AutoTVMRunner
from kiln.autotvm.measure import MeasureErrorNo, MeasureResult

__all__ = ["MeasureInput", "MeasureResult", "MeasureErrorNo", "LocalBuilder", "LocalRunner",
           "MeasureCallback", "RecordToFile"]


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
