"""XGBTuner: an XGBoost rank model over loop features, explored by parallel simulated
annealing (see model_based_tuner, xgboost_cost_model and sa_model_optimizer)."""

from __future__ import annotations

from .model_based_tuner import ModelBasedTuner
from .sa_model_optimizer import SimulatedAnnealingOptimizer
from .xgboost_cost_model import XGBoostCostModel

__all__ = ["XGBTuner"]


class XGBTuner(ModelBasedTuner):
    """``XGBTuner(task, plan_size=64, feature_type="itervar", loss_type="rank")``.

    ``optimizer`` is ``"sa"`` or a SimulatedAnnealingOptimizer (to set ``n_iter``,
    ``parallel_size``...); ``diversity_filter_ratio`` (e.g. 2) enables the diverse pick."""

    def __init__(self, task, plan_size: int = 64, feature_type: str = "itervar",
                 loss_type: str = "rank", num_threads: int | None = None,
                 optimizer="sa", diversity_filter_ratio: float | None = None,
                 log_interval: int = 50, seed: int | None = None):
        del log_interval
        model = XGBoostCostModel(task, feature_type=feature_type, loss_type=loss_type,
                                 num_threads=num_threads, seed=seed or 0)
        if optimizer == "sa":
            optimizer = SimulatedAnnealingOptimizer(task, seed=seed)
        elif isinstance(optimizer, str):
            raise ValueError(f"unknown optimizer {optimizer!r}; use 'sa' or an optimizer object")
        super().__init__(task, model, optimizer, plan_size=plan_size,
                         diversity_filter_ratio=diversity_filter_ratio, seed=seed)
