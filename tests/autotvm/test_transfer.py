"""Transfer learning: ``tuner.load_history`` seeds the cost model with earlier records of
the same template and skips configs of the same workload measured before."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from kiln import autotvm
from kiln.autotvm.measure import MeasureInput, MeasureResult

from . import _templates  # noqa: F401 - registers the templates

xgboost = pytest.importorskip("xgboost")

HISTORY_SHAPE = (32, 32, 32)
NEW_SHAPE = (32, 16, 32)


def _option():
    return autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=30),
        runner=autotvm.LocalRunner(number=1, repeat=1, timeout=10))


@pytest.fixture(scope="module")
def history_log(tmp_path_factory):
    """The log of a first tuning run: 8 random configs of a 32x32x32 GEMM."""
    log = tmp_path_factory.mktemp("history") / "gemm32.log"
    task = autotvm.task.create("test_gemm", HISTORY_SHAPE, "llvm")
    autotvm.RandomTuner(task, seed=0).tune(8, _option(),
                                           callbacks=[autotvm.callback.log_to_file(str(log))])
    return str(log)


def _xgb(task, **kw):
    return autotvm.XGBTuner(task, plan_size=4, seed=0, **kw)


def _top(model, space, num):
    scores = model.predict(list(range(len(space))))
    return [int(i) for i in np.argsort(-scores, kind="stable")[:num]]


@pytest.mark.slow
def test_second_run_starts_from_the_history_model(history_log):
    task = autotvm.task.create("test_gemm", NEW_SHAPE, "llvm")
    tuner = _xgb(task)
    tuner.load_history(autotvm.record.load_from_file(history_log), min_seed_records=8)
    assert tuner.history_fitted and tuner.cost_model.base_model is not None
    assert tuner.cost_model.history_records == 8
    # the first plan is the model's top pick (this space is small enough to be scored whole)
    plan = tuner.trials
    assert plan == _top(tuner.cost_model, task.config_space, 4)
    first = []
    tuner.tune(4, _option(), callbacks=[lambda t, inputs, results:
                                        first.append([i.config.index for i in inputs])])
    assert first[0] == plan[:2] and first[1] == plan[2:3] + first[1][1:]
    # its own measurements are fitted on top of the history model, discounted
    assert tuner.train_ct == 1 and 0 < tuner.cost_model.base_discount < 1
    # deterministic given the seed
    again = _xgb(task)
    again.load_history(history_log, min_seed_records=8)
    assert [c.index for c in again.next_batch(2)] == first[0]


def test_history_model_transfers_a_preference():
    """Synthetic history of the 32x32x32 workload where a wider inner tile of x is faster:
    the first plan on another shape prefers wide tiles too (knob features)."""
    src = autotvm.task.create("test_gemm", HISTORY_SHAPE, "llvm")
    space = src.config_space
    records = []
    for idx in range(0, len(space), 2):
        cfg = space.get(idx)
        inner = cfg["tile_x"].size[-1]
        records.append((MeasureInput(src.target, src, cfg),
                        MeasureResult((1e-3 / inner,), 0, 0.1, time.time())))
    task = autotvm.task.create("test_gemm", NEW_SHAPE, "llvm")
    tuner = _xgb(task, feature_type="knob")
    tuner.load_history(records, min_seed_records=50)
    assert tuner.history_fitted
    widest = max(task.config_space.get(i)["tile_x"].size[-1]
                 for i in range(len(task.config_space)))
    picked = [task.config_space.get(i)["tile_x"].size[-1] for i in tuner.trials]
    assert picked == [widest] * 4


def test_history_of_another_template_is_ignored(caplog):
    other = autotvm.task.create("test_faulty", (16,), "llvm")
    records = [(MeasureInput(other.target, other, other.config_space.get(i)),
                MeasureResult((1e-3,), 0, 0.1, time.time()))
               for i in range(len(other.config_space))]
    task = autotvm.task.create("test_gemm", NEW_SHAPE, "llvm")
    tuner = _xgb(task)
    with caplog.at_level(logging.INFO, logger="autotvm"):
        tuner.load_history(records, min_seed_records=1)
    assert not tuner.history_fitted and tuner.trials == []
    assert tuner.cost_model.base_model is None and not tuner.visited
    assert "0 usable records" in caplog.text


def test_too_few_records_leave_the_model_untrained(history_log, caplog):
    task = autotvm.task.create("test_gemm", NEW_SHAPE, "llvm")
    tuner = _xgb(task)
    with caplog.at_level(logging.INFO, logger="autotvm"):
        tuner.load_history(history_log)  # min_seed_records=500, as in TVM
    assert not tuner.history_fitted and tuner.trials == []
    assert "8 usable records" in caplog.text and "min_seed_records=500" in caplog.text
    assert len(tuner.next_batch(2)) == 2  # random, as without history


@pytest.mark.parametrize("kind", ["random", "grid", "ga", "xgb"])
def test_configs_measured_before_are_not_measured_again(history_log, kind):
    task = autotvm.task.create("test_gemm", HISTORY_SHAPE, "llvm")
    seen = {inp.config.index for inp, _ in autotvm.record.load_from_file(history_log)}
    tuner = {"random": lambda: autotvm.RandomTuner(task, seed=0),
             "grid": lambda: autotvm.GridSearchTuner(task),
             "ga": lambda: autotvm.GATuner(task, pop_size=8, seed=0),
             "xgb": lambda: _xgb(task, feature_type="knob")}[kind]()
    tuner.load_history(history_log, min_seed_records=1000)
    assert seen <= tuner.visited
    proposed = [c.index for c in tuner.next_batch(len(task.config_space))]
    assert not seen & set(proposed)
    if kind in ("random", "grid"):
        assert len(proposed) == len(task.config_space) - len(seen)


def test_load_history_checks_its_input():
    task = autotvm.task.create("test_gemm", NEW_SHAPE, "llvm")
    with pytest.raises(TypeError, match="MeasureInput, MeasureResult"):
        autotvm.RandomTuner(task).load_history([1, 2])
    assert autotvm.RandomTuner(task).load_history([]) == []
