"""Measuring candidates on this machine: LocalBuilder and LocalRunner.

* :class:`LocalBuilder` compiles each candidate in a child process forked for it (up to
  ``n_parallel`` at once), so a template that raises, a lowering that loops or a compiler
  that takes too long costs one trial: the child is killed after ``timeout`` seconds.
  Libraries go to a private directory removed by ``close()``.
* :class:`LocalRunner` times each library in a separate worker interpreter
  (:class:`~kiln.autotvm.measure.worker.Worker`), one candidate at a time: a kernel that
  segfaults or hangs kills only the worker, which is restarted for the next candidate.
  With ``check_correctness`` (the default) every candidate's output is first compared with
  a reference on the same random inputs: ``ref_func(*inputs)`` when given, else the output
  of the template's fallback config.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import tempfile
import time
import traceback
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..task.space import FallbackConfigEntity, InstantiationError
from .cuda import CANDIDATE_SUFFIX, build_target, is_cuda_target, load_candidate, save_candidate
from .measure import Builder, BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, Runner
from .worker import Worker, describe_exit

logger = logging.getLogger("autotvm")

__all__ = ["LocalBuilder", "LocalRunner"]


# ---------------------------------------------------------------------------------------
# Building in forked children
# ---------------------------------------------------------------------------------------
def _last_line(text: str) -> str:
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else str(text)


def tensor_arg_info(args) -> tuple:
    """``(shape, dtype, is_output)`` of each tensor argument of a schedule."""
    from kiln.te.tensor import PlaceholderOp, Tensor

    info = []
    for a in args:
        if not isinstance(a, Tensor):
            raise TypeError(f"tuning needs tensor arguments only, got {a!r}")
        shape = tuple(int(getattr(s, "value", s)) for s in a.shape)
        info.append((shape, a.dtype, not isinstance(a.op, PlaceholderOp)))
    return tuple(info)


def build_candidate(inp: MeasureInput, build_dir: str, build_kwargs: dict | None = None
                    ) -> BuildResult:
    """Instantiate and compile one candidate (run in a forked child). A CUDA candidate is
    compiled for the runner's GPU (``build_kwargs["arch"]``) and saved to a file of its own
    (:func:`~kiln.autotvm.measure.cuda.save_candidate`)."""
    from kiln.driver import build

    os.environ["KILN_CACHE_DIR"] = build_dir
    start = time.perf_counter()
    try:
        sch, args = inp.task.instantiate(inp.config)
        info = tensor_arg_info(args)
    except InstantiationError as e:
        return BuildResult(None, (), MeasureErrorNo.INSTANTIATION_ERROR, str(e),
                           time.perf_counter() - start)
    except Exception:  # noqa: BLE001 - any template failure is this candidate's error
        return BuildResult(None, (), MeasureErrorNo.INSTANTIATION_ERROR,
                           traceback.format_exc(), time.perf_counter() - start)
    on_gpu = is_cuda_target(inp.target)
    try:
        if on_gpu:
            mod = build(sch, args, target=build_target(inp.target, build_kwargs or {}))
            path = save_candidate(mod, build_dir)
        else:
            path = build(sch, args, target=str(inp.target or "llvm")).library_path
    except Exception:  # noqa: BLE001
        errno = MeasureErrorNo.COMPILE_DEVICE if on_gpu else MeasureErrorNo.COMPILE_HOST
        return BuildResult(None, info, errno, traceback.format_exc(),
                           time.perf_counter() - start)
    return BuildResult(path, info, MeasureErrorNo.NO_ERROR, None, time.perf_counter() - start)


def _child_main(conn, fn, args) -> None:
    try:
        os.setpgid(0, 0)  # its own process group: a timeout kills the compiler it started too
    except OSError:
        pass
    try:
        reply = ("ok", fn(*args))
    except BaseException:  # noqa: BLE001
        reply = ("error", traceback.format_exc())
    try:
        conn.send(reply)
    finally:
        conn.close()


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def fork_map(fn: Callable, items: list[tuple], n_parallel: int, timeout: float
             ) -> list[tuple[str, Any, float]]:
    """``fn(*item)`` for each item, each in a forked child, ``n_parallel`` at a time.
    Returns ``(status, value, seconds)`` per item: status ``ok``, ``error`` (value: the
    traceback), ``timeout`` (the child was killed) or ``crash`` (value: exit status)."""
    ctx = multiprocessing.get_context("fork")
    results: list = [None] * len(items)
    pending = deque(enumerate(items))
    running: dict = {}  # connection -> (item number, process, deadline, start)
    while pending or running:
        while pending and len(running) < n_parallel:
            i, item = pending.popleft()
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child_main, args=(send, fn, item), daemon=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
                proc.start()
            send.close()
            now = time.monotonic()
            running[recv] = (i, proc, now + timeout, now)
        wait = max(0.0, min(v[2] for v in running.values()) - time.monotonic())
        ready = multiprocessing.connection.wait(list(running), timeout=wait)
        for conn in ready:
            i, proc, _, start = running.pop(conn)
            try:
                status, value = conn.recv()
            except (EOFError, OSError):
                proc.join()
                status, value = "crash", proc.exitcode
            conn.close()
            proc.join()
            results[i] = (status, value, time.monotonic() - start)
        now = time.monotonic()
        for conn, (i, proc, deadline, start) in list(running.items()):
            if now >= deadline:
                _kill_group(proc)
                proc.join()
                conn.close()
                del running[conn]
                results[i] = ("timeout", None, now - start)
    return results


def build_outcome(status: str, value: Any, seconds: float, timeout: float) -> BuildResult:
    """The BuildResult of one :func:`fork_map` item of :func:`build_candidate`."""
    if status == "ok":
        return value
    if status == "timeout":
        return BuildResult(None, (), MeasureErrorNo.BUILD_TIMEOUT,
                           f"build timed out after {timeout:g} s", seconds)
    if status == "crash":
        return BuildResult(None, (), MeasureErrorNo.COMPILE_HOST,
                           f"build process died ({describe_exit(value)})", seconds)
    return BuildResult(None, (), MeasureErrorNo.UNKNOWN_ERROR, value, seconds)


class LocalBuilder(Builder):
    """Compile candidates in forked child processes, ``n_parallel`` at once (default: the
    number of CPUs), each killed after ``timeout`` seconds."""

    def __init__(self, timeout: float = 10, n_parallel: int | None = None,
                 build_func: str = "default"):
        if build_func != "default":
            raise NotImplementedError("LocalBuilder: only build_func='default' (a shared "
                                      "library) is supported")
        if not hasattr(os, "fork"):
            raise NotImplementedError("LocalBuilder needs os.fork (Linux or macOS)")
        self.timeout = float(timeout)
        self.n_parallel = int(n_parallel or os.cpu_count() or 1)
        self.build_dir: str | None = None

    def set_task(self, task, build_kwargs: dict | None = None) -> None:
        super().set_task(task, build_kwargs)
        if self.build_dir is None:
            self.build_dir = tempfile.mkdtemp(prefix="kiln-autotvm-build-")

    def build(self, measure_inputs) -> list[BuildResult]:
        if self.build_dir is None:
            self.build_dir = tempfile.mkdtemp(prefix="kiln-autotvm-build-")
        for inp in measure_inputs:
            target = str(inp.target or "llvm").split()[0]
            if target not in ("llvm", "c", "cuda", "nvptx"):
                raise NotImplementedError(f"LocalBuilder: tuning for target {target!r} is not "
                                          "supported (llvm, c and cuda are)")
        outs = fork_map(build_candidate, [(inp, self.build_dir, self.build_kwargs)
                                          for inp in measure_inputs],
                        self.n_parallel, self.timeout)
        return [build_outcome(status, value, secs, self.timeout)
                for status, value, secs in outs]

    def close(self) -> None:
        if self.build_dir is not None:
            shutil.rmtree(self.build_dir, ignore_errors=True)
            self.build_dir = None


# ---------------------------------------------------------------------------------------
# Running in a worker interpreter
# ---------------------------------------------------------------------------------------
_PRELOAD = ("kiln", "kiln.autotvm.measure.local")
_REF_CACHE: dict[str, dict[str, np.ndarray]] = {}
_INPUT_CACHE: dict[tuple, list[np.ndarray]] = {}


def random_inputs(arg_info, seed: int = 0) -> list[np.ndarray]:
    """Deterministic random data for every argument (outputs too; they are overwritten)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype, _ in arg_info:
        if np.issubdtype(np.dtype(dtype), np.floating):
            arrays.append(rng.uniform(0.0, 1.0, size=shape).astype(dtype))
        elif dtype == "bool":
            arrays.append(rng.integers(0, 2, size=shape).astype(bool))
        else:
            arrays.append(rng.integers(-8, 8, size=shape).astype(dtype))
    return arrays


