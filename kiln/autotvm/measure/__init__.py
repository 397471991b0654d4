"""``autotvm.measure``: compile and time candidates in worker processes (local.py) or on
RPC servers (remote.py)."""

from .local import LocalBuilder, LocalRunner
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
from .remote import RPCRunner, check_remote, request_remote

__all__ = ["LocalBuilder", "LocalRunner", "RPCRunner", "request_remote", "check_remote",
           "Builder",
           "BuildResult", "MeasureBatch", "MeasureErrorNo", "MeasureInput", "MeasureResult",
           "Runner", "create_measure_batch", "measure_option"]
