"""Measurement isolation: every kind of broken candidate costs one trial, never the session."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import autotvm
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput, create_measure_batch
from kiln.autotvm.measure.local import fork_map
from kiln.autotvm.measure.worker import Worker

from ._templates import MODES, numpy_gemm


def _measure(task, modes, **runner_kw):
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=20),
        runner=autotvm.LocalRunner(number=1, repeat=1, timeout=3, **runner_kw))
    batch = create_measure_batch(task, option)
    try:
        space = task.config_space
        inputs = [MeasureInput(task.target, task, space.get(space.index_of([MODES.index(m), 2])))
                  for m in modes]
        return batch(inputs)
    finally:
        batch.close()


@pytest.mark.slow
def test_crash_hang_wrong_and_failures_are_recorded_per_candidate():
    task = autotvm.task.create("test_faulty", (32,), "llvm")
    modes = ["ok", "crash", "ok", "hang", "wrong", "raise", "no_lower", "ok"]
    results = _measure(task, modes)
    got = {m: r for m, r in zip(modes, results, strict=True)}
    E = MeasureErrorNo
    assert got["crash"].error_no == E.RUNTIME_DEVICE
    assert "SIGSEGV" in got["crash"].costs[0] or "crashed" in got["crash"].costs[0]
    assert got["hang"].error_no == E.RUN_TIMEOUT
    assert got["wrong"].error_no == E.WRONG_ANSWER
    assert "differs from the reference" in got["wrong"].costs[0]
    assert got["raise"].error_no == E.INSTANTIATION_ERROR
    assert got["raise"].costs == ("this config is rejected by the template",)
    assert got["no_lower"].error_no == E.COMPILE_HOST
    assert "input tensor 'A'" in got["no_lower"].costs[0]
    # the good candidates before and after the broken ones are measured normally
    for m, r in zip(modes, results, strict=True):
        if m == "ok":
            assert r.error_no == E.NO_ERROR and all(c > 0 for c in r.costs)


@pytest.mark.slow
def test_user_reference_and_build_timeout():
    task = autotvm.task.create("test_faulty", (16,), "llvm")
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=2),
        runner=autotvm.LocalRunner(number=1, repeat=1, timeout=5, ref_func=numpy_gemm))
    batch = create_measure_batch(task, option)
    try:
        space = task.config_space
        inputs = [MeasureInput(task.target, task, space.get(space.index_of([MODES.index(m), 1])))
                  for m in ("ok", "wrong", "slow_build")]
        ok, wrong, slow = batch(inputs)
    finally:
        batch.close()
    assert ok.error_no == MeasureErrorNo.NO_ERROR
    assert wrong.error_no == MeasureErrorNo.WRONG_ANSWER
    assert slow.error_no == MeasureErrorNo.BUILD_TIMEOUT


@pytest.mark.slow
def test_tuning_survives_broken_candidates(tmp_path):
    task = autotvm.task.create("test_faulty", (16,), "llvm")
    log = tmp_path / "faulty.log"
    tuner = autotvm.GridSearchTuner(task, range_idx=(0, 6))  # tile_x 1: ok .. no_lower
    tuner.tune(6, autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=20),
        runner=autotvm.LocalRunner(number=1, repeat=1, timeout=2)),
        callbacks=[autotvm.callback.log_to_file(str(log))])
    records = list(autotvm.record.load_from_file(log))
    assert [r.error_no for _, r in records] == [0, 4, 7, 5, 1, 2]
    assert tuner.best_config["mode"].val == "ok"


def test_worker_reports_errors_crashes_and_timeouts():
    w = Worker()
    try:
        assert w.call("math", "sqrt", (16.0,)) == ("ok", 4.0)
        status, tb = w.call("math", "sqrt", (-1.0,))
        assert status == "error" and "ValueError" in tb
        assert w.call("time", "sleep", (30,), timeout=0.5) == ("timeout", None)
        status, code = w.call("os", "abort", ())
        assert status == "crash" and code < 0
        assert w.call("math", "sqrt", (9.0,)) == ("ok", 3.0)  # restarted
    finally:
        w.close()


def _square(x):
    if x == 3:
        raise ValueError("three")
    return x * x


def test_fork_map_collects_results_errors_and_timeouts():
    out = fork_map(_square, [(1,), (3,), (4,)], n_parallel=2, timeout=20)
    assert out[0][:2] == ("ok", 1) and out[2][:2] == ("ok", 16)
    assert out[1][0] == "error" and "three" in out[1][1]
    import time

    out = fork_map(time.sleep, [(30,)], n_parallel=1, timeout=0.5)
    assert out[0][0] == "timeout"


def test_measure_option_defaults_and_names():
    opt = autotvm.measure_option()
    assert isinstance(opt["builder"], autotvm.LocalBuilder)
    assert np.isfinite(opt["runner"].timeout)
    opt = autotvm.measure_option(builder="local", runner="local")  # as TVM accepts
    assert isinstance(opt["builder"], autotvm.LocalBuilder)
    assert isinstance(opt["runner"], autotvm.LocalRunner)
    with pytest.raises(ValueError, match="invalid runner 'rpc'; pass \"local\" or a runner"):
        autotvm.measure_option(builder="local", runner="rpc")
