"""Cost models that rank candidate states before any is measured.

``predict(task, states) -> scores`` (higher is better, as TVM's ``CostModel.predict``):

* :class:`AnalyticCostModel` (the default) lowers each state and prices it with
  ``kiln.cost.estimate`` on this machine's model: the score is ``1 / predicted seconds``.
  It learns nothing from measurements (``update`` keeps no state).
* :class:`XGBModel` (the default of ``SketchPolicy``, TVM's ``XGBModel``) learns from
  the measurements: XGBoost with the pairwise rank objective on the features of each
  state's steps (:func:`.feature.state_features`: tile sizes, vector and parallel
  extents, unroll limits; no lowering), trained on measured throughput normalized to the
  best (failures 0), refit after every batch. Until ``min_train`` states have been
  measured successfully (or without xgboost) it predicts with the analytic model, on a
  GPU task with :class:`.gpu_model.GPUOccupancyModel`; :attr:`CostModel.learned` says
  which.
* :class:`RandomModel` scores at random (TVM's ``RandomModel``), for tests and as a
  baseline.

Under the analytic models a state that fails to lower scores ``-inf`` and is never
measured; a learned :class:`XGBModel` does not lower (such a state, which the sketch
rules do not make, would fail its build as one trial).

The analytic models lower every new state (``estimate`` of a conv state: 0.3-0.4 s after
0.1-0.15 s of lowering), the search's main cost per trial while they rank; they lower a
batch in forked children, one per CPU (:func:`map_states`), as the builder compiles. A
learned :class:`XGBModel` describes a state in microseconds.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable

from kiln.autotvm.measure.local import fork_map
from kiln.autotvm.tuner.xgboost_cost_model import XGBoostCostModel
from kiln.cost import estimate
from kiln.driver import lower

from .feature import state_features

__all__ = ["CostModel", "AnalyticCostModel", "XGBModel", "RandomModel", "map_states"]

#: the fewest states worth a forked child of their own (a fork costs some milliseconds)
MIN_STATES_PER_CHILD = 4
#: seconds a child may take for its share of a batch; its states then fail to lower
MAP_TIMEOUT = 3600.0


def map_states(fn: Callable, task, states: list) -> list:
    """``fn(task, state)`` of each state, the states shared among forked children (one per
    CPU; here, without children, for a small batch). A child that fails or runs past
    :data:`MAP_TIMEOUT` gives ``None`` for each of its states."""
    n = min(os.cpu_count() or 1, len(states) // MIN_STATES_PER_CHILD)
    if n <= 1:
        return [fn(task, s) for s in states]
    shares = [states[k::n] for k in range(n)]
    done = fork_map(_map_share, [(fn, task, share) for share in shares], n, MAP_TIMEOUT)
    out: list = [None] * len(states)
    for k, (status, values, _) in enumerate(done):
        if status == "ok":
            out[k::n] = values
    return out


def _map_share(fn: Callable, task, states: list) -> list:
    return [fn(task, s) for s in states]


class CostModel:
    """Ranks states of a task (base class)."""

    @property
    def learned(self) -> bool:
        """Whether the model ranks by what it learned from measurements (False: by a
        fixed rule or at random)."""
        return False

    def update(self, inputs, results) -> None:
        """Learn from measured ``(MeasureInput, MeasureResult)`` pairs."""

    def predict(self, task, states) -> list[float]:
        raise NotImplementedError


class RandomModel(CostModel):
    """Uniform random scores."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def predict(self, task, states) -> list[float]:
        return [self.rng.random() for _ in states]


class AnalyticCostModel(CostModel):
    """``1 / kiln.cost.estimate(lower(state)).seconds``, with the target's machine model
    (each state priced once)."""

    def __init__(self) -> None:
        self._cache: dict[str, float] = {}

    def predict(self, task, states) -> list[float]:
        todo = list({s.key(): s for s in states if s.key() not in self._cache}.values())
        for s, score in zip(todo, map_states(self._score, task, todo), strict=True):
            self._cache[s.key()] = -math.inf if score is None else score
        return [self._cache[s.key()] for s in states]

    @staticmethod
    def _score(task, state) -> float:
        try:
            sch, args = task.instantiate(state)  # as measured (a layout copy included)
            seconds = estimate(lower(sch, args)).seconds
        except Exception:  # noqa: BLE001 - an unschedulable state is never measured
            return -math.inf
        return 1.0 / max(seconds, 1e-12)


class XGBModel(CostModel):
    """A rank model on the features of each state's steps, trained on this search's
    measurements."""

    def __init__(self, min_train: int = 4, num_boost_round: int = 64, seed: int = 0,
                 fallback: CostModel | None = None) -> None:
        try:
            import xgboost
        except ImportError:
            xgboost = None
        self.xgb = xgboost
        self.min_train = min_train
        self.num_boost_round = num_boost_round
        self.params = {"max_depth": 3, "eta": 0.3, "seed": seed, "verbosity": 0,
                       "objective": "rank:pairwise"}
        self.fallback = fallback  # None: the analytic model of the task's target kind
        self._analytic: dict[bool, CostModel] = {}
        self.booster = None
        self.keys: list[str] = []
        self._features: dict[str, dict[str, float]] = {}
        self._samples: dict[str, float] = {}  # state key -> measured throughput (0: failed)

    def _analytic_model(self, task) -> CostModel:
        """What ranks states before the booster has learned: the occupancy model for a GPU
        task (``kiln.cost.estimate`` prices loops as one CPU core runs them), else the
        analytic model."""
        from kiln.autotvm.measure.cuda import is_cuda_target

        from .gpu_model import GPUOccupancyModel  # it builds on this module

        gpu = is_cuda_target(task.target)
        if gpu not in self._analytic:
            self._analytic[gpu] = GPUOccupancyModel() if gpu else AnalyticCostModel()
        return self._analytic[gpu]

    @property
    def learned(self) -> bool:
        return self.booster is not None

    def _features_of(self, states) -> list[dict[str, float]]:
        """The features of each state (:func:`.feature.state_features`), each computed
        once."""
        for s in states:
            if s.key() not in self._features:
                self._features[s.key()] = state_features(s)
        return [self._features[s.key()] for s in states]

    def update(self, inputs, results) -> None:
        self._features_of([inp.state for inp in inputs])
        for inp, res in zip(inputs, results, strict=True):
            self._samples[inp.state.key()] = 0.0 if math.isinf(res.cost) else 1.0 / res.cost
        good = [k for k, y in self._samples.items() if y > 0]
        if self.xgb is None or len(good) < self.min_train:
            return
        rows = list(self._samples)
        keys = sorted({k for s in rows for k in self._features[s]})
        y = [self._samples[s] for s in rows]
        x = XGBoostCostModel._to_matrix([self._features[s] for s in rows], keys)
        dtrain = self.xgb.DMatrix(x, label=[v / max(y) for v in y])
        dtrain.set_group([len(rows)])
        self.keys = keys
        self.booster = self.xgb.train(self.params, dtrain,
                                      num_boost_round=self.num_boost_round)

    def predict(self, task, states) -> list[float]:
        if self.booster is None:
            return (self.fallback or self._analytic_model(task)).predict(task, states)
        x = XGBoostCostModel._to_matrix(self._features_of(states), self.keys)
        return [float(v) for v in self.booster.predict(self.xgb.DMatrix(x))]
