"""Each tuner on a small GEMM, and the pieces of the model-based tuner on their own."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from kiln import autotvm
from kiln.autotvm.feature import get_itervar_feature
from kiln.autotvm.tuner import SimulatedAnnealingOptimizer
from kiln.autotvm.tuner.model_based_tuner import submodular_pick

from . import _templates  # noqa: F401 - registers the templates

try:
    import xgboost  # noqa: F401

    HAS_XGB = True
except ImportError:
    HAS_XGB = False

needs_xgb = pytest.mark.skipif(not HAS_XGB, reason="xgboost is not installed")


def _option():
    return autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=30),
        runner=autotvm.LocalRunner(number=2, repeat=1, timeout=10))


TUNERS = {
    "random": lambda t: autotvm.RandomTuner(t, seed=0),
    "grid": lambda t: autotvm.GridSearchTuner(t),
    "ga": lambda t: autotvm.GATuner(t, pop_size=3, elite_num=1, seed=0),
    # a short annealing walk (the space is small enough to be scored whole by default)
    "xgb": lambda t: autotvm.XGBTuner(
        t, plan_size=3, seed=0, diversity_filter_ratio=2,
        optimizer=SimulatedAnnealingOptimizer(t, n_iter=6, parallel_size=8, seed=0)),
}


@pytest.mark.parametrize("name", list(TUNERS))
def test_tuner_on_small_gemm(name, tmp_path):
    if name == "xgb" and not HAS_XGB:
        pytest.skip("xgboost is not installed")
    task = autotvm.task.create("test_gemm", (64, 64, 64), "llvm")
    tuner = TUNERS[name](task)
    log = tmp_path / "gemm.log"
    out = io.StringIO()
    n = 6
    tuner.tune(n, _option(), callbacks=[autotvm.callback.progress_bar(n, stream=out),
                                        autotvm.callback.log_to_file(str(log))])
    records = list(autotvm.record.load_from_file(log))
    assert len(records) == n
    indices = [inp.config.index for inp, _ in records]
    assert len(set(indices)) == n  # no config measured twice
    assert all(res.error_no == 0 for _, res in records)
    flops = [task.flop / res.cost for _, res in records]
    assert tuner.best_flops == pytest.approx(max(flops))
    assert tuner.best_config.index == indices[int(np.argmax(flops))]
    text = out.getvalue()
    assert f"Progress: ({n}/{n})" in text and "GFLOPS" in text and "Done." in text
    if name == "grid":
        assert indices == list(range(n))
    if name == "xgb":
        assert tuner.train_ct >= 1 and tuner.cost_model.trained


def test_early_stopping_and_exhausted_space():
    task = autotvm.task.create("test_gemm", (4, 4, 2), "llvm")  # 3 * 2 * 6 = 36 configs
    tuner = autotvm.GridSearchTuner(task, range_idx=(0, 4))
    tuner.tune(100, _option())
    assert tuner.trials_done == 5
    tuner = autotvm.RandomTuner(task, seed=1)
    tuner.tune(100, _option(), early_stopping=2)
    assert tuner.trials_done <= tuner.best_iter + 2 + 2  # stops within a batch of the limit


def test_itervar_features_see_tiles_and_annotations():
    task = autotvm.task.create("test_gemm", (64, 64, 64), "llvm")
    space = task.config_space
    plain = get_itervar_feature(task, space.get(space.index_of([0, 0, 0])))
    vec = get_itervar_feature(task, space.get(space.index_of([3, 4, 2])))  # 8 x 16, xi vec
    for f in (plain, vec):
        assert {"A.count0", "B.touch1", "C.reuse2", "loop0.extent"} <= set(f)
    assert plain["loop0.serial"] == 1 and vec["loop0.vectorized"] == 1
    assert vec["loop0.extent"] == pytest.approx(math.log2(1 + 16))
    # B[k, j] does not move with the row loop: reused 8 times within an 8-row tile
    assert vec["B.reuse1"] > plain["B.reuse1"]


class _FakeModel:
    """Scores a config by how close its knobs are to a hidden optimum."""

    def __init__(self, space, best):
        self.space, self.best = space, np.array(best)

    def predict(self, indices):
        return np.array([-np.abs(np.array(self.space.knob_indices(i)) - self.best).sum()
                         for i in indices], dtype=float)


def test_simulated_annealing_finds_the_model_optimum_and_skips_visited():
    task = autotvm.task.create("test_gemm", (1024, 64, 1024), "llvm")  # 11 * 11 * 6 configs
    space = task.config_space
    best = [7, 3, 5]
    model = _FakeModel(space, best)
    opt = SimulatedAnnealingOptimizer(task, n_iter=40, parallel_size=16, seed=0)
    visited = {space.index_of(best)}
    found = opt.find_maximums(model, 5, visited)
    assert len(found) == 5 and len(set(found)) == 5 and not set(found) & visited
    scores = model.predict(found)
    assert scores.max() == -1  # a neighbour of the (excluded) optimum
    # a small space is scored exhaustively
    small = autotvm.task.create("test_gemm", (8, 8, 8), "llvm")
    opt = SimulatedAnnealingOptimizer(small, n_iter=10, parallel_size=16)
    top = opt.find_maximums(_FakeModel(small.config_space, [1, 1, 1]), 3, set())
    assert top[0] == small.config_space.index_of([1, 1, 1])


def test_diversity_pick_prefers_new_knob_values():
    task = autotvm.task.create("test_gemm", (64, 64, 64), "llvm")
    space = task.config_space
    cands = [space.index_of(k) for k in ([1, 1, 1], [1, 1, 2], [1, 2, 1], [4, 4, 4])]
    picked = submodular_pick(space, cands, 2)
    assert picked[0] == cands[0] and picked[1] == cands[3]


@needs_xgb
def test_rank_model_orders_held_out_configs():
    from kiln.autotvm.tuner import XGBoostCostModel

    task = autotvm.task.create("test_gemm", (1024, 64, 1024), "llvm")
    space = task.config_space
    rng = np.random.default_rng(0)
    idx = rng.choice(len(space), size=120, replace=False)

    def speed(i):  # a synthetic machine: likes mid-sized tiles and vectorization
        ty, tx, ann = space.knob_indices(int(i))
        return 10 - abs(ty - 5) - abs(tx - 6) + 2 * (ann % 3 == 2)

    y = np.array([speed(i) for i in idx], dtype=float)
    model = XGBoostCostModel(task, feature_type="knob", loss_type="rank")
    model.fit(idx[:80], y[:80])
    pred = model.predict(idx[80:])
    truth = y[80:]
    pairs = [(a, b) for a in range(40) for b in range(40) if truth[a] > truth[b]]
    acc = np.mean([pred[a] > pred[b] for a, b in pairs])
    assert acc > 0.8


def test_xgb_tuner_options_are_checked():
    task = autotvm.task.create("test_gemm", (16, 16, 16), "llvm")
    if not HAS_XGB:
        with pytest.raises(ImportError, match="xgboost"):
            autotvm.XGBTuner(task)
        return
    with pytest.raises(ValueError, match="feature_type"):
        autotvm.XGBTuner(task, feature_type="curve")
    with pytest.raises(ValueError, match="loss_type"):
        autotvm.XGBTuner(task, loss_type="hinge")
    tuner = autotvm.XGBTuner(task)
    tuner.load_history([])  # nothing to learn from: no model, no plan
    assert not tuner.history_fitted and not tuner.cost_model.trained
