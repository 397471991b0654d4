"""auto_scheduler and the graph compiler: the tasks of a ``kiln.relay`` model.

:func:`extract_tasks` runs the front half of ``relay.build``
(``relay.build_module.optimize_and_fuse``: graph passes, layout, fusion) under the
``PassContext`` that the tuned build uses, and makes one :class:`SearchTask` per distinct
fused group: its compute is the op strategy's (``relay.strategy.group_compute``: the
group's operators on placeholders ``p0, p1 ...`` of its external inputs), its workload key
the DAG's own (``ComputeDAG.workload_key``), registered with its tensors so that the task
can be measured. The weight of a task is the number of the graph's kernels that share it.

``relay.build`` under ``PassContext(opt_level=3, config={"relay.backend.use_auto_scheduler":
True})`` and inside ``ApplyHistoryBest(log)`` computes the same DAG for each group and
looks its key up in the log (:func:`.dispatcher.schedule_from_history`, the op strategy's
first rung).

kiln.relay is imported inside the functions: ``import kiln.auto_scheduler`` does not pay
for the graph compiler.
"""

from __future__ import annotations

from kiln.ir.transform import PassContext
from kiln.target import Target

from .compute_dag import ComputeDAG
from .layout_rewrite import LayoutRewriteOption
from .search_task import SearchTask
from .workload_registry import register_workload_tensors

__all__ = ["extract_tasks", "USE_AUTO_SCHEDULER"]

#: the ``PassContext`` config key under which ``relay.build`` uses auto-scheduled records
USE_AUTO_SCHEDULER = "relay.backend.use_auto_scheduler"


def _group_dags(mod, params, target: Target, include_simple_tasks: bool
                ) -> list[tuple[ComputeDAG, str]]:
    """``(dag, description)`` of each kernel ``relay.build`` compiles ``mod`` into, in run
    order; without ``include_simple_tasks`` only those with a reduction (a convolution,
    a dense layer, a pooling ...)."""
    from kiln.relay.build_module import optimize_and_fuse
    from kiln.relay.graph import Graph, Module
    from kiln.relay.strategy import group_compute

    if not isinstance(mod, Module | Graph):
        raise TypeError(f"extract_tasks needs a kiln.relay module (from "
                        f"relay.frontend.from_onnx), got {type(mod).__name__}")
    _, groups = optimize_and_fuse(mod, params, target)
    out = []
    for group in groups:
        dag = ComputeDAG(group_compute(group)[1])
        if include_simple_tasks or any(op.reduce_axis for op in dag.compute_ops):
            out.append((dag, group.describe()))
    return out


def extract_tasks(mod, params, target, target_host=None, hardware_params=None,
                  include_simple_tasks: bool = False, dump_workload_to_dag_log=None,
                  opt_level: int = 3, other_targets=None
                  ) -> tuple[list[SearchTask], list[int]]:
    """The search tasks of a kiln.relay model and their weights (how many kernels of the
    graph compute each), in graph order. ``include_simple_tasks`` adds the kernels without a
    reduction (layout transforms, elementwise chains)."""
    del target_host, other_targets
    if dump_workload_to_dag_log is not None:
        raise NotImplementedError("extract_tasks(dump_workload_to_dag_log=...): kiln keeps "
                                  "the DAG of each task in SearchTask.compute_dag")
    tgt = Target(target or "llvm")
    with PassContext(opt_level=opt_level, config={USE_AUTO_SCHEDULER: True}):
        dags = _group_dags(mod, params, tgt, include_simple_tasks)
    tasks: dict[str, SearchTask] = {}
    weights: dict[str, int] = {}
    for dag, desc in dags:
        key = dag.workload_key()
        if key not in tasks:
            register_workload_tensors(key, dag.tensors)
            tasks[key] = SearchTask(
                workload_key=key, compute_dag=dag, target=str(tgt),
                hardware_params=hardware_params, desc=desc,
                layout_rewrite_option=LayoutRewriteOption.get_target_default(tgt, True))
        weights[key] = weights.get(key, 0) + 1
    return list(tasks.values()), [weights[k] for k in tasks]