def _garbage(shape, dtype) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.floating):
        return np.full(shape, np.nan, dtype=dtype)
    return np.full(shape, 123, dtype=dtype)


def _load_inputs(arg_info, ref_path: str | None) -> tuple[list[np.ndarray], dict | None]:
    if ref_path is not None:
        ref = _REF_CACHE.get(ref_path)
        if ref is None:
            with np.load(ref_path) as z:
                ref = _REF_CACHE[ref_path] = {k: z[k] for k in z.files}
        return [ref[f"arg{i}"] for i in range(len(arg_info))], ref
    key = tuple(arg_info)
    if key not in _INPUT_CACHE:
        _INPUT_CACHE[key] = random_inputs(arg_info)
    return _INPUT_CACHE[key], None


def _nd_args(arrays, arg_info, dev=None):
    """Arrays for a call on ``dev`` (default: this machine's CPU; a remote device of an RPC
    session puts them on the server): the inputs' data, outputs filled with garbage."""
    from kiln.runtime import array, cpu

    dev = cpu(0) if dev is None else dev
    return [array(_garbage(shape, dtype) if is_out else a, dev)
            for a, (shape, dtype, is_out) in zip(arrays, arg_info, strict=True)], dev


def reference_outputs(mod, dev, arg_info) -> dict[str, np.ndarray]:
    """Run a trusted module (local, or remote with ``dev`` of its session) once on random
    inputs; ``{"arg0": ..., "out2": ...}``: every input and each output argument's result,
    the contents of a reference file."""
    arrays = random_inputs(arg_info)
    nd, _ = _nd_args(arrays, arg_info, dev)
    mod(*nd)
    save = {f"arg{i}": a for i, a in enumerate(arrays)}
    for i, (_, _, is_out) in enumerate(arg_info):
        if is_out:
            save[f"out{i}"] = nd[i].numpy()
    return save


