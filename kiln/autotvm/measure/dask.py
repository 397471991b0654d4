"""Measuring candidates on a Dask cluster: DaskBuilder and DaskRunner (``kiln[dask]``).

A user with a Dask ``distributed`` cluster spreads tuning over it without running kiln's
own tracker::

    client = distributed.Client("tcp://scheduler:8786")
    option = autotvm.measure_option(builder=autotvm.DaskBuilder(client),
                                    runner=autotvm.DaskRunner(client, resource="device:cpu"))

* :class:`DaskBuilder` builds each candidate on any worker with LocalBuilder's function
  (:func:`~kiln.autotvm.measure.local.build_candidate`), in kiln's measurement interpreter
  on that worker (:class:`~kiln.autotvm.measure.worker.Worker`: a build that hangs is
  killed after ``timeout``, one that crashes costs one candidate, not the Dask worker).
  The library comes back as bytes and is written to a private folder here, so any runner
  (LocalRunner, RPCRunner, DaskRunner) can time it.
* :class:`DaskRunner` times each candidate on a worker that holds one unit of the Dask
  worker resource ``resource`` (``dask worker tcp://scheduler:8786 --resources
  device:cpu=1``, one unit per device), so each device measures one candidate at a time.
  The library travels as bytes; on the worker it is checked and timed by LocalRunner's
  own code (:func:`~kiln.autotvm.measure.local.run_candidate`) in the measurement
  interpreter, with LocalRunner's error numbers (a crash is RUNTIME_DEVICE, a hang
  RUN_TIMEOUT, a wrong output WRONG_ANSWER).

What this module guarantees: every candidate of a batch gets exactly one result, in the
batch's order, collected as the candidates complete. A worker lost while it holds a
candidate is Dask's to handle: the scheduler runs the candidate again on another worker,
at most ``distributed.scheduler.allowed-failures`` times (3 by default); past that, or
when the task itself fails ``retries`` more times, or when no candidate of the batch
completes for ``wait_for_worker`` / ``wait_for_device`` seconds, the candidate becomes an
error result. The tuning log is written by the tuner in this process, one line per
result, after the batch (``callback.log_to_file``), so nothing a worker does can lose or
corrupt it.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ..task.space import FallbackConfigEntity
from .local import (
    _PRELOAD,
    _last_line,
    build_candidate,
    build_failure_result,
    build_outcome,
    ref_func_reference,
    run_result,
    set_measure_settings,
    worker_run_result,
)
from .measure import Builder, BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, Runner
from .worker import Worker

logger = logging.getLogger("autotvm")

__all__ = ["DaskBuilder", "DaskRunner", "require_distributed"]

_INSTALL = "pip install 'kiln[dask]' (the packages dask and distributed)"


def require_distributed():
    """The ``distributed`` module, or an ImportError saying how to install it."""
    try:
        import distributed
    except ImportError as e:
        raise ImportError(f"autotvm's Dask backend needs Dask distributed: {_INSTALL}") from e
    return distributed


def _checked_client(client, who: str):
    if not isinstance(client, require_distributed().Client):
        raise TypeError(f"{who}: expected a distributed.Client, got {type(client).__name__} "
                        "(connect with distributed.Client('tcp://scheduler:8786'))")
    return client


def _resource_units(client, resource: str | None) -> float:
    """Units of ``resource`` the cluster's workers hold (None: the number of workers)."""
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    if resource is None:
        return float(len(workers))
    return float(sum(w.get("resources", {}).get(resource, 0) for w in workers))


# ---------------------------------------------------------------------------------------
# On the workers: one measurement interpreter per Dask worker thread
# ---------------------------------------------------------------------------------------
class _Slot(NamedTuple):
    worker: Worker
    scratch: str
    lock: threading.Lock


_SLOTS: dict[tuple[str, int], _Slot] = {}
_SLOTS_LOCK = threading.Lock()


def _slot() -> _Slot:
    """The measurement interpreter and scratch folder of this Dask worker thread."""
    key = (require_distributed().get_worker().address, threading.get_ident())
    with _SLOTS_LOCK:
        if key not in _SLOTS:
            _SLOTS[key] = _Slot(Worker(preload=_PRELOAD),
                                tempfile.mkdtemp(prefix="kiln-dask-"), threading.Lock())
        return _SLOTS[key]


