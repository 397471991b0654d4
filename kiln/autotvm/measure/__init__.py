"""``autotvm.measure``: compile and time candidates in worker processes."""

from .local import LocalBuilder, LocalRunner, RPCRunner, request_remote
from .measure import (
    Builder,
    BuildResult,
    MeasureBatch,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    Runner,
    create_measure_batch,
    measure_option,
)

__all__ = ["LocalBuilder", "LocalRunner", "RPCRunner", "request_remote", "Builder",
           "BuildResult", "MeasureBatch", "MeasureErrorNo", "MeasureInput", "MeasureResult",
           "Runner", "create_measure_batch", "measure_option"]
