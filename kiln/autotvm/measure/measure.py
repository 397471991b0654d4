"""Measurement records and options: what is measured, what came back, how to measure.

``measure_option(builder=LocalBuilder(...), runner=LocalRunner(...))`` says how candidates
are compiled and timed; ``create_measure_batch(task, option)`` turns it into a function that
measures a list of :class:`MeasureInput` and returns one :class:`MeasureResult` each. A
failed candidate is a result with an error number (:class:`MeasureErrorNo`) and its message
in ``costs``, never an exception.
"""

from __future__ import annotations

import enum
import statistics
from typing import Any, NamedTuple

__all__ = ["MeasureErrorNo", "MeasureInput", "MeasureResult", "BuildResult", "Builder",
           "Runner", "measure_option", "create_measure_batch", "MeasureBatch"]


class MeasureErrorNo(enum.IntEnum):
    """Why a candidate has no time."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the template rejected the config or raised
    COMPILE_HOST = 2  # lowering or the C compiler failed
    COMPILE_DEVICE = 3  # device code generation failed
    RUNTIME_DEVICE = 4  # the kernel crashed or returned an error
    WRONG_ANSWER = 5  # its output differs from the reference
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


class MeasureInput(NamedTuple):
    """One candidate: a task's config on a target."""

    target: Any
    task: Any
    config: Any


class MeasureResult(NamedTuple):
    """Times of one candidate in seconds (``costs``, one per repeat; on error, its
    message), its error number, the seconds the whole measurement took and when it ended
    (Unix time). Tuners rank candidates by ``cost``, the median repeat: on a machine shared
    with other work single repeats were off by up to 2x in both directions."""

    costs: tuple
    error_no: int
    all_cost: float
    timestamp: float

    @property
    def mean(self) -> float:
        return sum(self.costs) / len(self.costs) if self.error_no == 0 else float("inf")

    @property
    def cost(self) -> float:
        """The median repeat in seconds (infinity for a failed candidate)."""
        return statistics.median(self.costs) if self.error_no == 0 else float("inf")


class BuildResult(NamedTuple):
    """A built candidate: its library, ``arg_info`` ((shape, dtype, is_output) per
    argument), or the error (``error_no`` and message)."""

    filename: str | None
    arg_info: tuple
    error_no: int
    error: str | None
    time_cost: float


class Builder:
    """Compiles candidates (base class)."""

    n_parallel = 1

    def set_task(self, task, build_kwargs: dict | None = None) -> None:
        """Build candidates of ``task``; ``build_kwargs`` are what the runner says of its
        device (:meth:`Runner.get_build_kwargs`)."""
        self.task = task
        self.build_kwargs = dict(build_kwargs or {})

    def build(self, measure_inputs) -> list[BuildResult]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Runner:
    """Times built candidates (base class)."""

    def get_build_kwargs(self, task) -> dict:
        """What the builder must know of the device that times ``task``'s candidates
        (a GPU's architecture); none by default."""
        return {}

    def set_task(self, task, builder: Builder) -> None:
        self.task = task

    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def measure_option(builder: Builder | str | None = None,
                   runner: Runner | str | None = None) -> dict:
    """How to measure: ``{"builder": ..., "runner": ...}`` (LocalBuilder and LocalRunner
    with their defaults when not given). As in TVM, ``"local"`` names the local one."""
    from .local import LocalBuilder, LocalRunner

    return {"builder": _by_name(builder, "builder", LocalBuilder),
            "runner": _by_name(runner, "runner", LocalRunner)}


def _by_name(given, role: str, local: type):
    """``given``, or a default ``local()`` for None or ``"local"``."""
    if given is None or (isinstance(given, str) and given == "local"):
        return local()
    if isinstance(given, str):
        raise ValueError(
            f"measure_option: invalid {role} '{given}'; pass \"local\" or a {role} object, "
            f"e.g. {role}=autotvm.{local.__name__}()")
    return given


class MeasureBatch:
    """``measure_batch(inputs) -> results``; ``close()`` stops the worker processes."""

    def __init__(self, task, option: dict) -> None:
        self.builder: Builder = option["builder"]
        self.runner: Runner = option["runner"]
        self.n_parallel = max(1, int(getattr(self.builder, "n_parallel", 1)))
        self.builder.set_task(task, self.runner.get_build_kwargs(task))
        self.runner.set_task(task, self.builder)

    def __call__(self, measure_inputs) -> list[MeasureResult]:
        builds = self.builder.build(list(measure_inputs))
        return self.runner.run(list(measure_inputs), builds)

    def close(self) -> None:
        self.runner.close()
        self.builder.close()


def create_measure_batch(task, option: dict) -> MeasureBatch:
    return MeasureBatch(task, option)
