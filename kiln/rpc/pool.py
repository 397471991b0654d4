"""A distributed device pool: independent jobs spread over several RPC servers.

``DevicePool([(host, port), ...])`` keeps one session per server and one worker thread per
session; ``DevicePool.from_tracker(tracker, key, n)`` has ``n`` slots, each asking the
tracker for a server of ``key`` when its worker starts (so it measures on whatever servers
of the key are free, in the tracker's priority order). :meth:`DevicePool.map` hands each
job to whichever server is free and returns one :class:`JobResult` per job, in job order: a
value, or an error record — a job never raises out of the pool. :meth:`DevicePool.measure`
is the tuning use: upload a built library, run its ``time_evaluator`` on random inputs,
return the costs.

A job whose server drops the connection is put back once for another server (a second
loss gives an error record); the worker reconnects once and retires if that fails, leaving
the remaining jobs to the other servers. When every server is gone, the jobs left get an
error record each.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TVMError
from .client import RPCError, RPCSession, connect
from .tracker_client import TrackerSession

__all__ = ["DevicePool", "JobResult", "MeasureJob", "MeasureResult"]


@dataclass
class JobResult:
    """The outcome of one job: ``value`` when ``error`` is None, else the error's text."""

    index: int
    value: Any = None
    error: str | None = None
    server: str = ""
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class MeasureJob:
    """Time ``func_name`` (default: the entry) of the library file ``path`` on arguments
    of the given ``(shape, dtype)`` specs (random data) or numpy arrays."""

    path: str
    args: Sequence[Any]
    func_name: str | None = None
    number: int = 10
    repeat: int = 3
    min_repeat_ms: float = 0.0


@dataclass
class MeasureResult:
    """Per-repeat seconds of a :class:`MeasureJob` (``costs``), or an ``error``."""

    costs: tuple[float, ...] = ()
    error: str | None = None
    server: str = ""
    elapsed: float = 0.0
    timestamp: float = field(default_factory=time.time)

    @property
    def mean(self) -> float:
        return float(np.mean(self.costs)) if self.costs else float("inf")


def _random_arg(spec: Any, rng: np.random.Generator) -> np.ndarray:
    if isinstance(spec, np.ndarray):
        return spec
    shape, dtype = spec
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    return rng.integers(0, 8, size=shape).astype(dt)


def _measure_on(remote: RPCSession, job: MeasureJob) -> tuple[float, ...]:
    """Upload, load and time one library on a server; the job for :meth:`DevicePool.measure`."""
    name = f"pool-{threading.get_ident()}-{os.path.basename(job.path)}"
    remote.upload(job.path, name)
    try:
        mod = remote.load_module(name)
        dev = remote.cpu(0)
        rng = np.random.default_rng(0)
        args = [remote.array(_random_arg(s, rng), dev) for s in job.args]
        func = job.func_name or mod.entry_name
        if func is None:
            raise TVMError(f"{job.path} has no entry function; give MeasureJob.func_name")
        ev = mod.time_evaluator(func, dev, number=job.number, repeat=job.repeat,
                                min_repeat_ms=job.min_repeat_ms)
        return ev(*args).results
    finally:
        remote.remove(name)


