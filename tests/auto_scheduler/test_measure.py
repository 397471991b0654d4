"""auto_scheduler measurement: the CPU cache flush between repeats
(``LocalRunner(enable_cpu_cache_flush=True)``) and the time evaluator's ``f_preproc`` hook it
uses."""

from __future__ import annotations

import random

import numpy as np
import pytest

import kiln
from kiln import auto_scheduler, te
from kiln.auto_scheduler.annotation import sample_candidate
from kiln.auto_scheduler.measure import ProgramMeasurer
from kiln.auto_scheduler.sketch import generate_sketches
from kiln.runtime.cache_flush import flush_buffer_bytes
from kiln.runtime.registry import register_func
from kiln.target.memory import host_memory

from . import workloads  # noqa: F401 - registers the workloads


def test_flush_buffer_is_larger_than_the_last_level_cache():
    assert flush_buffer_bytes() > host_memory().caches[-1].size_bytes


def test_time_evaluator_runs_f_preproc_before_each_repeat():
    calls: list[int] = []
    register_func("as_test_count_preproc", lambda *args: calls.append(len(args)),
                  override=True)
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    mod = kiln.build(te.create_schedule(B.op), [A, B], "llvm")
    args = (kiln.nd.array(np.ones(64, "float32")), kiln.nd.empty((64,)))
    timer = mod.time_evaluator(mod.entry_name, kiln.cpu(0), number=2, repeat=3,
                               f_preproc="as_test_count_preproc")
    assert len(timer(*args).results) == 3
    assert calls == [2, 2, 2]


@pytest.mark.slow
def test_runner_with_cache_flush_measures_checked_states():
    """Two GEMM states measured with the caches flushed before each repeat (the worker's
    first flush pays the buffer's page faults)."""
    task = auto_scheduler.SearchTask(func="as_test_matmul", args=(64, 64, 64, "float32"),
                                     target="llvm")
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(0)
    states = [c.state(sketches[c.sketch])
              for c in (sample_candidate(sketches, rng) for _ in range(2))]
    runner = auto_scheduler.LocalRunner(number=1, repeat=2, min_repeat_ms=0, timeout=60,
                                        enable_cpu_cache_flush=True)
    measurer = ProgramMeasurer(
        auto_scheduler.LocalBuilder(n_parallel=2, timeout=60), runner)
    try:
        _, results = measurer.measure(task, None, states)
    finally:
        measurer.close()
    assert [r.error_no for r in results] == [0, 0]
    assert all(len(r.costs) == 2 for r in results)