def load_built(path: str):
    """``(module, device)`` of a built candidate: a shared library run on this CPU (device
    None), or a saved CUDA candidate run on ``cuda(0)``."""
    from kiln.runtime import load_module

    if path.endswith(CANDIDATE_SUFFIX):
        return load_candidate(path)
    return load_module(path), None


def reference_run(lib_path: str, arg_info, out_path: str) -> None:
    """Run a trusted library once on random inputs; save inputs and outputs to ``out_path``
    (``arg0``, ``arg1``, ... and ``out0``, ... for the output arguments)."""
    np.savez(out_path, **reference_outputs(*load_built(lib_path), arg_info))


def ref_func_reference(task, ref_func: Callable, path: str) -> str:
    """Write the reference file of ``task`` computed by ``ref_func(*inputs)`` (numpy arrays
    of the input arguments -> the output arrays) to ``path``; returns ``path``."""
    _, args = task.instantiate(FallbackConfigEntity())
    info = tensor_arg_info(args)
    arrays = random_inputs(info)
    outs = ref_func(*[a for a, (_, _, o) in zip(arrays, info, strict=True) if not o])
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    save = {f"arg{i}": a for i, a in enumerate(arrays)}
    out_ids = [i for i, (_, _, o) in enumerate(info) if o]
    if len(outs) != len(out_ids):
        raise ValueError(f"ref_func returned {len(outs)} arrays for "
                         f"{len(out_ids)} output arguments")
    for i, o in zip(out_ids, outs, strict=True):
        save[f"out{i}"] = np.asarray(o, dtype=info[i][1])
    np.savez(path, **save)
    return path


