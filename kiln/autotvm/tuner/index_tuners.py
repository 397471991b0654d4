"""Tuners that need no model: random sampling and grid search over config indices."""

from __future__ import annotations

import numpy as np

from .tuner import Tuner

__all__ = ["RandomTuner", "GridSearchTuner"]


def _check_range(space_len: int, range_idx):
    if range_idx is None:
        return 0, space_len
    lo, hi = int(range_idx[0]), int(range_idx[1])
    if not 0 <= lo <= hi < space_len:
        raise ValueError(f"range_idx {range_idx} is not inside [0, {space_len - 1}]")
    return lo, hi + 1


class RandomTuner(Tuner):
    """Configs drawn uniformly at random, never twice (``range_idx=(lo, hi)`` restricts the
    indices; ``seed`` makes the order repeatable)."""

    def __init__(self, task, range_idx=None, seed: int | None = None):
        super().__init__(task)
        self.lo, self.hi = _check_range(len(self.space), range_idx)
        self.rng = np.random.default_rng(seed)

    def _in_range(self, index: int) -> bool:
        return self.lo <= index < self.hi

    def has_next(self) -> bool:
        return len(self.visited) < self.hi - self.lo

    def next_batch(self, batch_size: int) -> list:
        out = []
        n = self.hi - self.lo
        while len(out) < batch_size and self.has_next():
            if n - len(self.visited) < 64 or len(self.visited) > n // 2:
                free = [i for i in range(self.lo, self.hi) if i not in self.visited]
                idx = int(free[self.rng.integers(len(free))])
            else:
                idx = self.lo + int(self.rng.integers(n))
                if idx in self.visited:
                    continue
            self.visited.add(idx)
            out.append(self.space.get(idx))
        return out


class GridSearchTuner(Tuner):
    """Configs in index order (``range_idx=(lo, hi)`` restricts them)."""

    def __init__(self, task, range_idx=None):
        super().__init__(task)
        self.lo, self.hi = _check_range(len(self.space), range_idx)
        self.counter = self.lo

    def _in_range(self, index: int) -> bool:
        return self.lo <= index < self.hi

    def has_next(self) -> bool:
        return self.counter < self.hi

    def next_batch(self, batch_size: int) -> list:
        out = []
        while len(out) < batch_size and self.counter < self.hi:
            if self.counter not in self.visited:  # measured before (load_history)
                self.visited.add(self.counter)
                out.append(self.space.get(self.counter))
            self.counter += 1
        return out
