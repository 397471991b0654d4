"""Parallel simulated annealing over a config space, guided by a cost model.

``parallel_size`` walkers move at once: each proposes a neighbour (one knob re-drawn), all
proposals are scored by the model in one call, and each walker accepts its proposal if it
scores higher, or else with probability ``exp(gain / temperature)`` (gains in units of the
current scores' spread; the temperature falls linearly over ``n_iter`` steps). The best
``num`` unmeasured configs ever seen are returned. Walkers persist between calls. A space no
larger than the walk would visit is scored exhaustively instead.
"""

from __future__ import annotations

import heapq
import logging

import numpy as np

logger = logging.getLogger("autotvm")

__all__ = ["SimulatedAnnealingOptimizer"]


class SimulatedAnnealingOptimizer:
    def __init__(self, task, n_iter: int = 100, temp=(1.0, 0.0), persistent: bool = True,
                 parallel_size: int = 64, early_stop: int = 30, seed: int | None = None):
        self.space = task.config_space
        self.dims = np.array(self.space.dims, dtype=np.int64)
        self.n_iter, self.temp = int(n_iter), tuple(temp)
        self.persistent = persistent
        self.parallel_size = int(min(parallel_size, len(self.space)))
        self.early_stop = int(early_stop)
        self.rng = np.random.default_rng(seed)
        self.points: np.ndarray | None = None  # walker knob vectors

    def _random_points(self, n: int) -> np.ndarray:
        return self.rng.integers(0, self.dims, size=(n, len(self.dims)))

    def _index(self, pts: np.ndarray) -> list[int]:
        return [self.space.index_of(p) for p in pts]

    def find_maximums(self, model, num: int, exclusive: set[int]) -> list[int]:
        """The ``num`` configs with the highest predicted score, none in ``exclusive``."""
        n = len(self.space)
        if n <= self.parallel_size * (self.n_iter + 1):
            cand = [i for i in range(n) if i not in exclusive]
            scores = model.predict(cand) if cand else np.zeros(0)
            order = np.argsort(-scores, kind="stable")[:num]
            return [cand[i] for i in order]
        pts = self.points if self.persistent and self.points is not None \
            else self._random_points(self.parallel_size)
        idx = self._index(pts)
        scores = np.asarray(model.predict(idx), dtype=float)
        heap: list[tuple[float, int]] = []  # min-heap of the best (score, index)
        in_heap: set[int] = set()

        def offer(score: float, i: int) -> bool:
            if i in exclusive or i in in_heap:
                return False
            if len(heap) < num:
                heapq.heappush(heap, (score, i))
            elif score > heap[0][0]:
                in_heap.discard(heapq.heapreplace(heap, (score, i))[1])
            else:
                return False
            in_heap.add(i)
            return True

        for s, i in zip(scores, idx, strict=True):
            offer(float(s), i)
        t0, t1 = self.temp
        since_better = 0
        for step in range(self.n_iter):
            temp = t0 + (t1 - t0) * step / max(1, self.n_iter)
            new = pts.copy()
            knob = self.rng.integers(len(self.dims), size=len(new))
            new[np.arange(len(new)), knob] = self.rng.integers(self.dims[knob])
            new_idx = self._index(new)
            new_scores = np.asarray(model.predict(new_idx), dtype=float)
            spread = float(np.std(scores)) + 1e-9
            gain = (new_scores - scores) / spread
            accept = (gain > 0) | (self.rng.random(len(new)) <
                                   np.exp(np.minimum(gain, 0) / max(temp, 1e-6)))
            pts[accept] = new[accept]
            scores[accept] = new_scores[accept]
            improved = False
            for s, i in zip(new_scores, new_idx, strict=True):
                improved |= offer(float(s), i)
            since_better = 0 if improved else since_better + 1
            if since_better >= self.early_stop:
                break
        self.points = pts
        return [i for _, i in sorted(heap, reverse=True)]
