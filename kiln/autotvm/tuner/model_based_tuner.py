"""Tuners guided by a learned cost model.

Until the first ``plan_size`` trials are measured, configs are random. Then, every
``plan_size`` trials, the model is refit on everything measured so far and the optimizer
(parallel simulated annealing) proposes the ``plan_size`` configs it predicts fastest; with
``diversity_filter_ratio`` it proposes ``ratio * plan_size`` and keeps a diverse
``plan_size`` of them (greedy: each pick maximises its predicted rank plus the number of
knob values it adds to the batch). The last ``eps_greedy`` fraction of each plan is random,
so the model also sees configs it does not like.

With ``load_history`` (transfer learning) the cost model is first trained on earlier
records of the same template (``fit_log``) and, when that succeeds, the first plan is the
optimizer's pick under that model instead of random configs.
"""

from __future__ import annotations

import numpy as np

from .tuner import Tuner

__all__ = ["ModelBasedTuner", "submodular_pick"]


def submodular_pick(space, candidates: list[int], num: int, weight: float = 1.0) -> list[int]:
    """``num`` of ``candidates`` (best first) chosen greedily for rank plus diversity."""
    if len(candidates) <= num:
        return list(candidates)
    knobs = [space.knob_indices(i) for i in candidates]
    n = len(candidates)
    rank_score = [(n - r) / n for r in range(n)]
    covered: list[set[int]] = [set() for _ in space.dims]
    chosen: list[int] = []
    left = set(range(n))
    for _ in range(num):
        best, best_gain = None, -1.0
        for c in left:
            new = sum(1 for k, v in enumerate(knobs[c]) if v not in covered[k])
            gain = rank_score[c] + weight * new / max(1, len(space.dims))
            if gain > best_gain:
                best, best_gain = c, gain
        left.discard(best)
        chosen.append(best)
        for k, v in enumerate(knobs[best]):
            covered[k].add(v)
    return [candidates[c] for c in chosen]


class ModelBasedTuner(Tuner):
    def __init__(self, task, cost_model, model_optimizer, plan_size: int = 64,
                 diversity_filter_ratio: float | None = None, eps_greedy: float = 0.05,
                 seed: int | None = None):
        super().__init__(task)
        self.cost_model, self.model_optimizer = cost_model, model_optimizer
        self.plan_size = int(plan_size)
        self.diversity_filter_ratio = diversity_filter_ratio
        self.eps_greedy = float(eps_greedy)
        self.rng = np.random.default_rng(seed)
        self.trials: list[int] = []
        self.trial_pt = 0
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.train_ct = 0
        self.history_fitted = False  # the cost model was trained on earlier records

    def next_batch(self, batch_size: int) -> list:
        out = []
        n_random_tail = int(self.eps_greedy * self.plan_size)
        while len(out) < batch_size and self.has_next():
            idx = None
            while self.trial_pt < len(self.trials) - n_random_tail:
                cand = self.trials[self.trial_pt]
                self.trial_pt += 1
                if cand not in self.visited:
                    idx = cand
                    break
            if idx is None:
                idx = self._random_unvisited(self.rng)
                if idx is None:
                    break
            self.visited.add(idx)
            out.append(self.space.get(idx))
        return out

    def load_history(self, data_set, min_seed_records: int = 500) -> list:
        """Transfer learning (TVM's design): skip the configs of this workload measured
        before (see Tuner.load_history), train the cost model on the records of the same
        template (``cost_model.fit_log``; nothing when fewer than ``min_seed_records`` are
        usable, with a logged message) and, if no plan is made yet, make the first plan the
        ``plan_size`` configs that model predicts fastest."""
        records = super().load_history(data_set, min_seed_records)
        fit_log = getattr(self.cost_model, "fit_log", None)
        if fit_log is None or not fit_log(records, self.plan_size, min_seed_records):
            return records
        self.history_fitted = True
        if not self.trials:
            self.trials = self.model_optimizer.find_maximums(self.cost_model, self.plan_size,
                                                             self.visited)
            self.trial_pt = 0
        return records

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results, strict=True):
            self.xs.append(inp.config.index)
            self.ys.append(self.flops_of(self.task, res))
        if len(self.xs) >= self.plan_size * (self.train_ct + 1) and max(self.ys) > 0:
            self.cost_model.fit(self.xs, self.ys)
            want = self.plan_size
            if self.diversity_filter_ratio:
                want = int(self.plan_size * self.diversity_filter_ratio)
            cands = self.model_optimizer.find_maximums(self.cost_model, want, self.visited)
            if self.diversity_filter_ratio:
                cands = submodular_pick(self.space, cands, self.plan_size)
            self.trials, self.trial_pt = cands, 0
            self.train_ct += 1
