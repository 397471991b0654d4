"""``autotvm.task``: templates, tasks, config spaces and dispatch contexts."""

from . import dispatcher, relay_integration, space
from .dispatcher import ApplyConfig, ApplyHistoryBest, DispatchContext, FallbackContext
from .relay_integration import extract_from_program
from .space import ConfigEntity, ConfigSpace, FallbackConfigEntity
from .task import (
    TASK_TABLE,
    Task,
    args_to_workload,
    compute_flop,
    create,
    get_config,
    template,
)

__all__ = ["space", "dispatcher", "relay_integration", "ApplyConfig", "ApplyHistoryBest",
           "DispatchContext",
           "FallbackContext", "ConfigEntity", "ConfigSpace", "FallbackConfigEntity",
           "TASK_TABLE", "Task", "args_to_workload", "compute_flop", "create",
           "extract_from_program", "get_config", "template"]
