"""Measurement of candidate states: TVM's ``auto_scheduler`` builders, runners and
callbacks on kiln's AutoTVM measurement machinery.

:class:`LocalBuilder` compiles candidates in forked children and :class:`LocalRunner`
times them in a worker interpreter, exactly as AutoTVM's (docs/autotvm.md): a crash, a hang
or a wrong answer is one failed :class:`MeasureResult`, and every candidate's output is
checked against the unscheduled computation. Only the constructor arguments are TVM's
``auto_scheduler`` ones. :class:`RPCRunner` times them on RPC servers through kiln's
tracker (AutoTVM's ``RPCRunner``, checking every candidate too);
:class:`LocalRPCMeasureContext` starts a tracker and a server on this machine for it.
:class:`ProgramMeasurer` measures states of any task with one
builder and runner (a task scheduler's tasks in turn); :class:`RecordToFile` appends each
measured batch to a log (:mod:`.measure_record`).
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from kiln.autotvm.measure import LocalBuilder as _AutoTVMBuilder
from kiln.autotvm.measure import LocalRunner as _AutoTVMRunner
from kiln.autotvm.measure import MeasureErrorNo, MeasureResult, create_measure_batch
from kiln.autotvm.measure import MeasureInput as _BuildInput
from kiln.autotvm.measure import RPCRunner as _AutoTVMRPCRunner

__all__ = ["MeasureInput", "MeasureResult", "MeasureErrorNo", "LocalBuilder", "LocalRunner",
           "RPCRunner", "LocalRPCMeasureContext", "MeasureCallback", "RecordToFile",
           "ProgramMeasurer"]


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
    until one lasts ``min_repeat_ms``), after a run checked against the reference; with
    ``enable_cpu_cache_flush``, the CPU caches emptied before each measurement (TVM's
    advice: ``number=1, repeat=10, min_repeat_ms=0``, so that every timed call is cold)."""

    def __init__(self, timeout: float = 10, number: int = 3, repeat: int = 1,
                 min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False) -> None:
        super().__init__(timeout=timeout, number=number, repeat=repeat,
                         min_repeat_ms=min_repeat_ms, cooldown_interval=cooldown_interval,
                         enable_cpu_cache_flush=enable_cpu_cache_flush)


class RPCRunner(_AutoTVMRPCRunner):
    """Time candidates on the RPC servers registered under ``key`` with the tracker at
    ``host:port`` (``python -m kiln.exec.rpc_tracker``; the address of one server works
    too), ``n_parallel`` at once, each checked against the unscheduled computation first
    (docs/autotvm.md, "RPCRunner", for what happens when a server fails)."""

    def __init__(self, key: str, host: str, port: int, priority: int = 1, n_parallel: int = 1,
                 timeout: float = 10, number: int = 3, repeat: int = 1,
                 min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False, device: int = 0) -> None:
        if device != 0:
            raise NotImplementedError(f"auto_scheduler.RPCRunner(device={device}): kiln's "
                                      f"RPC runner measures on device 0 of each server")
        super().__init__(key, host, port, priority=priority, timeout=timeout,
                         n_parallel=n_parallel, number=number, repeat=repeat,
                         min_repeat_ms=min_repeat_ms, cooldown_interval=cooldown_interval,
                         check_correctness=True,
                         enable_cpu_cache_flush=enable_cpu_cache_flush)


class LocalRPCMeasureContext:
    """A tracker and one RPC server (key ``"local"``) on 127.0.0.1 for as long as this
    object lives; :attr:`runner` is an :class:`RPCRunner` measuring on them (TVM's way to
    measure GPU kernels in a process of their own). The other arguments are the runner's.
    ``del ctx`` or :meth:`close` stops both."""

    def __init__(self, priority: int = 1, n_parallel: int = 1, timeout: float = 10,
                 number: int = 3, repeat: int = 1, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.0, enable_cpu_cache_flush: bool = False,
                 device: int = 0) -> None:
        from kiln import rpc

        self.tracker = rpc.Tracker("127.0.0.1", 0, silent=True)
        addr = ("127.0.0.1", self.tracker.port)
        self.server = rpc.Server("127.0.0.1", 0, silent=True, tracker_addr=addr, key="local")
        _wait_for_registration(addr, "local", REGISTRATION_TIMEOUT)
        self.runner = RPCRunner("local", *addr, priority, n_parallel, timeout, number, repeat,
                                min_repeat_ms, cooldown_interval, enable_cpu_cache_flush,
                                device)

    def close(self) -> None:
        """Stop the server and the tracker."""
        self.server.stop()
        self.tracker.stop()

    def __del__(self) -> None:
        if hasattr(self, "runner"):  # a context whose start failed has nothing to stop
            self.close()


#: seconds :class:`LocalRPCMeasureContext` waits for its server to register
REGISTRATION_TIMEOUT = 20.0


def _wait_for_registration(addr: tuple[str, int], key: str, timeout: float) -> None:
    """Return once a server of ``key`` is free at the tracker ``addr``; RuntimeError after
    ``timeout`` seconds."""
    from kiln import rpc

    client = rpc.connect_tracker(*addr)
    deadline = time.monotonic() + timeout
    while client.summary()["queue_info"].get(key, {}).get("free", 0) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"LocalRPCMeasureContext: the RPC server did not register "
                               f"with the tracker within {timeout:g} s")
        time.sleep(0.02)


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
