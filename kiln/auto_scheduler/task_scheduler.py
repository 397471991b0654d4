"""``TaskScheduler``: one trial budget shared by the tasks of a network (Ansor's scheduler).

``TaskScheduler(tasks, task_weights).tune(TuningOptions(num_measure_trials=N, ...))`` tunes
the tasks of ``extract_tasks`` (each with its own :class:`SketchPolicy`) in rounds of
``num_measures_per_round`` trials, one task per round, until ``N`` trials are measured.
The objective is the network's estimated latency, ``sum(weight_i * best_cost_i)`` (the
weight: how often the graph runs the task's kernel). After one warm-up round of every
task, each round goes to the task whose next round is expected to lower the objective most
(``strategy="gradient"``, as Ansor's; ``"round-robin"`` takes them in turn):

    gradient_i = dF/dc_i * (alpha * backward_i + (1 - alpha) * forward_i)

where ``dF/dc_i`` is the objective's sensitivity to task ``i``'s best cost (its weight for
the weighted sum), ``backward_i`` the change of that best cost over the last
``backward_window_size`` rounds of the task, per round, and ``forward_i`` the change one
more round is expected to bring: ``-c_i / rounds_i`` if the best cost kept falling as
``1 / rounds``, or more where the task lags similar ones (Ansor's ``beta`` term). Tasks
of similar DAGs (:func:`derive_similarity_tag`: the same computation up to its shapes and
constants, as the conv2d layers of a network) form a group, and a task is expected to
reach ``beta`` times the time it would take at its group's best throughput:

    forward_i = min(c_i - c_i / rounds_i, beta * flops_i / max_group(flops_j / c_j)) - c_i

The most negative gradient wins; a share ``eps_random`` of rounds goes to a task drawn at
random, and a task that no longer finds new states (or brings no improvement in
``per_task_early_stopping`` trials) is not tuned again.

``load_log_file=log`` resumes: each task's records in the log count as measured (its
policy preloads them, :class:`PreloadMeasuredStates`), its best cost and rounds are
restored, and only new trials count against ``num_measure_trials``.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Sequence

from kiln.ir.printer import to_text

from .cost_model import RandomModel, XGBModel
from .measure import MeasureErrorNo, ProgramMeasurer
from .measure_record import load_records, same_target
from .search_policy import PreloadMeasuredStates, SketchPolicy
from .search_task import SearchTask, TuningOptions

__all__ = ["TaskScheduler", "TaskSchedulerCallback", "PrintTableInfo", "task_gradient",
           "derive_similarity_tag"]

#: a number in printed IR (blanked by :func:`derive_similarity_tag`)
_NUMBER = re.compile(r"\b\d+(\.\d*)?([eE][-+]?\d+)?f?\b")

#: the best cost of a task with no successful measurement yet (finite, as Ansor's, so the
#: gradients stay numbers)
NO_COST = 1e10


def task_gradient(cost: float, history: Sequence[float], rounds: int, weight: float,
                  alpha: float, backward_window_size: int,
                  group_bound: float = math.inf) -> float:
    """The expected change of the objective per round given to a task (negative: a gain):
    its best ``cost``, the best cost after each of its ``rounds`` (``history``),
    ``weight = dF/dcost``, and ``group_bound`` the cost it would have at the best
    throughput of its group times ``beta`` (module docstring; inf: no similar task)."""
    if len(history) > backward_window_size:
        backward = (history[-1] - history[-1 - backward_window_size]) / backward_window_size
    else:
        backward = 0.0
    forward = min(cost - cost / max(rounds, 1), group_bound) - cost
    return weight * (alpha * backward + (1 - alpha) * forward)


def derive_similarity_tag(dag) -> str:
    """A text two DAGs share when they compute the same thing up to shapes and constants
    (each compute stage's tag or name, its loop counts and its expression with every
    number blanked): tasks with one tag are a group of similar tasks."""
    stages = []
    for op in dag.compute_ops:
        body = _NUMBER.sub("#", to_text(op.body[0]))
        stages.append(f"{op.tag or op.name}({len(op.axis)},{len(op.reduce_axis)}):{body}")
    return "; ".join(stages)


class TaskSchedulerCallback:
    """Called around each round of a task (base class)."""

    def pre_tune(self, scheduler: TaskScheduler, task_id: int) -> None:
        pass

    def post_tune(self, scheduler: TaskScheduler, task_id: int) -> None:
        pass


class PrintTableInfo(TaskSchedulerCallback):
    """After each round: the task tuned, its best time, the estimated total latency, the
    trials so far and an estimate of the time left."""

    def post_tune(self, scheduler: TaskScheduler, task_id: int) -> None:
        task = scheduler.tasks[task_id]
        best = scheduler.best_costs[task_id]
        elapsed = time.time() - scheduler.tic
        done, total = scheduler.ct, scheduler.num_measure_trials
        eta = elapsed / max(done, 1) * (total - done)
        best_text = "-" if best >= NO_COST else f"{best * 1e3:.4f} ms"
        latency = scheduler.cur_score
        latency_text = "-" if latency >= NO_COST else f"{latency * 1e3:.4f} ms"
        print(f"[TaskScheduler] task {task_id} ({task.desc or task.workload_key}): best "
              f"{best_text} after {scheduler.task_trials[task_id]} trials | estimated "
              f"total latency {latency_text} | trials {done}/{total} | elapsed "
              f"{elapsed:.1f} s | ETA {eta:.0f} s", flush=True)


class TaskScheduler:
    """Allocates measurement trials across ``tasks`` (module docstring)."""

    def __init__(self, tasks: Sequence[SearchTask], task_weights: Sequence[float] | None = None,
                 objective_func: Callable[[list[float]], float] | None = None,
                 strategy: str = "gradient", load_model_file: str | None = None,
                 load_log_file: str | None = None, alpha: float = 0.2, beta: float = 2,
                 gamma: float = 0.5, backward_window_size: int = 3,
                 callbacks: Sequence[TaskSchedulerCallback] | None = None,
                 eps_random: float = 0.05, seed: int | None = None) -> None:
        if strategy not in ("gradient", "round-robin"):
            raise ValueError(f"TaskScheduler: unknown strategy {strategy!r} "
                             f"(\"gradient\" or \"round-robin\")")
        if load_model_file is not None:
            raise NotImplementedError("TaskScheduler(load_model_file=...): kiln's cost model "
                                      "is trained from the log (load_log_file=) instead")
        if not tasks:
            raise ValueError("TaskScheduler needs at least one task")
        self.tasks = list(tasks)
        self.task_weights = [1.0] * len(tasks) if task_weights is None \
            else [float(w) for w in task_weights]
        if len(self.task_weights) != len(self.tasks):
            raise ValueError(f"TaskScheduler: {len(self.tasks)} tasks but "
                             f"{len(self.task_weights)} weights")
        self.objective_func = objective_func or (
            lambda costs: sum(c * w for c, w in zip(costs, self.task_weights, strict=True)))
        self.strategy = strategy
        self.load_log_file = load_log_file
        del gamma  # accepted as TVM does; Ansor's gradient has no term for it
        self.alpha, self.beta = alpha, beta
        self.flop_cts = [t.compute_dag.flop_ct() for t in self.tasks]
        groups: dict[str, list[int]] = {}
        for k, t in enumerate(self.tasks):
            groups.setdefault(derive_similarity_tag(t.compute_dag), []).append(k)
        self.group_task_ids = list(groups.values())
        self._group_of = {k: ids for ids in self.group_task_ids for k in ids}
        self.backward_window_size = backward_window_size
        self.callbacks = None if callbacks is None else list(callbacks)
        self.eps_random = eps_random
        self.rng = random.Random(seed)
        self.search_policies: list[SketchPolicy] = []
        self._reset()

    def _reset(self) -> None:
        n = len(self.tasks)
        self.best_costs = [NO_COST] * n
        self.task_cts = [0] * n  # rounds given to each task
        self.task_trials = [0] * n  # trials measured for each task (restored ones too)
        self.task_best_trials = [0] * n  # task_trials when its best cost was found
        self.task_costs_history: list[list[float]] = [[] for _ in range(n)]
        self.dead_tasks: set[int] = set()
        self.ct = self.best_ct = 0  # trials measured by this tune() (the budget's count)
        self._last = -1  # the task of the last round
        self.cur_score = self.best_score = math.inf
        self.num_measure_trials = 0
        self.per_round = 1  # trials of one round
        self.early_stopping: int | None = None  # per task, in trials
        self.tic = time.time()

    # ---- tuning -----------------------------------------------------------------------
    def tune(self, tune_option: TuningOptions, search_policy="default",
             search_policy_params: dict | None = None, adaptive_training: bool = False,
             per_task_early_stopping: int | None = None) -> None:
        """Measure ``tune_option.num_measure_trials`` new states across the tasks
        (``search_policy``: ``"default"``/``"sketch.xgb"``, ``"sketch.random"``, or one
        :class:`SketchPolicy` per task); the log and the best states are in the options'
        callbacks (``RecordToFile``) and :attr:`search_policies`. (``adaptive_training``
        is accepted: the XGBoost model refits after every round anyway.)"""
        del adaptive_training
        self._reset()
        self.num_measure_trials = tune_option.num_measure_trials
        self.per_round = min(tune_option.num_measures_per_round,
                             tune_option.num_measure_trials // len(self.tasks))
        if self.per_round <= 0:
            raise ValueError(f"TaskScheduler.tune: num_measure_trials="
                             f"{tune_option.num_measure_trials} is too small for "
                             f"{len(self.tasks)} tasks (at least one trial each)")
        self.early_stopping = per_task_early_stopping
        self.search_policies = self._policies(search_policy, search_policy_params,
                                              tune_option.verbose)
        if self.load_log_file is not None:
            self._restore_status(self.load_log_file)
        callbacks = self.callbacks if self.callbacks is not None else \
            ([PrintTableInfo()] if tune_option.verbose else [])
        measurer = ProgramMeasurer(tune_option.builder, tune_option.runner,
                                   tune_option.measure_callbacks)
        try:
            for k in range(len(self.tasks)):  # warm-up: a round for each task not restored
                if not self.task_cts[k] and self._budget_left():
                    self._tune_task(k, measurer, callbacks)
            while self._budget_left() and len(self.dead_tasks) < len(self.tasks):
                if (tune_option.early_stopping is not None
                        and self.ct - self.best_ct > tune_option.early_stopping):
                    break
                self._tune_task(self._next_task(), measurer, callbacks)
        finally:
            measurer.close()

    def _budget_left(self) -> bool:
        return self.ct < self.num_measure_trials

    def _policies(self, search_policy, params: dict | None, verbose: int
                  ) -> list[SketchPolicy]:
        if isinstance(search_policy, (list, tuple)):
            if len(search_policy) != len(self.tasks):
                raise ValueError("TaskScheduler.tune: one search policy per task")
            return list(search_policy)
        models = {"default": XGBModel, "sketch.xgb": XGBModel, "sketch.random": RandomModel}
        if search_policy not in models:
            raise ValueError(f"TaskScheduler.tune: unknown search_policy {search_policy!r} "
                             f"({', '.join(models)})")
        preload = [PreloadMeasuredStates(self.load_log_file)] if self.load_log_file else None
        return [SketchPolicy(task, models[search_policy](), params=params,
                             verbose=max(verbose - 1, 0), init_search_callbacks=preload)
                for task in self.tasks]

    def _tune_task(self, k: int, measurer: ProgramMeasurer, callbacks) -> None:
        """One round of task ``k``."""
        for cb in callbacks:
            cb.pre_tune(self, k)
        budget = min(self.per_round, self.num_measure_trials - self.ct)
        inputs, results = self.search_policies[k].continue_search_one_round(budget, measurer)
        self.task_cts[k] += 1
        self.ct += len(inputs)
        self._last = k
        for res in results:
            self._note_result(k, res)
        self.task_costs_history[k].append(self.best_costs[k])
        if not inputs or self._stalled(k):
            self.dead_tasks.add(k)
        self.cur_score = self.objective_func(self.best_costs)
        if self.cur_score < self.best_score:
            self.best_score, self.best_ct = self.cur_score, self.ct
        for cb in callbacks:
            cb.post_tune(self, k)

    def _note_result(self, k: int, res) -> None:
        self.task_trials[k] += 1
        if res.error_no == MeasureErrorNo.NO_ERROR and res.cost < self.best_costs[k]:
            self.best_costs[k] = res.cost
            self.task_best_trials[k] = self.task_trials[k]

    def _stalled(self, k: int) -> bool:
        return (self.early_stopping is not None
                and self.task_trials[k] - self.task_best_trials[k] > self.early_stopping)

    def _next_task(self) -> int:
        """The task of the next round (module docstring)."""
        alive = [k for k in range(len(self.tasks)) if k not in self.dead_tasks]
        if self.strategy == "round-robin":
            return min(alive, key=lambda k: (k - self._last - 1) % len(self.tasks))
        if self.rng.random() < self.eps_random:
            return self.rng.choice(alive)
        grads = {k: task_gradient(self.best_costs[k], self.task_costs_history[k],
                                  self.task_cts[k], self._chain_gradient(k), self.alpha,
                                  self.backward_window_size, self._group_bound(k))
                 for k in alive}
        if max(grads.values()) == min(grads.values()):
            return self.rng.choice(alive)
        return min(alive, key=lambda k: grads[k])

    def _group_bound(self, k: int) -> float:
        """``beta`` times the cost of task ``k`` at the best throughput (flops per second)
        of its group; inf when no other task is similar."""
        ids = self._group_of[k]
        if len(ids) < 2:
            return math.inf
        best_flops = max(self.flop_cts[j] / self.best_costs[j] for j in ids)
        return self.beta * self.flop_cts[k] / best_flops

    def _chain_gradient(self, k: int) -> float:
        """dF/dc_k of the objective at the current best costs (a finite difference, exact
        for the weighted sum)."""
        delta = max(self.best_costs[k] * 1e-4, 1e-12)
        lower = list(self.best_costs)
        lower[k] -= delta
        return (self.objective_func(self.best_costs) - self.objective_func(lower)) / delta

    def _restore_status(self, log_file: str) -> None:
        """Best costs, trials and rounds of each task from its records in ``log_file``."""
        index = {t.workload_key: k for k, t in enumerate(self.tasks)}
        for inp, res in load_records(log_file):
            k = index.get(inp.task.workload_key)
            if k is not None and same_target(inp.task.target, str(self.tasks[k].target)):
                self._note_result(k, res)
        for k in range(len(self.tasks)):
            self.task_cts[k] = int(self.task_trials[k] / self.per_round + 0.5)
            if self.task_cts[k]:
                self.task_costs_history[k].append(self.best_costs[k])
            if self._stalled(k):
                self.dead_tasks.add(k)
        self.cur_score = self.best_score = self.objective_func(self.best_costs)
