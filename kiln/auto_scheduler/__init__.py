"""``kiln.auto_scheduler`` (``tvm.auto_scheduler``): template-free auto-scheduling (Ansor).

The search space comes from the computation itself: sketch rules over the compute DAG
(``sketch``), random annotation (``annotation``), evolutionary search guided by a cost
model (``search_policy``, ``cost_model``), measured with AutoTVM's builders and runners
(``measure``) and logged as replayable transform steps (``loop_state``,
``measure_record``). A network's fused groups become tasks (``relay_integration``) that
share one trial budget (``task_scheduler``); ``relay.build`` uses their best records
(``dispatcher``). docs/auto_scheduler.md describes what is implemented.
"""

from .compute_dag import ComputeDAG
from .cost_model import AnalyticCostModel, CostModel, RandomModel, XGBModel
from .dispatcher import ApplyHistoryBest, DispatchContext, schedule_from_history
from .hardware_params import HardwareParams
from .layout_rewrite import LayoutRewriteOption
from .loop_state import State
from .measure import (
    LocalBuilder,
    LocalRPCMeasureContext,
    LocalRunner,
    MeasureCallback,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    RecordToFile,
    RPCRunner,
)
from .measure_record import RecordReader, load_best_record, load_records, save_records
from .relay_integration import extract_tasks
from .search_policy import PreloadMeasuredStates, SearchCallback, SearchPolicy, SketchPolicy
from .search_task import SearchTask, TuningOptions, auto_schedule
from .task_scheduler import PrintTableInfo, TaskScheduler, TaskSchedulerCallback
from .workload_registry import make_workload_key, register_workload, register_workload_tensors

__all__ = ["ComputeDAG", "State", "SearchTask", "TuningOptions", "auto_schedule",
           "register_workload", "make_workload_key", "SearchPolicy", "SketchPolicy",
           "CostModel", "AnalyticCostModel", "XGBModel", "RandomModel", "LocalBuilder",
           "LocalRunner", "RPCRunner", "LocalRPCMeasureContext",
           "MeasureInput", "MeasureResult", "MeasureErrorNo", "MeasureCallback",
           "RecordToFile", "RecordReader", "load_records", "save_records", "load_best_record",
           "ApplyHistoryBest", "DispatchContext", "schedule_from_history", "extract_tasks",
           "TaskScheduler", "TaskSchedulerCallback", "PrintTableInfo", "SearchCallback",
           "PreloadMeasuredStates", "register_workload_tensors", "HardwareParams",
           "LayoutRewriteOption"]
