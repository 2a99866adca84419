"""Simulated annealing over a configuration space, guided by a cost model's predictions."""

from __future__ import annotations

import heapq
import math
import random
from typing import Callable, Sequence

import numpy as np


class SimulatedAnnealingOptimizer:
    """Finds the configurations a model scores highest.

    ``parallel_size`` walkers start at random points; each step moves every walker by changing
    one knob to a random position and accepts the move with probability
    ``exp((new - old) / temperature)``, the temperature falling linearly from ``temp[0]`` to
    ``temp[1]`` over ``n_iter`` steps. Stops early after ``early_stop`` steps without a change in
    the top ``num``. With ``persistent``, walkers resume from where the last call left them.
    """

    def __init__(self, space, n_iter: int = 200, temp: tuple = (1.0, 0.0),
                 parallel_size: int = 64, early_stop: int = 30, persistent: bool = True,
                 seed: int | None = None):
        self.space = space
        self.dims = space.dims
        self.n_iter, self.temp = n_iter, temp
        self.parallel_size = min(parallel_size, len(space))
        self.early_stop = early_stop
        self.persistent = persistent
        self.rng = random.Random(seed)
        self.points: list[int] | None = None

    def _walk(self, idx: int) -> int:
        pos = self.space.point2knob(idx)
        movable = [k for k, d in enumerate(self.dims) if d > 1]
        if not movable:
            return idx
        k = self.rng.choice(movable)
        new = self.rng.randrange(self.dims[k] - 1)
        pos[k] = new if new < pos[k] else new + 1
        return self.space.knob2point(pos)

    def find_maximums(self, predict: Callable[[Sequence[int]], np.ndarray], num: int,
                      exclusive: set[int]) -> list[int]:
        """Up to ``num`` distinct points not in ``exclusive`` with the highest ``predict``
        scores (best first)."""
        n = len(self.space)
        if self.points is None or not self.persistent:
            self.points = [self.rng.randrange(n) for _ in range(self.parallel_size)]
        points = list(self.points)
        scores = np.asarray(predict(points), dtype=np.float64)
        heap: list[tuple[float, int]] = []
        in_heap: set[int] = set()

        def offer(s: float, p: int) -> bool:
            if p in exclusive or p in in_heap:
                return False
            if len(heap) < num:
                heapq.heappush(heap, (s, p))
                in_heap.add(p)
                return True
            if s > heap[0][0]:
                _, old = heapq.heapreplace(heap, (s, p))
                in_heap.discard(old)
                in_heap.add(p)
                return True
            return False

        for s, p in zip(scores, points):
            offer(float(s), p)
        t0, t1 = self.temp
        last_change = 0
        for step in range(self.n_iter):
            t = t0 + (t1 - t0) * step / max(1, self.n_iter)
            new_points = [self._walk(p) for p in points]
            new_scores = np.asarray(predict(new_points), dtype=np.float64)
            changed = False
            for k, (s, p) in enumerate(zip(new_scores, new_points)):
                changed |= offer(float(s), p)
                delta = s - scores[k]
                if delta >= 0 or (t > 0 and self.rng.random() < math.exp(delta / t)):
                    points[k], scores[k] = p, s
            if changed:
                last_change = step
            elif step - last_change >= self.early_stop:
                break
        self.points = points
        return [p for _, p in sorted(heap, key=lambda x: -x[0])]
