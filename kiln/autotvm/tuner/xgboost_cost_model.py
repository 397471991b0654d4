"""A gradient-boosted-trees cost model (XGBoost) over config features.

``fit(indices, flops)`` trains on measured configs; ``predict(indices)`` scores others
(higher = predicted faster). With ``loss_type="rank"`` the objective is pairwise ranking:
the model only has to order configs, which is what the search needs and is easier to learn
than run times across orders of magnitude. Features (``itervar`` or ``knob``) are computed
once per config and cached; they are dicts, lined up by name into a matrix.
"""

from __future__ import annotations

import logging

import numpy as np

from ..feature import get_itervar_feature, get_knob_feature

logger = logging.getLogger("autotvm")

__all__ = ["XGBoostCostModel"]

_FEATURES = ("itervar", "knob")


def _import_xgboost():
    try:
        import xgboost
    except ImportError:
        raise ImportError("XGBTuner needs the xgboost package (pip install 'kiln[tune]')") \
            from None
    return xgboost


class XGBoostCostModel:
    def __init__(self, task, feature_type: str = "itervar", loss_type: str = "rank",
                 num_threads: int | None = None, num_boost_round: int = 64, seed: int = 0):
        if feature_type not in _FEATURES:
            raise ValueError(f"feature_type must be one of {', '.join(_FEATURES)}"
                             + (" ('curve' features are not implemented)"
                                if feature_type == "curve" else ""))
        if loss_type not in ("rank", "reg"):
            raise ValueError("loss_type must be 'rank' or 'reg'")
        self.xgb = _import_xgboost()
        self.task = task
        self.feature_type, self.loss_type = feature_type, loss_type
        self.num_boost_round = num_boost_round
        self.params = {
            "max_depth": 3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0,
            "eta": 0.3, "lambda": 1.0, "alpha": 0.0, "seed": seed, "verbosity": 0,
            "objective": "rank:pairwise" if loss_type == "rank" else "reg:squarederror",
        }
        if num_threads:
            self.params["nthread"] = int(num_threads)
        self.booster = None
        self.keys: list[str] = []
        self._cache: dict[int, dict[str, float]] = {}
        self.feature_seconds = 0.0

    def features(self, index: int) -> dict[str, float]:
        f = self._cache.get(index)
        if f is None:
            import time

            t = time.perf_counter()
            if self.feature_type == "knob":
                f = get_knob_feature(self.task, index)
            else:
                try:
                    f = get_itervar_feature(self.task, self.task.config_space.get(index))
                except Exception:  # noqa: BLE001 - a config that does not lower
                    f = {"invalid": 1.0}
            self._cache[index] = f
            self.feature_seconds += time.perf_counter() - t
        return f

    def _matrix(self, indices) -> np.ndarray:
        col = {k: j for j, k in enumerate(self.keys)}
        x = np.zeros((len(indices), len(self.keys)), dtype=np.float32)
        for i, idx in enumerate(indices):
            for k, v in self.features(int(idx)).items():
                j = col.get(k)
                if j is not None:
                    x[i, j] = v
        return x

    def fit(self, indices, flops) -> None:
        """Train on measured configs (``flops`` 0 for failed ones)."""
        indices = [int(i) for i in indices]
        y = np.asarray(flops, dtype=np.float64)
        if len(indices) < 2 or y.max() <= 0:
            return
        keys: set[str] = set()
        for i in indices:
            keys.update(self.features(i))
        self.keys = sorted(keys)
        x = self._matrix(indices)
        y = y / y.max()
        dtrain = self.xgb.DMatrix(x, label=y)
        if self.loss_type == "rank":
            dtrain.set_group([len(indices)])
        self.booster = self.xgb.train(self.params, dtrain, num_boost_round=self.num_boost_round)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def predict(self, indices) -> np.ndarray:
        if self.booster is None:
            return np.zeros(len(indices))
        return self.booster.predict(self.xgb.DMatrix(self._matrix(indices)))