def release_slots(dask_worker) -> int:
    """Stop the idle measurement interpreters of ``dask_worker`` (run by ``client.run``;
    one busy with another client's candidate is left alone). Returns how many stopped."""
    stopped = 0
    with _SLOTS_LOCK:
        for key, slot in list(_SLOTS.items()):
            if key[0] != dask_worker.address or not slot.lock.acquire(blocking=False):
                continue
            try:
                slot.worker.close()
                shutil.rmtree(slot.scratch, ignore_errors=True)
                del _SLOTS[key]
                stopped += 1
            finally:
                slot.lock.release()
    return stopped


def build_pickled(blob: bytes, build_dir: str, build_kwargs: dict) -> BuildResult:
    """:func:`build_candidate` of a pickled MeasureInput (run in the measurement
    interpreter; the pickle is cloudpickle's, so a template of a script travels too)."""
    return build_candidate(pickle.loads(blob), build_dir, build_kwargs)


def build_on_worker(inp: MeasureInput, timeout: float, build_kwargs: dict
                    ) -> tuple[BuildResult, bytes | None]:
    """Build one candidate on this Dask worker: its BuildResult and library bytes. The
    build folder (kiln's compile cache) is the slot's, kept until it is released, as
    LocalBuilder keeps one per task: a fresh one per candidate compiled the C runtime
    again each time (5-10 s a build instead of 0.5 s on a loaded 2-core machine)."""
    import cloudpickle

    slot = _slot()
    with slot.lock:
        start = time.perf_counter()
        status, value = slot.worker.call(
            __name__, "build_pickled",
            (cloudpickle.dumps(inp), os.path.join(slot.scratch, "build"), build_kwargs), timeout)
        build = build_outcome(status, value, time.perf_counter() - start, timeout)
        if build.filename is None:
            return build, None
        return build, Path(build.filename).read_bytes()


class Timing(NamedTuple):
    """A DaskRunner's timing and checking settings, as sent to the workers."""

    timeout: float
    number: int
    repeat: int
    min_repeat_ms: float
    cooldown_interval: float
    rtol: float
    atol: float


def _write_library(scratch: str, name: str, lib: bytes) -> str:
    path = os.path.join(scratch, f"{uuid.uuid4().hex[:12]}-{name}")
    Path(path).write_bytes(lib)
    return path


def measure_on_worker(name: str, lib: bytes, arg_info, timing: Timing,
                      reference: tuple[str, bytes] | None) -> MeasureResult:
    """Check and time one library on this Dask worker (``reference``: its name and the
    bytes of the reference file, or None for no check)."""
    slot = _slot()
    with slot.lock:
        ref_path = None
        if reference is not None:
            ref_path = os.path.join(slot.scratch, reference[0])
            if not os.path.exists(ref_path):
                Path(ref_path).write_bytes(reference[1])
        lib_path = _write_library(slot.scratch, name, lib)
        start = time.perf_counter()
        try:
            status, value = slot.worker.call(
                "kiln.autotvm.measure.local", "run_candidate",
                (lib_path, arg_info, timing.number, timing.repeat, timing.min_repeat_ms,
                 ref_path, timing.rtol, timing.atol), timeout=timing.timeout)
        finally:
            os.unlink(lib_path)
        result = worker_run_result(status, value, time.perf_counter() - start, timing.timeout)
        if timing.cooldown_interval:
            time.sleep(timing.cooldown_interval)
        return result


def reference_file(name: str, data: bytes) -> tuple[str, bytes]:
    """The reference file ``name`` with contents ``data``, as the result of a task (not
    scattered data: Dask runs a task again when the workers holding its result are lost,
    and its active memory manager may drop the extra copies of scattered data)."""
    return name, data


def reference_on_worker(ref_name: str, name: str, lib: bytes, arg_info, timeout: float
                        ) -> tuple[str, bytes]:
    """Run a trusted library once on this Dask worker: the reference file ``ref_name``
    and its bytes (see :func:`~kiln.autotvm.measure.local.reference_run`). Raises
    RuntimeError when the library fails."""
    slot = _slot()
    with slot.lock:
        lib_path = _write_library(slot.scratch, name, lib)
        out = f"{lib_path}.npz"
        try:
            status, value = slot.worker.call("kiln.autotvm.measure.local", "reference_run",
                                             (lib_path, arg_info, out), timeout=timeout)
            if status != "ok":
                raise RuntimeError(f"the fallback config failed to run ({status}: "
                                   f"{_last_line(value) if status == 'error' else value})")
            return ref_name, Path(out).read_bytes()
        finally:
            for path in (lib_path, out):
                if os.path.exists(path):
                    os.unlink(path)