def compare_outputs(nd, arg_info, ref: dict, rtol: float, atol: float) -> str | None:
    """None when every output argument of ``nd`` matches the reference, else a message
    naming the first that does not (how many elements differ, the first of them)."""
    for i, (_, _, is_out) in enumerate(arg_info):
        if not is_out or f"out{i}" not in ref:
            continue
        got, want = nd[i].numpy(), ref[f"out{i}"]
        if not np.allclose(got, want, rtol=rtol, atol=atol):
            bad = ~np.isclose(got, want, rtol=rtol, atol=atol)
            where = tuple(int(v[0]) for v in np.nonzero(bad))
            return (f"output {i} differs from the reference at {int(bad.sum())} of "
                    f"{bad.size} elements; first at {where}: got {got[where]}, expected "
                    f"{want[where]}")
    return None


def check_and_time(mod, dev, arg_info, arrays, ref: dict | None, number: int, repeat: int,
                   min_repeat_ms: float, rtol: float, atol: float, f_preproc: str = ""
                   ) -> tuple[str, Any]:
    """Run a loaded module once on ``arrays`` (outputs start as garbage), compare with the
    reference (if any), then time it with ``time_evaluator`` (``f_preproc`` run before
    each repeat). Works for a local module and a remote one (``dev`` a device of its RPC
    session). Returns ``("ok", costs)`` or ``("wrong", message)``; raises what the module
    raises."""
    nd, dev = _nd_args(arrays, arg_info, dev)
    mod(*nd)
    if ref is not None:
        wrong = compare_outputs(nd, arg_info, ref, rtol, atol)
        if wrong is not None:
            return "wrong", wrong
    timer = mod.time_evaluator(mod.entry_name, dev, number=number, repeat=repeat,
                               min_repeat_ms=min_repeat_ms, f_preproc=f_preproc)
    return "ok", tuple(timer(*nd).results)


def run_candidate(lib_path: str, arg_info, number: int, repeat: int, min_repeat_ms: float,
                  ref_path: str | None, rtol: float, atol: float, f_preproc: str = ""
                  ) -> tuple[str, Any]:
    """Check (against the reference, if any) and time one library. Returns ``("ok",
    costs)``, ``("wrong", message)`` or raises."""
    mod, dev = load_built(lib_path)
    arrays, ref = _load_inputs(arg_info, ref_path)
    return check_and_time(mod, dev, arg_info, arrays, ref, number, repeat, min_repeat_ms,
                          rtol, atol, f_preproc)


#: the error number of each way a run ends (see :func:`run_result`)
RUN_ERRNO = {"ok": MeasureErrorNo.NO_ERROR, "wrong": MeasureErrorNo.WRONG_ANSWER,
             "timeout": MeasureErrorNo.RUN_TIMEOUT, "crash": MeasureErrorNo.RUNTIME_DEVICE,
             "error": MeasureErrorNo.RUNTIME_DEVICE}


def run_result(kind: str, value: Any, seconds: float) -> MeasureResult:
    """The MeasureResult of a run that ended as ``kind`` (a key of :data:`RUN_ERRNO`):
    ``value`` is the costs for ``ok``, else the message."""
    costs = tuple(value) if kind == "ok" else (str(value),)
    return MeasureResult(costs, int(RUN_ERRNO[kind]), seconds, time.time())


def build_failure_result(build: BuildResult) -> MeasureResult:
    """The MeasureResult of a candidate that did not build (its build error, unchanged)."""
    return MeasureResult((build.error,), int(build.error_no), build.time_cost, time.time())


def worker_run_result(status: str, value: Any, seconds: float, timeout: float
                      ) -> MeasureResult:
    """The MeasureResult of a :meth:`Worker.call` of :func:`run_candidate` that ended as
    ``status`` with ``value``, ``timeout`` seconds allowed."""
    if status == "ok":
        return run_result(value[0], value[1], seconds)
    if status == "timeout":
        return run_result("timeout", f"run timed out after {timeout:g} s", seconds)
    if status == "crash":
        return run_result("crash", f"the kernel crashed the worker ({describe_exit(value)})",
                          seconds)
    return run_result("error", _last_line(value), seconds)


def set_measure_settings(runner, timeout, number, repeat, min_repeat_ms, cooldown_interval,
                         check_correctness, ref_func, rtol, atol) -> None:
    """The timing and checking settings every runner (local or remote) keeps."""
    runner.timeout = float(timeout)
    runner.number, runner.repeat = int(number), int(repeat)
    runner.min_repeat_ms = float(min_repeat_ms)
    runner.cooldown_interval = float(cooldown_interval)
    runner.check_correctness = bool(check_correctness)
    runner.ref_func = ref_func
    runner.rtol, runner.atol = float(rtol), float(atol)


