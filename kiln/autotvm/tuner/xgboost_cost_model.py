"""A gradient-boosted-trees cost model (XGBoost) over config features.

``fit(indices, flops)`` trains on measured configs; ``predict(indices)`` scores others
(higher = predicted faster). With ``loss_type="rank"`` the objective is pairwise ranking:
the model only has to order configs, which is what the search needs and is easier to learn
than run times across orders of magnitude. Features (``itervar`` or ``knob``) are computed
once per config and cached; they are dicts, lined up by name into a matrix.

Transfer learning (``fit_log``, TVM's design): a *base model* is trained on the records of
earlier tuning of the same template (other workloads too: see transfer.py), each
workload's throughputs normalized by its best and, for the rank objective, ranked within
its workload only. Until the task's own measurements are fitted it alone predicts; then
every ``fit`` starts its trees from the base model's margin, discounted by ``2 ** (-n /
64)`` for ``n`` own samples, and drops the base model once that falls below 0.05.
"""

from __future__ import annotations

import logging
import time

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
        self.base_model = None  # trained by fit_log on earlier records
        self.base_keys: list[str] = []
        self.base_discount = 1.0
        self.history_records = 0  # records the base model was trained on

    def features(self, index: int, task=None) -> dict[str, float]:
        """The features of config ``index`` of this task (or of ``task``, another workload
        of the template: history records); cached."""
        task = self.task if task is None else task
        key = index if task is self.task else (task.workload, index)
        f = self._cache.get(key)
        if f is None:
            t = time.perf_counter()
            if self.feature_type == "knob":
                f = get_knob_feature(task, index)
            else:
                try:
                    f = get_itervar_feature(task, task.config_space.get(index))
                except Exception:  # noqa: BLE001 - a config that does not lower
                    f = {"invalid": 1.0}
            self._cache[key] = f
            self.feature_seconds += time.perf_counter() - t
        return f

    @staticmethod
    def _to_matrix(feats, keys: list[str]) -> np.ndarray:
        col = {k: j for j, k in enumerate(keys)}
        x = np.zeros((len(feats), len(keys)), dtype=np.float32)
        for i, f in enumerate(feats):
            for k, v in f.items():
                j = col.get(k)
                if j is not None:
                    x[i, j] = v
        return x

    def _matrix(self, indices, keys: list[str] | None = None) -> np.ndarray:
        return self._to_matrix([self.features(int(i)) for i in indices],
                               self.keys if keys is None else keys)

    def _base_margin(self, indices) -> np.ndarray:
        d = self.xgb.DMatrix(self._matrix(indices, self.base_keys))
        return self.base_discount * self.base_model.predict(d, output_margin=True)

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
        if self.base_model is not None:
            self.base_discount = 2.0 ** (-len(indices) / 64.0)
            if self.base_discount < 0.05:  # enough own samples: the history is dropped
                self.base_model, self.base_discount = None, 0.0
            else:
                dtrain.set_base_margin(self._base_margin(indices))
        self.booster = self.xgb.train(self.params, dtrain, num_boost_round=self.num_boost_round)

    def fit_log(self, records, plan_size: int, min_seed_records: int = 500) -> bool:
        """Train the base model on earlier records (``(MeasureInput, MeasureResult)``
        pairs) of this task's template; False, with a logged message, when fewer than
        ``min_seed_records`` of them are usable (see transfer.py), as in TVM."""
        from .transfer import compatible_history

        del plan_size
        groups = [g for g in compatible_history(records, self.task)
                  if any(r.error_no == 0 for _, r in g.records)]  # a group needs a time
        n = sum(len(g.records) for g in groups)
        if n < max(2, min_seed_records):
            logger.info("history: %d usable records of template %s (min_seed_records=%d): "
                        "the cost model is not trained from history", n, self.task.name,
                        min_seed_records)
            return False
        feats, ys, sizes = [], [], []
        for g in groups:
            flops = np.array([g.task.flop / r.cost if r.error_no == 0 and r.cost > 0 else 0.0
                              for _, r in g.records])
            ys.append(flops / flops.max())  # normalized per workload
            feats += [self.features(idx, g.task) for idx, _ in g.records]
            sizes.append(len(g.records))
        keys: set[str] = set()
        for f in feats:
            keys.update(f)
        self.base_keys = sorted(keys)
        dtrain = self.xgb.DMatrix(self._to_matrix(feats, self.base_keys),
                                  label=np.concatenate(ys))
        if self.loss_type == "rank":
            dtrain.set_group(sizes)  # ranked within each workload
        self.base_model = self.xgb.train(self.params, dtrain,
                                         num_boost_round=self.num_boost_round)
        self.base_discount = 1.0
        self.history_records = n
        logger.info("history: cost model of %s trained on %d records of %d workloads",
                    self.task.name, n, len(groups))
        return True

    @property
    def trained(self) -> bool:
        return self.booster is not None or self.base_model is not None

    def predict(self, indices) -> np.ndarray:
        if self.booster is None:
            if self.base_model is None:
                return np.zeros(len(indices))
            return self._base_margin(indices)
        d = self.xgb.DMatrix(self._matrix(indices))
        if self.base_model is not None:
            d.set_base_margin(self._base_margin(indices))
        return self.booster.predict(d)
