"""Measuring candidates on RPC servers: RPCRunner, request_remote and check_remote.

Candidates are built on this machine (by :class:`~kiln.autotvm.measure.local.LocalBuilder`)
and timed on one or more servers started with ``python -m kiln.exec.rpc_server``: each
library is uploaded, loaded there, run once on fixed random inputs (checked against a
reference when asked), then timed with the remote ``time_evaluator``. The arrays, the
correctness check and the timing are those of LocalRunner (``check_and_time`` in
local.py), run through the session's remote module instead of a local one.

**How kiln differs from TVM.** TVM's RPCRunner asks an RPC *tracker* at ``host:port`` for a
free device registered under ``key`` (``priority`` orders the requests), one device per
measurement. kiln has no tracker: ``host:port`` is the RPC server itself, and several
devices are listed explicitly with ``servers=[(host, port), ...]`` (a
:class:`kiln.rpc.DevicePool`). ``key`` and ``priority`` are accepted for compatibility and
only reported; ``request_remote(key, host, port)`` connects to the server directly.
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
        raise ValueError("RPCRunner needs the host and port of an RPC server (started with "
                         "`python -m kiln.exec.rpc_server --port 9090`), or servers=[(host, "
                         "port), ...]; kiln has no tracker")
    return [(str(host), int(port))]


def _is_timeout(err: Exception) -> bool:
    # RPCSession reports a reply that did not come within the socket timeout this way
    return "in time" in str(err)


class RPCRunner(Runner):
    """Time candidates on RPC servers (see the module doc for the differences from TVM).

    ``RPCRunner(key, host, port)`` measures on the server at ``host:port``;
    ``RPCRunner(key, servers=[(h1, p1), (h2, p2)])`` spreads each batch over several
    servers (a :class:`kiln.rpc.DevicePool`, one session per server and batch; a server
    listed twice measures two candidates at once). ``n_parallel`` (default: one per
    server) is the number of candidates measured at once: sessions go round-robin over the
    servers. Build batches with ``LocalBuilder(n_parallel=...)`` as usual.

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
    (the session is closed; a hung kernel keeps its server thread busy), a wrong output is
    ``WRONG_ANSWER``. The next batch connects again, so a restarted server is used again.
    """

    def __init__(self, key: str = "", host: str | None = None, port: int | None = None,
                 priority: int = 1, timeout: float = 10, n_parallel: int | None = None,
                 number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.1, check_correctness: bool = False,
                 enable_cpu_cache_flush: bool = False, module_loader: Any = None, *,
                 servers: Sequence[Any] | None = None, ref_func: Callable | None = None,
                 rtol: float = 1e-3, atol: float = 1e-4):
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
        n = int(n_parallel) if n_parallel is not None else len(self.servers)
        if n < 1:
            raise ValueError("RPCRunner: n_parallel must be >= 1")
        self.n_parallel = n
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

    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        from kiln.rpc import DevicePool, RPCError

        out: list[MeasureResult | None] = [None] * len(build_results)
        jobs = []
        for k, build in enumerate(build_results):
            if build.error_no != MeasureErrorNo.NO_ERROR:
                out[k] = build_failure_result(build)
            else:
                jobs.append((k, build))
        if jobs:
            try:
                pool = DevicePool(self.slots, timeout=self.timeout)
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
    """A session with the RPC server at ``host:port`` (TVM asks a tracker for a device of
    ``device_key``; kiln has no tracker and connects to the server directly, so ``host``
    and ``port`` are required and ``device_key``/``priority`` are ignored). ``timeout``
    bounds connecting and every reply of the session."""
    from kiln import rpc

    del priority
    if host is None or port is None:
        raise ValueError("request_remote needs the host and port of an RPC server (started "
                         "with `python -m kiln.exec.rpc_server`); kiln has no tracker")
    return rpc.connect(host, int(port), key=device_key, timeout=timeout)


def check_remote(target, device_key: str = "", host: str | None = None,
                 port: int | None = None, priority: int = 100, timeout: float = 10) -> bool:
    """True when the RPC server at ``host:port`` answers within ``timeout`` seconds and has
    the device of ``target`` (``"llvm"`` -> its CPU)."""
    from kiln.errors import TVMError

    del priority
    try:
        with request_remote(device_key, host, port, timeout=timeout) as remote:
            return bool(remote.device(str(target or "llvm")).exist)
    except (TVMError, OSError, ValueError):
        return False
