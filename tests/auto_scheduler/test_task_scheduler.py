"""auto_scheduler.TaskScheduler: groups of similar tasks and the ``beta`` term of the
gradient, on a synthetic state (no measurement)."""

from __future__ import annotations

import math

import pytest

from kiln import auto_scheduler
from kiln.auto_scheduler.task_scheduler import derive_similarity_tag, task_gradient

from . import workloads  # noqa: F401 - registers the workloads


def _tasks() -> list[auto_scheduler.SearchTask]:
    """GEMM 32 and GEMM 64 (similar: one DAG up to shapes) and a vector sum."""
    return [auto_scheduler.SearchTask(func="as_test_matmul", args=(n, n, n, "float32"),
                                      target="llvm") for n in (32, 64)] + \
        [auto_scheduler.SearchTask(func="as_test_vector_sum", args=(4096,), target="llvm")]


def test_tasks_of_one_dag_structure_are_a_group():
    tasks = _tasks()
    tags = [derive_similarity_tag(t.compute_dag) for t in tasks]
    assert tags[0] == tags[1] != tags[2]
    assert auto_scheduler.TaskScheduler(tasks).group_task_ids == [[0, 1], [2]]


def test_group_bound_shortens_the_forward_estimate():
    # cost 2e-4 after 4 rounds: -c / rounds = -5e-5 alone; a group bound of 1e-6 (the cost
    # at the group's best throughput times beta) makes the forward term 1e-6 - 2e-4
    assert task_gradient(2e-4, [2e-4], 4, 1.0, 0.2, 3) == pytest.approx(0.8 * -5e-5)
    assert task_gradient(2e-4, [2e-4], 4, 1.0, 0.2, 3, group_bound=1e-6) == \
        pytest.approx(0.8 * (1e-6 - 2e-4))
    # a bound above c - c / rounds changes nothing
    assert task_gradient(2e-4, [2e-4], 4, 1.0, 0.2, 3, group_bound=1.0) == \
        pytest.approx(0.8 * -5e-5)


def _scheduler(beta: float) -> auto_scheduler.TaskScheduler:
    """GEMM 32 at 0.33 GFLOP/s after 4 rounds, GEMM 64 at 131 GFLOP/s after 10, the
    vector sum at 1e-4 s after 1 round."""
    s = auto_scheduler.TaskScheduler(_tasks(), beta=beta, eps_random=0.0, seed=0)
    s.best_costs = [2e-4, 4e-6, 1e-4]
    s.task_cts = [4, 10, 1]
    s.task_costs_history = [[c] for c in s.best_costs]
    return s


def test_the_task_lagging_its_group_gets_the_next_round():
    """Without the group term the vector sum (larger -c / rounds) is next; with it, GEMM
    32, far slower than its similar GEMM 64, is expected to gain more and goes first."""
    assert _scheduler(beta=math.inf)._next_task() == 2
    grouped = _scheduler(beta=2.0)
    assert grouped._group_bound(0) == pytest.approx(
        2.0 * grouped.flop_cts[0] / (grouped.flop_cts[1] / 4e-6))
    assert math.isinf(grouped._group_bound(2))
    assert grouped._next_task() == 0
