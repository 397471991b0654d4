"""Workloads: functions that return a computation's tensors, keyed by name and arguments.

``@register_workload`` records a function ``f(*args) -> [tensors]`` (the inputs and the
outputs of a computation, as TVM's ``auto_scheduler.register_workload``); a *workload key*
is the JSON text ``["name", arg, ...]`` that tuning records store, so a record names the
computation it was measured on and :func:`workload_key_to_tensors` rebuilds it.

A computation no function builds (a fused group of a relay graph, found by
``extract_tasks``) is registered as its tensors under its DAG's key
(:func:`register_workload_tensors`, ``ComputeDAG.workload_key``); records name it by that
key, which a later process recognizes once the same graph is compiled again.
"""

from __future__ import annotations

import json
from collections.abc import Callable

__all__ = ["register_workload", "register_workload_tensors", "make_workload_key",
           "workload_key_to_tensors"]

#: workload name -> the function building its tensors
WORKLOAD_FUNC_REGISTRY: dict[str, Callable] = {}
#: workload key -> the tensors of a computation registered as it is
WORKLOAD_TENSOR_REGISTRY: dict[str, list] = {}


def register_workload(func_name: str | Callable, f: Callable | None = None,
                      override: bool = False):
    """Register ``f`` as a workload (usable as ``@register_workload`` or
    ``@register_workload("name")``); returns ``f``. Re-registering a name raises unless
    ``override``."""
    if callable(func_name):
        return register_workload(func_name.__name__, func_name, override)
    if f is None:
        return lambda g: register_workload(func_name, g, override)
    if func_name in WORKLOAD_FUNC_REGISTRY and not override \
            and WORKLOAD_FUNC_REGISTRY[func_name] is not f:
        raise RuntimeError(f"register_workload: {func_name!r} is already registered "
                           f"(pass override=True to replace it)")
    WORKLOAD_FUNC_REGISTRY[func_name] = f
    return f


def register_workload_tensors(workload_key: str, tensors) -> str:
    """Register the computation ``tensors`` (its inputs, then its outputs) under
    ``workload_key``; returns the key."""
    WORKLOAD_TENSOR_REGISTRY[workload_key] = list(tensors)
    return workload_key


def _plain(arg):
    """``arg`` as JSON-able data (tuples become lists, numpy scalars Python numbers)."""
    if isinstance(arg, (list, tuple)):
        return [_plain(a) for a in arg]
    if hasattr(arg, "item") and not isinstance(arg, (str, bytes)):
        return arg.item()
    if arg is None or isinstance(arg, (bool, int, float, str)):
        return arg
    raise ValueError(f"auto_scheduler workload arguments must be numbers, strings or tuples "
                     f"of them, got {arg!r}")


def make_workload_key(func: str | Callable, args) -> str:
    """The key of workload ``func`` called with ``args``: ``'["name", arg, ...]'``."""
    name = func if isinstance(func, str) else func.__name__
    if name not in WORKLOAD_FUNC_REGISTRY:
        raise ValueError(f"auto_scheduler workload {name!r} is not registered; decorate its "
                         f"function with @auto_scheduler.register_workload")
    return json.dumps([name, *_plain(list(args))])


def workload_key_to_tensors(workload_key: str) -> list:
    """The tensors of a registered workload, rebuilt from its key (those registered under
    the key as they are)."""
    if workload_key in WORKLOAD_TENSOR_REGISTRY:
        return list(WORKLOAD_TENSOR_REGISTRY[workload_key])
    name, *args = json.loads(workload_key)
    if name not in WORKLOAD_FUNC_REGISTRY:
        raise ValueError(f"auto_scheduler workload {name!r} (key {workload_key}) is not "
                         f"registered in this process")
    args = [tuple(a) if isinstance(a, list) else a for a in args]
    return list(WORKLOAD_FUNC_REGISTRY[name](*args))
