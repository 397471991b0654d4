"""``autotvm.measure``: compile and time candidates in worker processes (local.py), on
RPC servers (remote.py) or on a Dask cluster (dask.py)."""

from .dask import DaskBuilder, DaskRunner
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
           "DaskBuilder", "DaskRunner",
           "Builder",
           "BuildResult", "MeasureBatch", "MeasureErrorNo", "MeasureInput", "MeasureResult",
           "Runner", "create_measure_batch", "measure_option"]
