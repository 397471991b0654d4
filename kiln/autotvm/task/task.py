"""Templates and tasks.

``@autotvm.template("name")`` registers a schedule template: a function of plain arguments
(ints, strings, shapes, ``te`` placeholders) that asks ``autotvm.get_config()`` for its
config, defines knobs on it, and returns ``(schedule, args)``. Calling the template asks the
current dispatch context for the config of its workload ``(name, *args)``.

``autotvm.task.create(name, args, target)`` runs the template once on a
:class:`ConfigSpace` to collect its knobs and returns a :class:`Task`: the unit a tuner
explores (``task.config_space``) and a log records (``task.workload``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable

from kiln.ir.expr import BinaryOp, Call, CmpOp, IntImm, PrimExpr, ProducerLoad, Reduce, Select
from kiln.target import Target
from kiln.te.tensor import ComputeOp, Tensor

from .dispatcher import ApplyConfig, DispatchContext
from .space import ConfigSpace

__all__ = ["template", "get_config", "create", "Task", "TASK_TABLE", "args_to_workload",
           "compute_flop"]

TASK_TABLE: dict[str, Callable] = {}
_local = threading.local()


def _config_stack() -> list:
    st = getattr(_local, "configs", None)
    if st is None:
        st = _local.configs = []
    return st


def _current_target():
    current = getattr(Target, "current", None)
    try:
        return current() if callable(current) else None
    except Exception:  # noqa: BLE001 - no target context is the common case
        return None


def args_to_workload(args) -> tuple:
    """A hashable, JSON-friendly form of template arguments: tensors become
    ``("TENSOR", shape, dtype)``, lists become tuples."""
    def conv(a):
        if isinstance(a, Tensor):
            return ("TENSOR", tuple(int(s.value) if isinstance(s, IntImm) else int(s)
                                    for s in a.shape), a.dtype)
        if isinstance(a, list | tuple):
            return tuple(conv(x) for x in a)
        if isinstance(a, IntImm):
            return int(a.value)
        if a is None or isinstance(a, bool | int | float | str):
            return a
        raise TypeError(f"template argument {a!r} ({type(a).__name__}) cannot be part of a "
                        "workload; use ints, floats, strings, tuples or te tensors")
    return tuple(conv(a) for a in args)


def _workload_to_args(workload) -> tuple:
    """Template arguments back from a workload: ``("TENSOR", shape, dtype)`` becomes a
    placeholder."""
    from kiln import te

    def conv(a):
        if isinstance(a, tuple) and len(a) == 3 and a[0] == "TENSOR":
            return te.placeholder(a[1], dtype=a[2])
        if isinstance(a, tuple):
            return tuple(conv(x) for x in a)
        return a
    return tuple(conv(a) for a in workload)


def template(task_name, func: Callable | None = None):
    """Register a schedule template: ``@autotvm.template("matmul")`` on ``def f(N, M)``.
    Calling ``f(...)`` then runs it with the config the current dispatch context gives
    for ``("matmul", N, M)``; ``autotvm.task.create("matmul", (N, M), target)`` makes a
    tuning task of it. ``@autotvm.template`` without a name uses the function's name."""
    if callable(task_name) and func is None:
        return template(task_name.__name__, task_name)
    if func is None:
        return lambda f: template(task_name, f)
    if not isinstance(task_name, str) or not task_name:
        raise TypeError("autotvm.template needs a task name string: @autotvm.template(\"name\")")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if kwargs:
            raise TypeError(f"template {task_name!r}: pass arguments by position (they form "
                            "the workload that tuning records are keyed by)")
        workload = (task_name, *args_to_workload(args))
        cfg = DispatchContext.current().query(_current_target(), workload)
        stack = _config_stack()
        stack.append(cfg)
        try:
            return func(*args)
        finally:
            stack.pop()

    wrapper.task_name = task_name
    wrapper.fcompute = func
    TASK_TABLE[task_name] = wrapper
    return wrapper


def get_config():
    """The config of the template being called (a ConfigSpace while a task is created,
    a ConfigEntity while a candidate is instantiated, a FallbackConfigEntity otherwise)."""
    stack = _config_stack()
    if not stack:
        raise RuntimeError("autotvm.get_config() must be called inside a function decorated "
                           "with @autotvm.template(\"name\")")
    return stack[-1]


