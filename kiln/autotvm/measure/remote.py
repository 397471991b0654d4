"""Measuring candidates on RPC servers: RPCRunner, request_remote and check_remote.

Candidates are built on this machine (by :class:`~kiln.autotvm.measure.local.LocalBuilder`)
and timed on one or more servers started with ``python -m kiln.exec.rpc_server``: each
library is uploaded, loaded there, run once on fixed random inputs (checked against a
reference when asked), then timed with the remote ``time_evaluator``. The arrays, the
correctness check and the timing are those of LocalRunner (``check_and_time`` in
local.py), run through the session's remote module instead of a local one.

As in TVM, ``host:port`` is usually an RPC *tracker* (``python -m kiln.exec.rpc_tracker``):
each batch is measured on the servers registered there under ``key``, all of them in
parallel, asked for with ``priority``. kiln also accepts the address of one RPC server
(what listens there is asked first), or several listed with ``servers=[(host, port), ...]``;
``key`` and ``priority`` matter only with a tracker. Either way the batch runs on a
:class:`kiln.rpc.DevicePool`: one session per device, held for the batch.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..task.space import FallbackConfigEntity
from .cuda import arch_of, is_cuda_target
from .local import (
    _REF_CACHE,
    _last_line,
    _load_inputs,
    build_failure_result,
    check_and_time,
    ref_func_reference,
    reference_outputs,
    run_result,
    set_measure_settings,
)
from .measure import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, Runner

logger = logging.getLogger("autotvm")

__all__ = ["RPCRunner", "request_remote", "check_remote"]


def _server_list(host, port, servers) -> list[tuple[str, int]]:
    """``[(host, port), ...]`` from ``host``/``port`` or ``servers`` (pairs or
    ``"host:port"`` strings)."""
    if servers is not None:
        if host is not None or port is not None:
            raise ValueError("RPCRunner: give either host and port (one server) or "
                             "servers=[(host, port), ...], not both")
        out = []
        for s in servers:
            if isinstance(s, str):
                h, sep, p = s.rpartition(":")
                if not sep or not h:
                    raise ValueError(f"RPCRunner: server {s!r} is not 'host:port'")
                s = (h, p)
            try:
                h, p = s
                out.append((str(h), int(p)))
            except (TypeError, ValueError):
                raise ValueError(f"RPCRunner: server {s!r} is not a (host, port) pair") from None
        if not out:
            raise ValueError("RPCRunner: servers is empty")
        return out
    if host is None or port is None:
        raise ValueError("RPCRunner needs the host and port of an RPC tracker (`python -m "
                         "kiln.exec.rpc_tracker`) or server (`python -m kiln.exec.rpc_server`), "
                         "or servers=[(host, port), ...]")
    return [(str(host), int(port))]


def _tracker_at(host: str, port: int, timeout: float):
    """A TrackerSession when a tracker listens at ``host:port``; None for a server, or
    when nothing answers (the measurements then report why)."""
    from kiln.rpc import RPCError, connect_tracker
    from kiln.rpc.auth import peer_role
    from kiln.rpc.protocol import ProtocolError

    try:
        if peer_role(host, port, timeout=timeout) != "tracker":
            return None
        return connect_tracker(host, port, timeout=timeout)
    except (OSError, ProtocolError, RPCError):
        return None


def _is_timeout(err: Exception) -> bool:
    # RPCSession reports a reply that did not come within the socket timeout this way
    return "in time" in str(err)


class RPCRunner(Runner):
    """Time candidates on RPC servers (see the module doc for the differences from TVM).

    ``RPCRunner(key, host, port, priority)`` measures on the servers of ``key`` registered
    with the tracker at ``host:port`` (``n_parallel``, default: all of them, sessions
    asked for with ``priority``, each batch waiting up to ``wait_for_device`` seconds for
    a free one), or on the one server at ``host:port``;
    ``RPCRunner(key, servers=[(h1, p1), (h2, p2)])`` spreads each batch over several
    servers (a server listed twice measures two candidates at once; ``n_parallel``
    sessions go round-robin over the servers). Build batches with
    ``LocalBuilder(n_parallel=...)`` as usual.

    Each candidate: upload, ``load_module``, one run on fixed random inputs (outputs start
    as NaN), with ``check_correctness`` a comparison against the reference (``ref_func``
    computed here with numpy, else the template's fallback config run once on the first
    server that measures: the same data and tolerances as LocalRunner), then ``repeat``
    timings of ``number`` calls (``min_repeat_ms``) on the server; ``cooldown_interval``
    seconds of rest on that server afterwards. ``timeout`` bounds connecting and every
    reply of the server (seconds).

    Every failure is the candidate's MeasureResult, never an exception: a server that
    cannot be reached or drops the connection (e.g. the kernel crashed it) or raises is
    ``RUNTIME_DEVICE`` with the message, a reply later than ``timeout`` is ``RUN_TIMEOUT``
    (the session is closed, and the server kills the hung kernel's process), a wrong output
    is ``WRONG_ANSWER``. A lost session is opened again for the next candidate, and the
    next batch connects again, so a restarted server is used again.
    """

    def __init__(self, key: str = "", host: str | None = None, port: int | None = None,
                 priority: int = 1, timeout: float = 10, n_parallel: int | None = None,
                 number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.1, check_correctness: bool = False,
                 enable_cpu_cache_flush: bool = False, module_loader: Any = None, *,
                 servers: Sequence[Any] | None = None, ref_func: Callable | None = None,
                 rtol: float = 1e-3, atol: float = 1e-4, wait_for_device: float = 600.0):
        if enable_cpu_cache_flush:
            raise NotImplementedError("RPCRunner: enable_cpu_cache_flush is not supported")
        if module_loader is not None:
            raise NotImplementedError("RPCRunner: a custom module_loader is not supported; "
                                      "libraries are uploaded and loaded with load_module")
        if int(number) < 1 or int(repeat) < 1:
            raise ValueError("RPCRunner: number and repeat must be >= 1")
        if float(timeout) <= 0:
            raise ValueError("RPCRunner: timeout must be > 0 seconds")
        self.key, self.priority = key, priority
        self.servers = _server_list(host, port, servers)
        self._may_be_tracker = servers is None
        self._tracker = None  # a TrackerSession when host:port is a tracker (set_task)
        self.wait_for_device = float(wait_for_device)
        n = int(n_parallel) if n_parallel is not None else len(self.servers)
        if n < 1:
            raise ValueError("RPCRunner: n_parallel must be >= 1")
        self.n_parallel = n
        self._n_parallel_given = n_parallel is not None
        self.slots = [self.servers[i % len(self.servers)] for i in range(n)]
        set_measure_settings(self, timeout, number, repeat, min_repeat_ms, cooldown_interval,
                             check_correctness, ref_func, rtol, atol)
        self.ref_path: str | None = None
        self._ref_build: BuildResult | None = None  # the fallback, run on first measurement
        self._ref_lock = threading.Lock()
        self._dir: str | None = None
        self._ref_file = ""
        self._device = "cpu"
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        where = ", ".join(f"{h}:{p}" for h, p in self.servers)
        return f"RPCRunner(key={self.key!r}, servers=[{where}], n_parallel={self.n_parallel})"

    def get_build_kwargs(self, task) -> dict:
        """For a CUDA task, the architecture of a server's GPU (``{"arch": "sm_90"}``), so
        that candidates are compiled for it; ``{}`` otherwise or when no server answers (the
        candidates are then compiled for kiln's default architecture, and recompiled from
        their source on the server's GPU at the first launch)."""
        from kiln.errors import TVMError

        if not is_cuda_target(task.target):
            return {}
        host, port = self.servers[0]
        try:
            with request_remote(self.key, host, port, self.priority,
                                timeout=min(self.timeout, 10.0)) as remote:
                dev = remote.device("cuda")
                return arch_of(dev.compute_version) if dev.exist else {}
        except (TVMError, OSError, ValueError):
            return {}

    # ---- task and reference ----
    def set_task(self, task, builder) -> None:
        super().set_task(task, builder)
        self._device = str(task.target or "llvm")
        self.ref_path, self._ref_build = None, None
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="kiln-autotvm-rpc-")
        if self.check_correctness:
            # a fresh name: the inputs cache of this process is keyed by the file name
            path = self._ref_file = os.path.join(self._dir,
                                                 f"reference-{uuid.uuid4().hex[:12]}.npz")
            if self.ref_func is not None:
                self.ref_path = ref_func_reference(task, self.ref_func, path)
            else:
                inp = MeasureInput(task.target, task, FallbackConfigEntity())
                build = builder.build([inp])[0]
                if build.error_no != MeasureErrorNo.NO_ERROR:
                    logger.warning("correctness check disabled for %s: the fallback config "
                                   "does not build (%s)", task.name, _last_line(build.error))
                else:
                    self._ref_build = build
        if self._may_be_tracker:
            self._tracker = _tracker_at(*self.servers[0], timeout=self.timeout)
        if self._tracker is not None:
            if not self._tracker_devices():
                logger.warning("RPCRunner: no RPC server is registered under key %r with the "
                               "tracker %s; every candidate fails until one is", self.key,
                               self._tracker.addr)
            return
        reachable = [f"{h}:{p}" for h, p in self.servers if check_remote(
            self._device, self.key, h, p, timeout=min(self.timeout, 10.0))]
        if not reachable:
            logger.warning("RPCRunner: no RPC server answers (%s); every candidate fails "
                           "until one does", ", ".join(f"{h}:{p}" for h, p in self.servers))

    def _reference(self, sess) -> None:
        """Run the fallback config on ``sess`` once and save it as the reference file (the
        first measurement of a task does this; the others wait for it)."""
        from kiln.rpc import RemoteError, RPCError

        with self._ref_lock:
            build = self._ref_build
            if build is None:  # another measurement made it meanwhile
                return
            path = self._ref_file
            try:
                mod = _upload_and_load(sess, build.filename)
                np.savez(path, **reference_outputs(mod, sess.device(self._device),
                                                   build.arg_info))
                self.ref_path = path
            except (RemoteError, RPCError) as e:
                logger.warning("correctness check disabled for %s: the fallback config failed "
                               "on %s (%s)", self.task.name, sess.addr, e)
                if isinstance(e, RPCError):
                    raise
            finally:
                self._ref_build = None  # only now: the others wait for ref_path

    # ---- measuring ----
    def _measure(self, sess, build: BuildResult) -> tuple[str, Any]:
        """``(kind, costs or message)`` of one candidate on ``sess`` (never raises)."""
        from kiln.rpc import RemoteError, RPCError

        try:
            if self._ref_build is not None:
                self._reference(sess)
            mod = _upload_and_load(sess, build.filename)
            arrays, ref = _load_inputs(build.arg_info, self.ref_path)
            return check_and_time(mod, sess.device(self._device), build.arg_info, arrays, ref,
                                  self.number, self.repeat, self.min_repeat_ms, self.rtol,
                                  self.atol)
        except RPCError as e:
            if _is_timeout(e):
                return "timeout", f"run timed out after {self.timeout:g} s on {sess.addr}"
            return "crash", f"{e} (did the kernel crash the server?)"
        except RemoteError as e:
            return "error", str(e)
        except Exception as e:  # noqa: BLE001 - one candidate's failure, never the session's
            return "error", f"{type(e).__name__}: {e}"

    def _job(self, sess, job: tuple[int, BuildResult]) -> MeasureResult:
        _, build = job
        start = time.perf_counter()
        kind, value = self._measure(sess, build)
        res = run_result(kind, value, time.perf_counter() - start + build.time_cost)
        if self.cooldown_interval:
            time.sleep(self.cooldown_interval)
        return res

    def _warn_once(self, msg: str) -> None:
        if msg not in self._warned:
            self._warned.add(msg)
            logger.warning("RPCRunner: %s", msg)

    def _tracker_devices(self) -> int:
        """How many servers of ``key`` the tracker has (0 when it cannot be asked)."""
        from kiln.rpc import RPCError

        try:
            info = self._tracker.summary()["server_info"]
        except RPCError:
            return 0
        return sum(1 for s in info if s["key"] == f"server:{self.key}")

    def _pool(self):
        """The DevicePool of this batch (raises RPCError when there is none)."""
        from kiln.rpc import DevicePool, RPCError

        if self._tracker is None:
            return DevicePool(self.slots, timeout=self.timeout)
        n = self.n_parallel if self._n_parallel_given else self._tracker_devices()
        if n == 0:
            raise RPCError(f"no RPC server is registered under key {self.key!r} with the "
                           f"tracker {self._tracker.addr}")
        return DevicePool.from_tracker(self._tracker, self.key, n, self.priority,
                                       wait=self.wait_for_device)

    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        from kiln.rpc import RPCError

        out: list[MeasureResult | None] = [None] * len(build_results)
        jobs = []
        for k, build in enumerate(build_results):
            if build.error_no != MeasureErrorNo.NO_ERROR:
                out[k] = build_failure_result(build)
            else:
                jobs.append((k, build))
        if jobs:
            try:
                pool = self._pool()
            except RPCError as e:
                self._warn_once(str(e))
                for k, build in jobs:
                    out[k] = run_result("error", str(e), build.time_cost)
            else:
                try:
                    for r, (k, build) in zip(pool.map(self._job, jobs), jobs, strict=True):
                        if r.ok:
                            out[k] = r.value
                        else:  # the pool lost every server before this job ran
                            self._warn_once(r.error)
                            out[k] = run_result("error", r.error, r.elapsed + build.time_cost)
                finally:
                    pool.close()
        return out

    def close(self) -> None:
        if self._dir is not None:
            for path in list(_REF_CACHE):
                if path.startswith(self._dir):
                    del _REF_CACHE[path]
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _upload_and_load(sess, lib_path: str):
    """Upload a library under a fresh name and load it on the server."""
    name = f"autotvm-{uuid.uuid4().hex[:12]}-{os.path.basename(lib_path)}"
    sess.upload(lib_path, name)
    return sess.load_module(name)


def request_remote(device_key: str = "", host: str | None = None, port: int | None = None,
                   priority: int = 1, timeout: float = 60):
    """A session with a server of ``device_key`` from the tracker at ``host:port`` (asked
    with ``priority``; ``timeout`` bounds the wait for a free one), or with the server at
    ``host:port`` itself. ``timeout`` also bounds connecting and every reply."""
    from kiln import rpc

    if host is None or port is None:
        raise ValueError("request_remote needs the host and port of an RPC tracker or "
                         "server (`python -m kiln.exec.rpc_tracker` / `rpc_server`)")
    tracker = _tracker_at(host, int(port), timeout)
    if tracker is not None:
        return tracker.request(device_key, priority, timeout=timeout)
    return rpc.connect(host, int(port), timeout=timeout)


def check_remote(target, device_key: str = "", host: str | None = None,
                 port: int | None = None, priority: int = 100, timeout: float = 10) -> bool:
    """True when a server (of ``device_key`` through the tracker at ``host:port``, or the
    server there) answers within ``timeout`` seconds and has the device of ``target``
    (``"llvm"`` -> its CPU)."""
    from kiln.errors import TVMError

    try:
        with request_remote(device_key, host, port, priority, timeout=timeout) as remote:
            return bool(remote.device(str(target or "llvm")).exist)
    except (TVMError, OSError, ValueError):
        return False