class LocalRunner(Runner):
    """Time candidates in a worker process: after one checked run, ``repeat``
    measurements of ``number`` calls each (``number`` grows until a measurement lasts
    ``min_repeat_ms``). A candidate taking longer than ``timeout`` seconds in all is
    killed (RUN_TIMEOUT); one that crashes the worker is RUNTIME_DEVICE; one whose output
    differs from the reference (``rtol``/``atol``) is WRONG_ANSWER. With
    ``enable_cpu_cache_flush`` the CPU caches are emptied before each of the ``repeat``
    measurements (kiln/runtime/cache_flush.py; with ``number=1`` every timed call starts
    cold)."""

    def __init__(self, timeout: float = 10, number: int = 4, repeat: int = 3,
                 min_repeat_ms: float = 0, cooldown_interval: float = 0.0,
                 check_correctness: bool = True, ref_func: Callable | None = None,
                 rtol: float = 1e-3, atol: float = 1e-4, enable_cpu_cache_flush: bool = False):
        set_measure_settings(self, timeout, number, repeat, min_repeat_ms, cooldown_interval,
                             check_correctness, ref_func, rtol, atol)
        self.f_preproc = "cache_flush_cpu_non_first_arg" if enable_cpu_cache_flush else ""
        self._worker: Worker | None = None
        self._dir: str | None = None
        self.ref_path: str | None = None
        self.cuda_device: dict = {}  # the GPU of a CUDA task (get_build_kwargs), {} if none

    # ---- reference ----
    def set_task(self, task, builder) -> None:
        super().set_task(task, builder)
        self.ref_path = None
        if self._worker is None:
            self._worker = Worker(preload=_PRELOAD)
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="kiln-autotvm-run-")
        if self.check_correctness:
            self.ref_path = self._make_reference(task, builder)

    def get_build_kwargs(self, task) -> dict:
        """For a CUDA task, the GPU the worker times on (its architecture and limits, see
        :func:`~kiln.autotvm.measure.cuda.device_build_kwargs`); ``{}`` otherwise."""
        if not is_cuda_target(task.target):
            return {}
        if self._worker is None:
            self._worker = Worker(preload=_PRELOAD)
        status, value = self._worker.call("kiln.autotvm.measure.cuda", "device_build_kwargs",
                                          timeout=max(self.timeout, 60.0))
        self.cuda_device = value if status == "ok" else {}
        return self.cuda_device

    def _make_reference(self, task, builder) -> str | None:
        path = os.path.join(self._dir, f"reference-{id(task):x}.npz")
        inp = MeasureInput(task.target, task, FallbackConfigEntity())
        if self.ref_func is not None:
            return ref_func_reference(task, self.ref_func, path)
        build = builder.build([inp])[0]
        if build.error_no != MeasureErrorNo.NO_ERROR:
            logger.warning("correctness check disabled for %s: the fallback config does not "
                           "build (%s)", task.name, _last_line(build.error))
            return None
        status, value = self._worker.call("kiln.autotvm.measure.local", "reference_run",
                                          (build.filename, build.arg_info, path),
                                          timeout=max(self.timeout, 60.0))
        if status != "ok":
            logger.warning("correctness check disabled for %s: the fallback config failed to "
                           "run (%s)", task.name, status)
            return None
        return path

    # ---- measuring ----
    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        if self._worker is None:
            self._worker = Worker(preload=_PRELOAD)
        out = []
        for build in build_results:
            if build.error_no != MeasureErrorNo.NO_ERROR:
                out.append(build_failure_result(build))
                continue
            start = time.perf_counter()
            status, value = self._worker.call(
                "kiln.autotvm.measure.local", "run_candidate",
                (build.filename, build.arg_info, self.number, self.repeat, self.min_repeat_ms,
                 self.ref_path, self.rtol, self.atol, self.f_preproc), timeout=self.timeout)
            secs = time.perf_counter() - start + build.time_cost
            out.append(worker_run_result(status, value, secs, self.timeout))
            if status == "error" and self.cuda_device:
                self._worker.kill()  # a faulting kernel leaves the CUDA context unusable
            if self.cooldown_interval:
                time.sleep(self.cooldown_interval)
        return out

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
