"""``autotvm.tuner``: search strategies over a task's config space."""

from . import callback
from .ga_tuner import GATuner
from .index_tuners import GridSearchTuner, RandomTuner
from .model_based_tuner import ModelBasedTuner
from .sa_model_optimizer import SimulatedAnnealingOptimizer
from .tuner import Tuner
from .xgboost_cost_model import XGBoostCostModel
from .xgboost_tuner import XGBTuner

__all__ = ["callback", "Tuner", "RandomTuner", "GridSearchTuner", "GATuner", "ModelBasedTuner",
           "SimulatedAnnealingOptimizer", "XGBoostCostModel", "XGBTuner"]
