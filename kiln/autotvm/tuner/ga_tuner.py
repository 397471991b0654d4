"""A genetic algorithm over configs: a gene is the vector of knob choices.

Each generation of ``pop_size`` configs is measured; the next keeps the ``elite_num``
fittest and fills up with children of parents drawn in proportion to their FLOP/s
(one-point crossover, then each gene re-drawn with probability ``mutation_prob``).
Configs already measured are never proposed again.
"""

from __future__ import annotations

import numpy as np

from .tuner import Tuner

__all__ = ["GATuner"]


class GATuner(Tuner):
    def __init__(self, task, pop_size: int = 100, elite_num: int = 3,
                 mutation_prob: float = 0.1, seed: int | None = None):
        super().__init__(task)
        self.dims = np.array(self.space.dims, dtype=np.int64)
        self.pop_size = int(min(pop_size, len(self.space)))
        self.elite_num = int(min(elite_num, self.pop_size))
        if self.elite_num < 1:
            raise ValueError("GATuner: elite_num must be >= 1")
        self.mutation_prob = float(mutation_prob)
        self.rng = np.random.default_rng(seed)
        self.genes: list[int] = []  # indices of the current generation, in order
        self.measured: list[tuple[int, float]] = []  # this generation's (index, FLOP/s)
        self.handed = 0  # configs of this generation given out
        self.trial_pt = 0
        self.elites: list[tuple[float, int]] = []
        first = []
        while len(first) < self.pop_size:
            idx = self._random_unvisited_excluding(first)
            if idx is None:
                break
            first.append(idx)
        self.genes = first

    def _random_unvisited_excluding(self, taken) -> int | None:
        taken = set(taken)
        for _ in range(1000):
            idx = int(self.rng.integers(len(self.space)))
            if idx not in self.visited and idx not in taken:
                return idx
        return None

    def next_batch(self, batch_size: int) -> list:
        out = []
        while len(out) < batch_size and self.has_next():
            if self.trial_pt >= len(self.genes):
                if len(self.measured) < self.handed:
                    break  # wait for this generation's results
                self._next_generation()
                if not self.genes:
                    break
            idx = self.genes[self.trial_pt]
            self.trial_pt += 1
            if idx in self.visited:
                continue
            self.visited.add(idx)
            self.handed += 1
            out.append(self.space.get(idx))
        return out

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results, strict=True):
            flops = self.flops_of(self.task, res)
            self.measured.append((inp.config.index, flops))
            self.elites.append((flops, inp.config.index))
        self.elites = sorted(self.elites, reverse=True)[: self.elite_num]

    def _next_generation(self) -> None:
        genes = [np.array(self.space.knob_indices(i)) for i, _ in self.measured]
        scores = np.array([f for _, f in self.measured], dtype=float)
        elite_genes = [np.array(self.space.knob_indices(i)) for _, i in self.elites]
        pool = genes + elite_genes
        weights = np.concatenate([scores, [s for s, _ in self.elites]]) + 1e-8
        probs = weights / weights.sum() if pool else weights
        children: list[int] = []
        taken: set[int] = set()
        attempts = 0
        # no parents (every gene of the generation was measured before): all at random
        while pool and len(children) < self.pop_size and attempts < 20 * self.pop_size:
            attempts += 1
            a, b = self.rng.choice(len(pool), size=2, p=probs)
            cut = int(self.rng.integers(len(self.dims) + 1))
            child = np.concatenate([pool[a][:cut], pool[b][cut:]])
            mutate = self.rng.random(len(self.dims)) < self.mutation_prob
            child[mutate] = self.rng.integers(self.dims[mutate])
            idx = self.space.index_of(child)
            if idx in self.visited or idx in taken:
                continue
            taken.add(idx)
            children.append(idx)
        while len(children) < self.pop_size:  # a crowded neighbourhood: top up at random
            idx = self._random_unvisited_excluding(taken)
            if idx is None:
                break
            taken.add(idx)
            children.append(idx)
        self.genes, self.measured, self.handed, self.trial_pt = children, [], 0, 0
