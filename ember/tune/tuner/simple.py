"""Tuners without a model: random sampling and grid search."""

from __future__ import annotations

import random

from .base import Tuner


class RandomTuner(Tuner):
    """Samples configurations uniformly without replacement (``seed`` for repeatability)."""

    def __init__(self, task, seed: int | None = None):
        super().__init__(task)
        self.rng = random.Random(seed)
        n = len(self.space)
        self._perm = None
        if n <= 1 << 16:
            self._perm = list(range(n))
            self.rng.shuffle(self._perm)
        self._pos = 0

    def next_batch(self, batch_size: int):
        """Up to ``batch_size`` unvisited configurations drawn uniformly without replacement."""
        out: list[int] = []
        n = len(self.space)
        while len(out) < batch_size and len(self.visited) + len(out) < n:
            if self._perm is not None:
                if self._pos >= n:
                    break
                idx = self._perm[self._pos]
                self._pos += 1
            else:
                idx = self.rng.randrange(n)
            if idx not in self.visited and idx not in out:
                out.append(idx)
        return [self.space.get(i) for i in out]


class GridSearchTuner(Tuner):
    """Enumerates the space in index order."""

    def __init__(self, task):
        super().__init__(task)
        self._next = 0

    def next_batch(self, batch_size: int):
        """The next up to ``batch_size`` unvisited configurations in index order."""
        out = []
        while len(out) < batch_size and self._next < len(self.space):
            if self._next not in self.visited:
                out.append(self.space.get(self._next))
            self._next += 1
        return out

    def has_next(self) -> bool:
        """True while the grid has configurations left and the space is not fully measured."""
        return self._next < len(self.space) and super().has_next()