class DevicePool:
    """Sessions with several RPC servers that run independent jobs in parallel.

    ``servers`` are ``(host, port)`` pairs (a server listed twice runs two jobs at once).
    ``timeout`` bounds connecting and each reply (seconds); a server that cannot be reached
    is left out (see ``unreachable``), and a pool with no reachable server raises RPCError.
    """

    def __init__(self, servers: Sequence[tuple[str, int]], timeout: float | None = 60.0,
                 session_timeout: float = 0) -> None:
        if not servers:
            raise TVMError("DevicePool needs at least one (host, port)")
        self.servers = [(str(h), int(p)) for h, p in servers]
        self.timeout = timeout
        self.session_timeout = session_timeout
        self._init_slots([f"{h}:{p}" for h, p in self.servers],
                         [functools.partial(connect, h, p, session_timeout=session_timeout,
                                            timeout=timeout) for h, p in self.servers])
        for slot in range(len(self._labels)):
            try:
                self._sessions[slot] = self._connectors[slot]()
            except RPCError as e:
                self._retire(slot, str(e))
        if not any(self._sessions):
            raise RPCError("DevicePool: no server could be reached: "
                           + "; ".join(self.unreachable.values()))

    @classmethod
    def from_tracker(cls, tracker: TrackerSession, key: str, n: int, priority: int = 1,
                     session_timeout: float = 0, wait: float | None = None) -> DevicePool:
        """``n`` slots, each holding a session with a server of ``key`` that ``tracker``
        handed out (asked for when the slot's worker starts, waiting up to ``wait`` s)."""
        pool = cls.__new__(cls)
        pool.servers, pool.timeout, pool.session_timeout = [], wait, session_timeout
        request = functools.partial(tracker.request, key, priority, session_timeout,
                                    timeout=wait)
        pool._init_slots([f"{tracker.addr}[{key}]#{i}" for i in range(n)], [request] * n)
        return pool

    def _init_slots(self, labels: list[str], connectors: list[Callable[[], RPCSession]]
                    ) -> None:
        self._labels = labels
        self._connectors = connectors
        self._sessions: list[RPCSession | None] = [None] * len(labels)
        self._retired: set[int] = set()
        self.unreachable: dict[str, str] = {}

    def _retire(self, slot: int, why: str) -> None:
        self.unreachable[self._labels[slot]] = why
        self._sessions[slot] = None
        self._retired.add(slot)

    @property
    def size(self) -> int:
        """Number of live sessions."""
        return sum(1 for s in self._sessions if s is not None and not s.closed)

    def map(self, fn: Callable[[RPCSession, Any], Any], jobs: Sequence[Any]) -> list[JobResult]:
        """Run ``fn(session, job)`` for every job on the first free server; one JobResult
        per job, in order. ``fn`` runs in a worker thread of this process and talks to its
        server through ``session``."""
        jobs = list(jobs)
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(len(jobs)):
            todo.put(i)
        results: list[JobResult | None] = [None] * len(jobs)
        retried: set[int] = set()  # jobs put back once after their server dropped

        def worker(slot: int) -> None:
            while not todo.empty():
                sess = self._sessions[slot]
                if sess is None or sess.closed:
                    try:  # one (re)connection attempt per job after a lost session
                        sess = self._sessions[slot] = self._connectors[slot]()
                    except RPCError as e:
                        self._retire(slot, str(e))
                        return
                addr = sess.addr
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                start = time.perf_counter()
                try:
                    value = fn(sess, jobs[i])
                    results[i] = JobResult(i, value, None, addr, time.perf_counter() - start)
                except Exception as e:  # an error record, never an exception out of map
                    if sess.closed and i not in retried:  # the server went away, not the job
                        retried.add(i)
                        todo.put(i)
                        continue
                    results[i] = JobResult(i, None, f"{type(e).__name__}: {e}", addr,
                                           time.perf_counter() - start)

        # rounds: a job put back after its server died may find the other workers gone
        while not todo.empty() and len(self._retired) < len(self._labels):
            threads = [threading.Thread(target=worker, args=(k,), daemon=True,
                                        name=f"kiln-pool-{k}")
                       for k in range(len(self._labels)) if k not in self._retired]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        gone = "; ".join(self.unreachable.values()) or "no server left"
        return [r if r is not None else JobResult(i, None, f"RPCError: no server could run "
                                                  f"the job ({gone})")
                for i, r in enumerate(results)]

    def measure(self, jobs: Sequence[MeasureJob]) -> list[MeasureResult]:
        """Time each job's library on the pool's servers; a MeasureResult per job."""
        out = []
        for r in self.map(_measure_on, jobs):
            out.append(MeasureResult(tuple(r.value) if r.ok else (), r.error, r.server,
                                     r.elapsed))
        return out

    def close(self) -> None:
        for s in self._sessions:
            if s is not None:
                s.close()

    def __enter__(self) -> DevicePool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DevicePool({self.size} of {len(self._labels)} slots)"
