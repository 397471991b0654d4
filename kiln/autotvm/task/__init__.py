"""``autotvm.task``: templates, tasks, config spaces and dispatch contexts."""

from . import dispatcher, space
from .dispatcher import ApplyConfig, ApplyHistoryBest, DispatchContext, FallbackContext
from .space import ConfigEntity, ConfigSpace, FallbackConfigEntity
from .task import (
    TASK_TABLE,
    Task,
    args_to_workload,
    compute_flop,
    create,
    extract_from_program,
    get_config,
    template,
)

__all__ = ["space", "dispatcher", "ApplyConfig", "ApplyHistoryBest", "DispatchContext",
           "FallbackContext", "ConfigEntity", "ConfigSpace", "FallbackConfigEntity",
           "TASK_TABLE", "Task", "args_to_workload", "compute_flop", "create",
           "extract_from_program", "get_config", "template"]
