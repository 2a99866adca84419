"""A genetic-algorithm tuner over the knob positions of a configuration."""

from __future__ import annotations

import random

from .base import Tuner


class GATuner(Tuner):
    """Genetic search: a generation of ``pop_size`` distinct configurations is measured, then
    the next is bred from it: the ``elite_num`` best survive, children take each knob from one
    of two parents picked in proportion to their throughput, and each knob mutates to a random
    position with probability ``mutation_prob``. Measured configurations are never bred again.
    """

    def __init__(self, task, pop_size: int = 32, elite_num: int = 3, mutation_prob: float = 0.1,
                 seed: int | None = None):
        super().__init__(task)
        self.rng = random.Random(seed)
        self.pop_size = min(pop_size, len(self.space))
        self.elite_num = min(elite_num, self.pop_size)
        self.mutation_prob = mutation_prob
        self.dims = self.space.dims
        self.genes: list[list[int]] = []
        self.scores: list[float] = []
        self.pending: list[int] = []
        self.elites: list[tuple[float, list[int]]] = []
        self._seed_population()

    def _random_gene(self) -> list[int]:
        return [self.rng.randrange(d) for d in self.dims]

    def _seed_population(self) -> None:
        seen = set(self.visited)
        tries = 0
        while len(self.pending) < self.pop_size and tries < 50 * self.pop_size:
            tries += 1
            idx = self.space.knob2point(self._random_gene())
            if idx not in seen:
                seen.add(idx)
                self.pending.append(idx)

    def next_batch(self, batch_size: int):
        """The next up to ``batch_size`` configurations of the current generation, breeding a new
        generation when it is used up."""
        if not self.pending:
            self._breed()
        out, self.pending = self.pending[:batch_size], self.pending[batch_size:]
        return [self.space.get(i) for i in out]

    def update(self, inputs, results) -> None:
        """Record each measured configuration's knob positions and throughput score for
        breeding."""
        for inp, res in zip(inputs, results):
            self.genes.append(list(inp.config.knob_pos))
            self.scores.append(self.score(res))

    def _breed(self) -> None:
        pool = sorted(zip(self.scores, self.genes), key=lambda t: -t[0])
        pool = (self.elites + pool)[: max(self.pop_size, self.elite_num)]
        pool.sort(key=lambda t: -t[0])
        self.elites = pool[: self.elite_num]
        self.genes, self.scores = [], []
        if not pool:
            self._seed_population()
            return
        weights = [s + 1e-9 for s, _ in pool]
        seen = set(self.visited)
        tries = 0
        while len(self.pending) < self.pop_size and tries < 50 * self.pop_size:
            tries += 1
            a, b = self.rng.choices(pool, weights, k=2)
            child = [x if self.rng.random() < 0.5 else y for x, y in zip(a[1], b[1])]
            for k, d in enumerate(self.dims):
                if self.rng.random() < self.mutation_prob:
                    child[k] = self.rng.randrange(d)
            idx = self.space.knob2point(child)
            if idx not in seen:
                seen.add(idx)
                self.pending.append(idx)
        if not self.pending:  # converged: fall back to unvisited random points
            self._seed_population()
