"""auto_scheduler on a kiln.relay model: tasks from the graph, the task scheduler's trial
allocation and resume, and ``relay.build`` with the logged states (the "tune a network"
tutorial)."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from kiln import auto_scheduler, relay  # noqa: E402
from kiln.auto_scheduler import MeasureErrorNo, MeasureInput, MeasureResult  # noqa: E402
from kiln.auto_scheduler.annotation import sample_candidate  # noqa: E402
from kiln.auto_scheduler.sketch import generate_sketches  # noqa: E402
from kiln.auto_scheduler.task_scheduler import task_gradient  # noqa: E402
from kiln.autotvm.measure import Builder, BuildResult, Runner  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.relay import testing  # noqa: E402

from . import workloads  # noqa: F401, E402 - registers the workloads

USE_AUTO_SCHEDULER = {"relay.backend.use_auto_scheduler": True}


def _import(model):
    return relay.frontend.from_onnx(model)


def _run(lib, model) -> np.ndarray:
    name, x = testing.random_input(model)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(name, x)
    gm.run()
    return gm.get_output(0).numpy()


def _untuned(mod, params):
    with kiln.transform.PassContext(opt_level=3):
        return relay.build(mod, target="llvm", params=params)


def _auto_scheduled(mod, params, log):
    with auto_scheduler.ApplyHistoryBest(log), \
            kiln.transform.PassContext(opt_level=3, config=USE_AUTO_SCHEDULER):
        return relay.build(mod, target="llvm", params=params)


# ---- extraction ------------------------------------------------------------------------
def test_extract_tasks_one_per_distinct_group_weighted_by_its_uses():
    mod, params = _import(testing.inception_block())
    tasks, weights = auto_scheduler.extract_tasks(mod, params, "llvm")
    # the three 1x1 branch convolutions compute the same DAG: one task of weight 3
    assert weights == [3, 1, 1, 1, 1]
    assert [t.desc.split("  ")[0] for t in tasks] == ["conv2d_NCHWc + add + relu"] * 4 \
        + ["max_pool2d"]
    assert all(any(op.reduce_axis for op in t.compute_dag.compute_ops) for t in tasks)
    again, _ = auto_scheduler.extract_tasks(mod, params, "llvm")
    assert [t.workload_key for t in again] == [t.workload_key for t in tasks]
    simple, _ = auto_scheduler.extract_tasks(mod, params, "llvm", include_simple_tasks=True)
    assert len(simple) > len(tasks)


def test_extract_tasks_names_what_it_does_not_do():
    _, params = _import(testing.conv_bias_relu())
    with pytest.raises(TypeError, match="kiln.relay module"):
        auto_scheduler.extract_tasks(object(), params, "llvm")


# ---- relay.build with the log ----------------------------------------------------------
def _log_random_states(tasks, log: str, seed: int = 0) -> None:
    """One random state of each task's last sketch (rfactor where the task has it) in
    ``log``, with a made-up time."""
    rng = random.Random(seed)
    for task in tasks:
        sketch = generate_sketches(task.compute_dag)[-1]
        state = sample_candidate([sketch], rng).state(sketch)
        auto_scheduler.save_records(log, [MeasureInput(task, state)],
                                    [MeasureResult((1e-5,), 0, 0.1, 0.0)])


@pytest.mark.slow  # two builds of a network: 2-3 s on a loaded machine
def test_relay_build_replays_the_logged_states_and_matches_the_untuned_build(tmp_path):
    model = testing.gemm_classifier()  # conv, global pool (rfactor), dense, softmax (rfactor)
    mod, params = _import(model)
    tasks, _ = auto_scheduler.extract_tasks(mod, params, "llvm")
    assert len(tasks) == 4
    log = str(tmp_path / "net.json")
    _log_random_states(tasks, log)
    lib = _auto_scheduled(mod, params, log)
    assert lib.summary.count("(auto_scheduler: best state of DAG") == 4
    np.testing.assert_allclose(_run(lib, model), _run(_untuned(mod, params), model),
                               rtol=1e-5, atol=1e-6)


def test_records_are_used_only_under_the_pass_context_key(tmp_path):
    mod, params = _import(testing.conv_bias_relu())
    tasks, _ = auto_scheduler.extract_tasks(mod, params, "llvm")
    log = str(tmp_path / "net.json")
    _log_random_states(tasks, log)
    with auto_scheduler.ApplyHistoryBest(log), kiln.transform.PassContext(opt_level=3):
        plain = relay.build(mod, target="llvm", params=params)
    assert "auto_scheduler" not in plain.summary  # the hand schedules, as without a log


# ---- the task scheduler, on made-up measurements ---------------------------------------
class _NoBuild(Builder):
    def build(self, measure_inputs):
        return [BuildResult(None, (), 0, None, 0.0) for _ in measure_inputs]


class _MadeUpTimes(Runner):
    """A state's time: its task's base time, up to twice that by a hash of its steps."""

    def __init__(self, base: dict[str, float]) -> None:
        self.base = base

    def run(self, measure_inputs, build_results):
        return [MeasureResult((self.base[i.task.workload_key]
                               * (1 + zlib.crc32(i.config.key().encode()) % 1000 / 1000),),
                              0, 0.0, 0.0) for i in measure_inputs]


def _gemm_tasks():
    return [auto_scheduler.SearchTask(func="as_test_matmul", args=(n, n, n, "float32"),
                                      target="llvm") for n in (32, 64)]


def _options(tasks, base, trials, log=None):
    return auto_scheduler.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=2, verbose=0, builder=_NoBuild(),
        runner=_MadeUpTimes({t.workload_key: b for t, b in zip(tasks, base, strict=True)}),
        measure_callbacks=[auto_scheduler.RecordToFile(log)] if log else [])


def _tune(tasks, weights, base, trials, log=None, load_log_file=None):
    scheduler = auto_scheduler.TaskScheduler(tasks, weights, load_log_file=load_log_file,
                                             seed=0)
    scheduler.tune(_options(tasks, base, trials, log), search_policy="sketch.random",
                   search_policy_params={"population_size": 8, "num_iters": 1})
    return scheduler


def test_trials_go_to_the_task_with_the_largest_weighted_latency():
    tasks = _gemm_tasks()
    slow_first = _tune(tasks, [1, 1], [1e-3, 1e-6], trials=16)
    assert sum(slow_first.task_trials) == 16
    assert slow_first.task_trials[0] >= 12  # 2 warm-up trials for the fast task, ~all else
    # a weight of 10000 makes the fast task's kernels the larger share of the latency
    weighted = _tune(tasks, [1, 10000], [1e-3, 1e-6], trials=16)
    assert weighted.task_trials[1] >= 12
    assert weighted.cur_score == pytest.approx(
        weighted.best_costs[0] + 10000 * weighted.best_costs[1])


def test_round_robin_takes_the_tasks_in_turn():
    tasks = _gemm_tasks()
    scheduler = auto_scheduler.TaskScheduler(tasks, strategy="round-robin", seed=0)
    scheduler.tune(_options(tasks, [1e-3, 1e-6], 12), search_policy="sketch.random",
                   search_policy_params={"population_size": 8, "num_iters": 1})
    assert scheduler.task_trials == [6, 6]


def test_gradient_of_a_task():
    # no history yet: the forward term alone, -cost / rounds, times the weight
    assert task_gradient(4.0, [4.0], 2, 3.0, 0.2, 3) == pytest.approx(3 * 0.8 * -2.0)
    # a best cost that fell by 3 over the last 3 rounds adds alpha * -1
    g = task_gradient(1.0, [4.0, 3.0, 2.0, 1.0], 4, 1.0, 0.2, 3)
    assert g == pytest.approx(0.2 * -1.0 + 0.8 * -0.25)


def test_tuning_resumes_from_the_log(tmp_path):
    tasks = _gemm_tasks()
    log = str(tmp_path / "resume.json")
    first = _tune(tasks, [1, 1], [1e-3, 1e-3], trials=8, log=log)
    seen = {inp.state.key() for inp, _ in auto_scheduler.load_records(log)}
    assert len(seen) == 8
    again = _tune(tasks, [1, 1], [1e-3, 1e-3], trials=8, log=log, load_log_file=log)
    rows = list(auto_scheduler.load_records(log))
    assert len(rows) == 16 and len({inp.state.key() for inp, _ in rows}) == 16  # none twice
    assert sum(again.task_trials) == 16  # 8 restored, 8 new; the budget counts new ones
    assert all(b <= a for a, b in zip(first.best_costs, again.best_costs, strict=True))


# ---- the tutorial ----------------------------------------------------------------------
@pytest.mark.slow
def test_tune_a_network_tutorial(tmp_path):
    """The classic "auto-scheduling a neural network for x86 CPU" code under the tvm alias,
    on a tiny CNN with a few trials: every tuned kernel is measured (and checked) for real,
    the tuned build gives the untuned build's results."""
    kiln.install_as_tvm()
    import tvm
    from tvm import auto_scheduler, relay

    model = testing.gemm_classifier()  # conv, global pool, dense, softmax: 4 tasks
    mod, params = relay.frontend.from_onnx(model)
    target = tvm.target.Target("llvm")
    tasks, task_weights = auto_scheduler.extract_tasks(mod["main"], params, target)
    log_file = str(tmp_path / "net.json")
    tuner = auto_scheduler.TaskScheduler(tasks, task_weights)
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=2 * len(tasks), num_measures_per_round=2, verbose=0,
        builder=auto_scheduler.LocalBuilder(n_parallel=2, timeout=60),
        runner=auto_scheduler.LocalRunner(number=1, repeat=1, min_repeat_ms=0, timeout=30),
        measure_callbacks=[auto_scheduler.RecordToFile(log_file)])
    tuner.tune(tune_option, search_policy_params={"population_size": 8, "num_iters": 1})
    records = list(auto_scheduler.load_records(log_file))
    assert len(records) == 2 * len(tasks)
    assert MeasureErrorNo.WRONG_ANSWER not in {r.error_no for _, r in records}

    with auto_scheduler.ApplyHistoryBest(log_file):
        with tvm.transform.PassContext(opt_level=3,
                                       config={"relay.backend.use_auto_scheduler": True}):
            lib = relay.build(mod, target=target, params=params)
    assert "(auto_scheduler: " in lib.summary
    np.testing.assert_allclose(_run(lib, model), _run(_untuned(mod, params), model),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # two builds of a network: 3-6 s on a loaded machine
def test_relay_build_re_lays_out_constant_weights_at_compile_time(tmp_path):
    """States of the tiling sketches (conv + ReLU, dense + bias): the conv's and the dense
    layer's constant weights are transformed once by relay.build into the states' tile
    order (new constants the kernels take), and the network's output is unchanged."""
    model = testing.gemm_classifier()
    mod, params = _import(model)
    tasks, _ = auto_scheduler.extract_tasks(mod, params, "llvm")
    assert {t.layout_rewrite_option for t in tasks} == {
        auto_scheduler.LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED}
    log = str(tmp_path / "net.json")
    rng = random.Random(0)
    for task in tasks:
        sketch = generate_sketches(task.compute_dag)[0]
        state = sample_candidate([sketch], rng).state(sketch)
        auto_scheduler.save_records(log, [MeasureInput(task, state)],
                                    [MeasureResult((1e-5,), 0, 0.1, 0.0)])
    lib = _auto_scheduled(mod, params, log)
    assert lib.summary.count(", layout of p1 [") == 2, lib.summary
    rewritten = [v for k, v in lib.consts.items() if k.endswith("p1_rewritten")]
    assert len(rewritten) == 2
    assert not any(k.endswith("fc_w") for k in lib.consts)  # only the new layout is kept
    np.testing.assert_allclose(_run(lib, model), _run(_untuned(mod, params), model),
                               rtol=1e-5, atol=1e-6)