class Task:
    """A template applied to fixed arguments on a target.

    ``config_space`` (the knobs, ``len()`` = number of configs), ``flop`` (operations per
    run, for GFLOP/s), ``workload`` (``(name, *args)``, the key of tuning records) and
    ``instantiate(config)`` -> ``(schedule, args)``."""

    def __init__(self, name: str, args, target=None):
        self.name = name
        self.args = tuple(args)
        self.workload = (name, *args_to_workload(self.args))
        self.func = TASK_TABLE.get(name)
        self.target = Target(target) if target is not None else None
        self.config_space: ConfigSpace | None = None
        self.flop = 0.0

    def instantiate(self, config=None):
        """``(schedule, args)`` of the template under ``config``; without one, under the
        current dispatch context (the best tuned config inside ``apply_history_best``). A
        task of a GPU target runs the template under that target when no target is current
        (its thread and shared-memory limits; its records are the ``cuda`` family's)."""
        if self.func is None:
            raise RuntimeError(f"no template named {self.name!r} is registered in this process "
                               "(import the module that defines it)")
        args = _workload_to_args(self.args)
        with contextlib.ExitStack() as scope:
            if self.target is not None and not self.target.is_cpu and Target.current() is None:
                scope.enter_context(self.target)  # a GPU template's limits and record family
            if config is not None:
                scope.enter_context(ApplyConfig(config))
            return self.func(*args)

    def __repr__(self) -> str:
        size = len(self.config_space) if self.config_space is not None else "?"
        return f"Task(func_name={self.name}, args={self.args}, space={size})"

    def __getstate__(self) -> dict:
        """Pickled (for a Dask worker) with its arguments in workload form, as in TVM: IR
        nodes do not pickle; :meth:`instantiate` makes placeholders of them again."""
        return {**self.__dict__, "args": args_to_workload(self.args)}


def create(task_name, args, target="llvm", target_host=None) -> Task:
    """The tuning task of template ``task_name`` (or the template function itself) on
    ``args``: runs the template once to collect its config space and flop count."""
    del target_host
    if callable(task_name):
        task_name = getattr(task_name, "task_name", task_name.__name__)
    if task_name not in TASK_TABLE:
        raise ValueError(f"no template named {task_name!r} (registered: "
                         f"{', '.join(sorted(TASK_TABLE)) or 'none'}); decorate it with "
                         f"@autotvm.template({task_name!r})")
    task = Task(task_name, args, target)
    space = ConfigSpace()
    with ApplyConfig(space):
        sch, _ = TASK_TABLE[task_name](*task.args)
    task.config_space = space
    task.flop = space.flop or compute_flop(sch)
    return task


def compute_flop(sch) -> float:
    """Arithmetic operations of the computations in a schedule: for each compute stage, the
    operations of its body times its loop extents (0 when an extent is not constant)."""
    total = 0.0
    for st in sch.stages:
        op = st.op  # after cache_write, the stage that computes the reduction
        if not isinstance(op, ComputeOp):
            continue
        extents = [iv.dom.extent for iv in list(op.axis) + list(op.reduce_axis)]
        if not all(isinstance(e, IntImm) for e in extents):
            return 0.0
        ops = sum(_count_ops(b) for b in op.body)
        total += ops * math.prod(int(e.value) for e in extents)
    return total


def _count_ops(expr) -> int:
    """Arithmetic operations on values in ``expr`` (index arithmetic inside tensor reads and
    comparisons are not counted; a reduction counts its combine step)."""
    if isinstance(expr, ProducerLoad) or not isinstance(expr, PrimExpr):
        return 0
    n = 0
    if isinstance(expr, BinaryOp) and not isinstance(expr, CmpOp) or isinstance(expr, Call):
        n = 1
    if isinstance(expr, Reduce):
        return len(expr.source) + sum(_count_ops(x) for x in expr.source)
    if isinstance(expr, Select):  # a choice (e.g. padding), not arithmetic
        return _count_ops(expr.true_value) + _count_ops(expr.false_value)
    if isinstance(expr, Call) and expr.op.endswith("if_then_else"):
        return sum(_count_ops(x) for x in expr.args[1:])
    for f in expr._fields:
        v = getattr(expr, f)
        for x in (v if isinstance(v, tuple | list) else (v,)):
            n += _count_ops(x)
    return n
