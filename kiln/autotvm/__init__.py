"""``kiln.autotvm``: schedule templates tuned by measurement (TVM's classic AutoTVM).

Write a template, make a task, tune it, then compile with the best config found::

    @autotvm.template("matmul")
    def matmul(N, L, M, dtype):
        A = te.placeholder((N, L), name="A", dtype=dtype)
        ...
        cfg = autotvm.get_config()
        cfg.define_split("tile_y", y, num_outputs=2)
        cfg["tile_y"].apply(s, C, y)
        return s, [A, B, C]

    task = autotvm.task.create("matmul", args=(512, 512, 512, "float32"), target="llvm")
    tuner = autotvm.tuner.XGBTuner(task)
    tuner.tune(n_trial=100, measure_option=autotvm.measure_option(
                   builder=autotvm.LocalBuilder(), runner=autotvm.LocalRunner(number=5)),
               callbacks=[autotvm.callback.log_to_file("matmul.log")])
    with autotvm.apply_history_best("matmul.log"):
        s, args = matmul(512, 512, 512, "float32")

See docs/autotvm.md for what is and is not implemented.
"""

from . import feature, fused_loop, measure, record, task, tuner
from .graph_tuning import tune_graph, tune_tasks
from .measure import (
    DaskBuilder,
    DaskRunner,
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    RPCRunner,
    measure_option,
)
from .task import (
    ApplyConfig,
    ApplyHistoryBest,
    DispatchContext,
    FallbackContext,
    get_config,
    template,
)
from .task.dispatcher import apply_history_best
from .tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner, callback

__all__ = ["feature", "fused_loop", "measure", "record", "task", "tuner", "callback",
           "LocalBuilder", "LocalRunner", "RPCRunner", "DaskBuilder", "DaskRunner",
           "MeasureErrorNo", "MeasureInput", "MeasureResult",
           "measure_option", "ApplyConfig", "ApplyHistoryBest", "DispatchContext",
           "FallbackContext", "get_config", "template", "apply_history_best", "GATuner",
           "GridSearchTuner", "RandomTuner", "XGBTuner",
           "tune_graph", "tune_tasks"]  # whole-model tuning (graph_tuning.py)
