"""auto_scheduler's RPCRunner: states measured (and checked) on an RPC server reached
through a tracker, both started on 127.0.0.1 by ``LocalRPCMeasureContext``."""

from __future__ import annotations

import random

import pytest

from kiln import auto_scheduler
from kiln.auto_scheduler.annotation import sample_candidate
from kiln.auto_scheduler.measure import ProgramMeasurer
from kiln.auto_scheduler.sketch import generate_sketches

from . import workloads  # noqa: F401 - registers the workloads

E = auto_scheduler.MeasureErrorNo


def _gemm_states(n: int):
    task = auto_scheduler.SearchTask(func="as_test_matmul", args=(32, 32, 32, "float32"),
                                     target="llvm")
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(0)
    return task, [c.state(sketches[c.sketch])
                  for c in (sample_candidate(sketches, rng) for _ in range(n))]


@pytest.mark.slow
def test_rpc_runner_measures_checked_states_through_a_tracker(tmp_path):
    """The runner of a local tracker + server, and one made by hand with the tracker's
    address: every state measured, checked, timed and logged."""
    ctx = auto_scheduler.LocalRPCMeasureContext(number=2, repeat=1)
    try:
        task, states = _gemm_states(2)
        runner = auto_scheduler.RPCRunner("local", "127.0.0.1", ctx.tracker.port, number=1,
                                          min_repeat_ms=0, timeout=30)
        log = str(tmp_path / "rpc.json")
        for r in (ctx.runner, runner):
            measurer = ProgramMeasurer(auto_scheduler.LocalBuilder(n_parallel=2), r,
                                       [auto_scheduler.RecordToFile(log)])
            try:
                _, results = measurer.measure(task, None, states)
            finally:
                measurer.close()
            assert [res.error_no for res in results] == [E.NO_ERROR, E.NO_ERROR]
            assert r.ref_path is not None  # checked against the unscheduled computation
    finally:
        ctx.close()
    assert len(list(auto_scheduler.load_records(log))) == 4


def test_rpc_runner_options():
    with pytest.raises(NotImplementedError, match="device 0"):
        auto_scheduler.RPCRunner("k", "127.0.0.1", 9190, device=1)
    runner = auto_scheduler.RPCRunner("k", "127.0.0.1", 9190, n_parallel=2)
    assert runner.check_correctness and runner.n_parallel == 2 and runner.number == 3
