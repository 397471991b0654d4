"""auto_scheduler tuning end to end: measure, log, apply the best, under the tvm alias."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.auto_scheduler import MeasureErrorNo

from . import workloads  # noqa: F401 - registers the workloads


def _tune(auto_scheduler, log, trials=8):
    task = auto_scheduler.SearchTask(func="as_test_matmul", args=(64, 64, 64, "float32"),
                                     target="llvm")
    options = auto_scheduler.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=4, verbose=0,
        builder=auto_scheduler.LocalBuilder(n_parallel=2, timeout=60),
        runner=auto_scheduler.LocalRunner(number=1, repeat=1, min_repeat_ms=0),
        measure_callbacks=[auto_scheduler.RecordToFile(str(log))])
    policy = auto_scheduler.SketchPolicy(task, params={"population_size": 8, "num_iters": 1},
                                         seed=0, verbose=0)
    task.tune(options, search_policy=policy)
    return task, policy


@pytest.mark.slow
def test_tune_logs_and_apply_best_replays_the_best(tmp_path):
    from kiln import auto_scheduler

    log = tmp_path / "matmul.json"
    task, policy = _tune(auto_scheduler, log)
    records = list(auto_scheduler.load_records(str(log)))
    assert len(records) == 8
    # every measured state is checked: none gives a wrong answer or crashes (a compile of
    # a large unrolled body may time out on a loaded machine)
    errors = {r.error_no for _, r in records}
    assert MeasureErrorNo.NO_ERROR in errors
    assert not errors & {MeasureErrorNo.WRONG_ANSWER, MeasureErrorNo.RUNTIME_DEVICE}
    best_inp, best_res = auto_scheduler.load_best_record(str(log), task.workload_key)
    assert best_res.cost == min(r.cost for _, r in records) == policy.best_cost
    assert best_inp.state.key() == policy.best_state.key()

    sch, args = task.apply_best(str(log))
    mod = kiln.build(sch, args, "llvm")
    a, b = (np.random.rand(64, 64).astype("float32") for _ in range(2))
    c = kiln.nd.empty((64, 64))
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)

    with auto_scheduler.ApplyHistoryBest(str(log)) as ctx:
        assert ctx.query("llvm", task.workload_key).key() == policy.best_state.key()
        assert auto_scheduler.DispatchContext.current is ctx


@pytest.mark.slow
def test_classic_tutorial_code_under_the_alias(tmp_path):
    """The matmul tutorial's calls, unchanged, with ``import tvm``."""
    kiln.install_as_tvm()
    import tvm
    from tvm import auto_scheduler, te

    @auto_scheduler.register_workload
    def as_alias_matmul(N, L, M, dtype):
        A = te.placeholder((N, L), name="A", dtype=dtype)
        B = te.placeholder((L, M), name="B", dtype=dtype)
        k = te.reduce_axis((0, L), name="k")
        C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return [A, B, C]

    target = tvm.target.Target("llvm")
    task = tvm.auto_scheduler.SearchTask(func=as_alias_matmul, args=(32, 32, 32, "float32"),
                                         target=target)
    log_file = str(tmp_path / "matmul.json")
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=4, num_measures_per_round=4, verbose=0,
        runner=auto_scheduler.LocalRunner(number=1, repeat=1, min_repeat_ms=0),
        measure_callbacks=[auto_scheduler.RecordToFile(log_file)])
    task.tune(tune_option,
              auto_scheduler.SketchPolicy(task, params={"population_size": 4, "num_iters": 1},
                                          verbose=0))
    sch, args = task.apply_best(log_file)
    func = tvm.build(sch, args, target)
    a, b = (np.random.rand(32, 32).astype("float32") for _ in range(2))
    c = tvm.nd.empty((32, 32))
    func(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)
    assert "C(i, j) reduce=" in str(task.compute_dag)


@pytest.mark.slow
def test_auto_schedule_returns_the_best_schedule():
    """TVM's older single call: tune and return ``(schedule, tensors)``."""
    from kiln import auto_scheduler

    task = auto_scheduler.SearchTask(func="as_test_matmul_add", args=(32, 32, 32, "float32"),
                                     target="llvm")
    policy = auto_scheduler.SketchPolicy(task, params={"population_size": 4, "num_iters": 1},
                                         seed=0, verbose=0)
    options = auto_scheduler.TuningOptions(
        num_measure_trials=2, num_measures_per_round=2, verbose=0,
        runner=auto_scheduler.LocalRunner(number=1, repeat=1, min_repeat_ms=0))
    sch, args = auto_scheduler.auto_schedule(task, policy, options)
    assert policy.best_state is not None
    mod = kiln.build(sch, args, "llvm")
    a, b, bias = (np.random.rand(32, 32).astype("float32") for _ in range(3))
    out = kiln.nd.empty((32, 32))
    mod(kiln.nd.array(a), kiln.nd.array(b), kiln.nd.array(bias), out)
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b + bias, 0), rtol=1e-4)