# ---------------------------------------------------------------------------------------
# Here: submitting and collecting
# ---------------------------------------------------------------------------------------
def _outcome(future) -> tuple[str, Any]:
    """``("ok", result)`` of a completed future, or ``("error", why it has none)``."""
    try:
        return "ok", future.result()
    except Exception as e:  # noqa: BLE001 - the task failed, was cancelled or lost its worker
        return "error", f"failed on the Dask cluster: {type(e).__name__}: {e}"


def collect(futures: list, idle_timeout: float, poll: float = 0.02
            ) -> Iterator[tuple[int, str, Any]]:
    """``(position, kind, value)`` for each future as it completes (``as_completed``):
    kind ``ok`` (value: the result) or ``error`` (value: why: the task failed past its
    retries, its worker was lost too often, it was cancelled, or no future completed for
    ``idle_timeout`` seconds; those left are then cancelled)."""
    position = {f.key: i for i, f in enumerate(futures)}
    left = set(position)
    completed = require_distributed().as_completed(futures)
    last = time.monotonic()
    while left:
        ready = completed.next_batch(block=False)
        for f in ready:
            left.discard(f.key)
            yield (position[f.key], *_outcome(f))
        if ready:
            last = time.monotonic()
        elif time.monotonic() - last > idle_timeout:
            why = f"no Dask worker completed a candidate within {idle_timeout:g} s"
            for f in futures:
                if f.key in left:
                    f.cancel()
                    yield position[f.key], "error", why
            return
        else:
            time.sleep(poll)


class DaskBuilder(Builder):
    """Build candidates on the workers of a Dask cluster (see the module doc): each
    killed after ``timeout`` seconds, ``n_parallel`` per batch (default: the cluster's
    worker threads), a batch failing its unfinished candidates when none completes for
    ``wait_for_worker`` seconds; ``retries``: Dask's retries of a failed build task."""

    def __init__(self, client, timeout: float = 10, n_parallel: int | None = None,
                 retries: int = 2, wait_for_worker: float = 600.0):
        self.client = _checked_client(client, "DaskBuilder")
        self.timeout = float(timeout)
        self.n_parallel = int(n_parallel or sum(client.nthreads().values()) or 1)
        self.retries = int(retries)
        self.wait_for_worker = float(wait_for_worker)
        self.build_dir: str | None = None
        self.build_kwargs: dict = {}  # what the runner says of its device (set_task)

    def __repr__(self) -> str:
        return f"DaskBuilder({self.client.scheduler.address}, n_parallel={self.n_parallel})"

    def build(self, measure_inputs) -> list[BuildResult]:
        if self.build_dir is None:
            self.build_dir = tempfile.mkdtemp(prefix="kiln-autotvm-build-")
        if not _resource_units(self.client, None):
            why = f"the Dask cluster at {self.client.scheduler.address} has no workers"
            return [BuildResult(None, (), MeasureErrorNo.COMPILE_HOST, why, 0.0)
                    for _ in measure_inputs]
        futures = [self.client.submit(build_on_worker, inp, self.timeout,
                                      self.build_kwargs, pure=False,
                                      retries=self.retries) for inp in measure_inputs]
        out: list[BuildResult | None] = [None] * len(futures)
        for k, kind, value in collect(futures, max(self.wait_for_worker, self.timeout)):
            if kind == "ok":
                build, lib = value
                out[k] = build if lib is None else build._replace(
                    filename=_write_library(self.build_dir, os.path.basename(build.filename),
                                            lib))
            else:
                out[k] = BuildResult(None, (), MeasureErrorNo.COMPILE_HOST, value, 0.0)
        return out

    def close(self) -> None:
        if self.build_dir is not None:
            shutil.rmtree(self.build_dir, ignore_errors=True)
            self.build_dir = None
        _release(self.client)


def _release(client) -> None:
    """Stop the idle measurement interpreters on every worker (best effort)."""
    try:
        client.run(release_slots)
    except Exception as e:  # noqa: BLE001 - a worker left or the cluster is gone
        logger.debug("Dask: could not release the measurement workers: %s", e)


