"""``kiln.auto_scheduler`` (``tvm.auto_scheduler``): template-free auto-scheduling (Ansor).

The search space comes from the computation itself: sketch rules over the compute DAG
(``sketch``), random annotation (``annotation``), evolutionary search guided by a cost
model (``search_policy``, ``cost_model``), measured with AutoTVM's builders and runners
(``measure``) and logged as replayable transform steps (``loop_state``,
``measure_record``). docs/auto_scheduler.md describes what is implemented.
"""

from .compute_dag import ComputeDAG
from .cost_model import AnalyticCostModel, CostModel, RandomModel, XGBModel
from .dispatcher import ApplyHistoryBest, DispatchContext
from .loop_state import State
from .measure import (
    LocalBuilder,
    LocalRunner,
    MeasureCallback,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    RecordToFile,
)
from .measure_record import RecordReader, load_best_record, load_records, save_records
from .search_policy import SearchPolicy, SketchPolicy
from .search_task import SearchTask, TuningOptions, auto_schedule
from .workload_registry import make_workload_key, register_workload

__all__ = ["ComputeDAG", "State", "SearchTask", "TuningOptions", "auto_schedule",
           "register_workload", "make_workload_key", "SearchPolicy", "SketchPolicy",
           "CostModel", "AnalyticCostModel", "XGBModel", "RandomModel", "LocalBuilder",
           "LocalRunner",
           "MeasureInput", "MeasureResult", "MeasureErrorNo", "MeasureCallback",
           "RecordToFile", "RecordReader", "load_records", "save_records", "load_best_record",
           "ApplyHistoryBest", "DispatchContext"]
