"""``SearchTask``: a computation to auto-schedule on a target, and its tuning.

``task = SearchTask(func=matmul, args=(512, 512, 512), target="llvm")`` (or
``SearchTask(workload_key=key, target=...)``) builds the task's :class:`ComputeDAG` from a
registered workload; ``task.tune(TuningOptions(num_measure_trials=64,
measure_callbacks=[RecordToFile(log)]))`` runs a :class:`SketchPolicy` and measures its
candidates with the options' builder and runner; ``task.apply_best(log)`` returns the best
logged schedule as ``(schedule, tensors)``. ``auto_schedule(task, ...)`` is TVM's older
single-call form.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.autotvm.measure.cuda import is_cuda_target

from .compute_dag import ComputeDAG
from .layout_rewrite import LayoutRewriteOption
from .loop_state import State
from .measure import ProgramMeasurer
from .measure_record import load_best_record
from .search_policy import SketchPolicy
from .sketch_gpu import reference_state
from .workload_registry import make_workload_key, workload_key_to_tensors

__all__ = ["SearchTask", "TuningOptions", "auto_schedule"]


@dataclass
class TuningOptions:
    """How to tune: the trial budget, the measurement and what to do with each result."""

    num_measure_trials: int = 0
    early_stopping: int | None = None
    num_measures_per_round: int = 64
    verbose: int = 1
    builder: object = "local"
    runner: object = "local"
    measure_callbacks: list = field(default_factory=list)


class SearchTask:
    """A workload (a registered function and its arguments) on a target."""

    def __init__(self, func=None, args=None, compute_dag: ComputeDAG | None = None,
                 workload_key: str | None = None, target="llvm", target_host=None,
                 hardware_params=None, layout_rewrite_option=None, task_inputs=None,
                 desc: str = "") -> None:
        if workload_key is None:
            if func is None:
                raise ValueError("SearchTask needs func= and args= or workload_key=")
            workload_key = make_workload_key(func, args or ())
        self.workload_key = workload_key
        self.compute_dag = compute_dag or ComputeDAG(workload_key_to_tensors(workload_key))
        self.target = str(target)
        self.target_host = target_host
        self.hardware_params = hardware_params
        self.desc = desc
        self.name = desc or workload_key
        self.layout_rewrite_option = LayoutRewriteOption(
            LayoutRewriteOption.get_target_default(self.target)
            if layout_rewrite_option is None else layout_rewrite_option)

    def instantiate(self, config=None):
        """``(schedule, tensors)`` of a :class:`State`; anything else (as the measurement's
        reference request) gives the unscheduled computation, or on a GPU target its
        simplest GPU schedule (:func:`.sketch_gpu.reference_state`). With a layout
        rewrite option, a state's layout-free weights are re-laid out by a stage of the
        kernel (``INSERT_TRANSFORM_STAGE`` for both options), so that every candidate
        takes the same arguments as the reference it is checked against."""
        if isinstance(config, State):
            measured = (LayoutRewriteOption.NO_REWRITE
                        if self.layout_rewrite_option == LayoutRewriteOption.NO_REWRITE
                        else LayoutRewriteOption.INSERT_TRANSFORM_STAGE)
            return self.compute_dag.apply_steps_from_state(config, measured)
        if is_cuda_target(self.target):
            state = reference_state(self.compute_dag)
        else:
            state = self.compute_dag.init_state()
        return self.compute_dag.apply_steps_from_state(state)

    def tune(self, tuning_options: TuningOptions, search_policy: SketchPolicy | None = None
             ) -> SketchPolicy:
        """Measure ``num_measure_trials`` states chosen by ``search_policy`` (a
        :class:`SketchPolicy` by default); returns the policy (its ``best_state``)."""
        policy = search_policy or SketchPolicy(self, verbose=tuning_options.verbose)
        measurer = ProgramMeasurer(tuning_options.builder, tuning_options.runner,
                                   tuning_options.measure_callbacks)
        try:
            policy.search(tuning_options.num_measure_trials,
                          tuning_options.num_measures_per_round, measurer,
                          tuning_options.early_stopping)
        finally:
            measurer.close()
        return policy

    def apply_best(self, log_file: str, include_compatible: bool = False,
                   layout_rewrite_option=None):
        """``(schedule, tensors)`` of the fastest record of this task in ``log_file``,
        its layout-free weights rewritten as ``layout_rewrite_option`` (default: the
        task's) says; with ``REWRITE_FOR_PRE_TRANSFORMED`` a weight's argument is the
        weight in its new layout, ``compute_dag.layout_rewrites(state)[i].transform(w)``."""
        record = load_best_record(log_file, self.workload_key, self.target)
        if record is None:
            raise RuntimeError(f"apply_best: {log_file} has no valid record of "
                               f"{self.workload_key} on {self.target}")
        option = (self.layout_rewrite_option if layout_rewrite_option is None
                  else LayoutRewriteOption(layout_rewrite_option))
        return self.compute_dag.apply_steps_from_state(record[0].state, option)

    def print_best(self, log_file: str, print_mode: str = "schedule") -> str:
        """The steps of the best record (printed and returned)."""
        record = load_best_record(log_file, self.workload_key, self.target)
        text = "(no record)" if record is None else str(record[0].state)
        print(text)
        return text

    def __repr__(self) -> str:
        return f"SearchTask({self.workload_key}, target={self.target})"


def auto_schedule(task: SearchTask, search_policy: SketchPolicy | None = None,
                  tuning_options: TuningOptions | None = None):
    """TVM's older entry point: tune ``task`` and return the best ``(schedule, tensors)``
    (the unscheduled computation when nothing succeeded)."""
    policy = task.tune(tuning_options or TuningOptions(), search_policy)
    return task.compute_dag.apply_steps_from_state(policy.best_state
                                                   or task.compute_dag.init_state())
