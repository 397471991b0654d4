"""Cost models that rank candidate states before any is measured.

``predict(task, states) -> scores`` (higher is better, as TVM's ``CostModel.predict``):

* :class:`AnalyticCostModel` (the default) lowers each state and prices it with
  ``kiln.cost.estimate`` on this machine's model: the score is ``1 / predicted seconds``.
  It learns nothing from measurements (``update`` keeps no state).
* :class:`XGBModel` (the default of ``SketchPolicy``, TVM's ``XGBModel``) learns from
  the measurements: XGBoost with the pairwise rank objective on AutoTVM's loop-nest
  features (``kiln.autotvm.feature``) of each lowered state, trained on measured
  throughput normalized to the best (failures 0), refit after every batch. Until
  ``min_train`` states have been measured successfully (or without xgboost) it predicts
  with the analytic model.
* :class:`RandomModel` scores at random (TVM's ``RandomModel``), for tests and as a
  baseline.

A state that fails to lower scores ``-inf`` and is never measured.
"""

from __future__ import annotations

import math
import random

from kiln.autotvm.feature import get_itervar_feature
from kiln.autotvm.tuner.xgboost_cost_model import XGBoostCostModel
from kiln.cost import estimate
from kiln.driver import lower

__all__ = ["CostModel", "AnalyticCostModel", "XGBModel", "RandomModel"]


class CostModel:
    """Ranks states of a task (base class)."""

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
        for s in states:
            if s.key() not in self._cache:
                self._cache[s.key()] = self._score(task, s)
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
    """A rank model on loop-nest features, trained on this search's measurements."""

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
        self.fallback = fallback or AnalyticCostModel()
        self.booster = None
        self.keys: list[str] = []
        self._features: dict[str, dict[str, float]] = {}
        self._samples: dict[str, float] = {}  # state key -> measured throughput (0: failed)

    def _feature(self, task, state) -> dict[str, float] | None:
        key = state.key()
        if key not in self._features:
            try:
                self._features[key] = get_itervar_feature(task, state)
            except Exception:  # noqa: BLE001 - an unschedulable state has no features
                self._features[key] = None
        return self._features[key]

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results, strict=True):
            self._feature(inp.task, inp.state)
            self._samples[inp.state.key()] = 0.0 if math.isinf(res.cost) else 1.0 / res.cost
        good = [k for k, y in self._samples.items() if y > 0 and self._features.get(k)]
        if self.xgb is None or len(good) < self.min_train:
            return
        keys = sorted({k for s in self._samples if self._features.get(s)
                       for k in self._features[s]})
        rows = [s for s in self._samples if self._features.get(s)]
        y = [self._samples[s] for s in rows]
        x = XGBoostCostModel._to_matrix([self._features[s] for s in rows], keys)
        dtrain = self.xgb.DMatrix(x, label=[v / max(y) for v in y])
        dtrain.set_group([len(rows)])
        self.keys = keys
        self.booster = self.xgb.train(self.params, dtrain,
                                      num_boost_round=self.num_boost_round)

    def predict(self, task, states) -> list[float]:
        if self.booster is None:
            return self.fallback.predict(task, states)
        feats = [self._feature(task, s) for s in states]
        x = XGBoostCostModel._to_matrix([f or {} for f in feats], self.keys)
        scores = self.booster.predict(self.xgb.DMatrix(x))
        return [float(v) if f is not None else -math.inf
                for v, f in zip(scores, feats, strict=True)]