class DaskRunner(Runner):
    """Time candidates on the Dask workers holding ``resource`` (see the module doc).

    The timing and checking settings are LocalRunner's: after one checked run, ``repeat``
    measurements of ``number`` calls (``min_repeat_ms``), each candidate killed after
    ``timeout`` seconds, ``cooldown_interval`` seconds of rest on its device afterwards.
    With ``check_correctness`` the outputs are compared with ``ref_func`` (computed here)
    or with the template's fallback config run once on a device of the cluster. When no
    worker holds ``resource``, every candidate fails at once with a message saying how to
    start one; when no candidate of a batch completes for ``wait_for_device`` seconds,
    the rest fail. ``retries``: Dask's retries of a failed measurement task."""

    def __init__(self, client, resource: str = "device:cpu", timeout: float = 10,
                 number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.0, check_correctness: bool = True,
                 ref_func=None, rtol: float = 1e-3, atol: float = 1e-4, retries: int = 2,
                 wait_for_device: float = 600.0):
        self.client = _checked_client(client, "DaskRunner")
        if not isinstance(resource, str) or not resource:
            raise ValueError("DaskRunner: resource must name a Dask worker resource, e.g. "
                             "'device:cpu'")
        if int(number) < 1 or int(repeat) < 1:
            raise ValueError("DaskRunner: number and repeat must be >= 1")
        self.resource = resource
        set_measure_settings(self, timeout, number, repeat, min_repeat_ms, cooldown_interval,
                             check_correctness, ref_func, rtol, atol)
        self.retries = int(retries)
        self.wait_for_device = float(wait_for_device)
        self._reference = None  # a Future of the reference file (name, bytes), or None
        self._dir: str | None = None
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"DaskRunner({self.client.scheduler.address}, resource={self.resource!r})"

    @property
    def timing(self) -> Timing:
        return Timing(self.timeout, self.number, self.repeat, self.min_repeat_ms,
                      self.cooldown_interval, self.rtol, self.atol)

    def _no_device(self) -> str | None:
        """Why no candidate can be measured now (no worker holds the resource), or None."""
        if _resource_units(self.client, self.resource):
            return None
        return (f"no worker of the Dask cluster at {self.client.scheduler.address} holds the "
                f"resource {self.resource!r}; start one per device with `dask worker "
                f"{self.client.scheduler.address} --resources {self.resource}=1`")

    def _warn_once(self, msg: str) -> None:
        if msg not in self._warned:
            self._warned.add(msg)
            logger.warning("DaskRunner: %s", msg)

    # ---- task and reference ----
    def set_task(self, task, builder) -> None:
        super().set_task(task, builder)
        self._reference = None
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="kiln-autotvm-dask-")
        if not self.check_correctness:
            return
        name = f"reference-{uuid.uuid4().hex[:12]}.npz"
        if self.ref_func is not None:
            path = ref_func_reference(task, self.ref_func, os.path.join(self._dir, name))
            self._reference = self.client.submit(reference_file, name,
                                                 Path(path).read_bytes(), pure=False)
        else:
            self._reference = self._device_reference(task, builder, name)

    def _device_reference(self, task, builder, name: str):
        """A future of the reference file ``name``: the template's fallback config run
        once on a device of the cluster; None (with a warning) when it cannot run."""
        build = builder.build([MeasureInput(task.target, task, FallbackConfigEntity())])[0]
        why = _last_line(build.error) if build.error_no != MeasureErrorNo.NO_ERROR else None
        if why is None:
            why = self._no_device()
        if why is None:
            future = self.client.submit(
                reference_on_worker, name, os.path.basename(build.filename),
                Path(build.filename).read_bytes(), build.arg_info, max(self.timeout, 60.0),
                resources={self.resource: 1}, pure=False, retries=self.retries)
            [(_, kind, value)] = collect([future], self.wait_for_device)
            if kind == "ok":
                return future
            why = value
        logger.warning("correctness check disabled for %s: the fallback config cannot be "
                       "run (%s)", task.name, why)
        return None

    # ---- measuring ----
    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        out: list[MeasureResult | None] = [None] * len(build_results)
        jobs = []
        for k, build in enumerate(build_results):
            if build.error_no != MeasureErrorNo.NO_ERROR:
                out[k] = build_failure_result(build)
            else:
                jobs.append(k)
        why = self._no_device() if jobs else None
        if why is not None:
            self._warn_once(why)
            for k in jobs:
                out[k] = run_result("error", why, build_results[k].time_cost)
            return out
        futures = []
        for k in jobs:
            build = build_results[k]
            futures.append(self.client.submit(
                measure_on_worker, os.path.basename(build.filename),
                Path(build.filename).read_bytes(), build.arg_info, self.timing,
                self._reference, resources={self.resource: 1}, pure=False,
                retries=self.retries))
        for i, kind, value in collect(futures, max(self.wait_for_device, self.timeout)):
            build = build_results[jobs[i]]
            if kind == "ok":
                out[jobs[i]] = value._replace(all_cost=value.all_cost + build.time_cost)
            else:
                out[jobs[i]] = run_result("error", value, build.time_cost)
        return out

    def close(self) -> None:
        if self._reference is not None:
            self._reference.release()
            self._reference = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        _release(self.client)
