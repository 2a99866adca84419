"""Evolutionary search of one kernel's programs against an online-trained cost model.

Each round, ``SearchPolicy.propose(n)`` starts from a population of freshly sampled programs
(from every sketch) plus the best measured ones, evolves it for a few generations (parents picked
in proportion to the model's predicted throughput; children by mutation or crossover; the best
survive), and returns the ``n`` best-predicted programs not measured yet, a fraction ``epsilon``
of them random for exploration. ``update`` adds the measured programs to the model's training
set (features: ``ember.tune.features.loop_features`` of each program) and refits it. Before
there is anything to learn from, proposals are random samples.
"""

from __future__ import annotations

import random
from typing import Sequence

import numpy as np

from ...errors import EmberError
from ...target import Target
from ...tir.stmt import PrimFunc
from ..cost_model import XGBoostCostModel
from ..features import NUM_FEATURES, count_flops, loop_features
from ..task import task_key
from .sketch import Trace, apply_trace, crossover, generate_sketches, mutate, sample


class SearchTask:
    """A kernel tuned by template-free search; quacks like ``Task`` for measurement and
    records (``name`` ``"search"``, ``args`` ``[workload_key]``)."""

    name = "search"

    def __init__(self, func: PrimFunc, target: "str | Target" = "llvm"):
        from ..extract import register_workload
        self.func = func
        self.workload_key = register_workload(func)
        self.args = (self.workload_key,)
        self.key = task_key("search", self.args)
        self.target = Target(target)
        self.sketches = generate_sketches(func)
        self.flop = count_flops(func)

    def instantiate(self, trace: Trace) -> PrimFunc:
        """The kernel (``PrimFunc``) of the search trace ``trace`` applied to the unscheduled
        function."""
        return apply_trace(self.func, trace)

    def reference(self) -> PrimFunc:
        """The unscheduled function, which every candidate is checked against."""
        return self.func

    def to_json(self) -> dict:
        """``{"name": "search", "args": [workload_key], "key"}`` (what records store)."""
        return {"name": self.name, "args": list(self.args), "key": self.key}

    def __repr__(self):
        return f"SearchTask({self.workload_key}, sketches={[s.name for s in self.sketches]})"


class SearchPolicy:
    """Evolutionary search for one ``SearchTask`` (see the module doc)."""

    def __init__(self, task: SearchTask, seed: int = 0, population: int = 64,
                 generations: int = 3, mutation_prob: float = 0.8, epsilon: float = 0.15,
                 model: XGBoostCostModel | None = None):
        self.task = task
        self.rng = random.Random(seed)
        self.population = population
        self.generations = generations
        self.mutation_prob = mutation_prob
        self.epsilon = epsilon
        self.model = model or XGBoostCostModel(seed=seed)
        self.sketch_of = {s.name: s for s in task.sketches}
        self.measured: dict[str, tuple[Trace, float]] = {}   # key -> (trace, cost or inf)
        self.xs: list[np.ndarray] = []
        self.ys: list[float] = []
        self.best_trace: Trace | None = None
        self.best_cost = float("inf")
        self.trials = 0
        self.errors = 0
        self._feat: dict[str, np.ndarray] = {}

    # model ------------------------------------------------------------------------------------
    def features(self, trace: Trace) -> np.ndarray:
        """The ``loop_features`` vector (``NUM_FEATURES`` float32) of ``trace``'s program, cached
        by trace key; all zeros when the trace does not apply."""
        k = trace.key()
        f = self._feat.get(k)
        if f is None:
            try:
                f = loop_features(self.task.instantiate(trace))
            except EmberError:
                f = np.zeros(NUM_FEATURES, np.float32)
            if len(self._feat) > 50_000:
                self._feat.clear()
            self._feat[k] = f
        return f

    def predict(self, traces: Sequence[Trace]) -> np.ndarray:
        """The cost model's scores (higher is better; zeros until it is trained) of ``traces``,
        shape ``(len(traces),)``."""
        if not traces:
            return np.zeros(0)
        return self.model.predict(np.stack([self.features(t) for t in traces]))

    # search -----------------------------------------------------------------------------------
    def _random(self) -> Trace:
        sk = self.rng.choice(self.task.sketches)
        return sample(sk, self.rng)

    def propose(self, n: int) -> list[Trace]:
        """Up to ``n`` unmeasured programs to measure next."""
        if not self.task.sketches:
            return []
        out: dict[str, Trace] = {}

        def take(t: Trace):
            k = t.key()
            if k not in self.measured and k not in out:
                out[k] = t

        if not self.model.trained:
            for _ in range(20 * n):
                if len(out) >= n:
                    break
                take(self._random())
            return list(out.values())
        pop = [self._random() for _ in range(self.population)]
        good = sorted((v for v in self.measured.values() if v[1] < float("inf")),
                      key=lambda v: v[1])[: self.population // 4]
        pop += [t for t, _ in good]
        scores = self.predict(pop)
        for _ in range(self.generations):
            w = np.maximum(scores - scores.min(), 0) + 1e-6
            kids = []
            for _ in range(self.population):
                a = pop[self.rng.choices(range(len(pop)), w)[0]]
                sk = self.sketch_of[a.sketch]
                if self.rng.random() < self.mutation_prob:
                    kids.append(mutate(a, sk, self.rng))
                else:
                    b = pop[self.rng.choices(range(len(pop)), w)[0]]
                    kids.append(crossover(a, b, sk, self.rng))
            allp = pop + kids
            alls = np.concatenate([scores, self.predict(kids)])
            uniq: dict[str, int] = {}
            for i, t in enumerate(allp):
                uniq.setdefault(t.key(), i)
            idx = sorted(uniq.values(), key=lambda i: -alls[i])[: self.population]
            pop, scores = [allp[i] for i in idx], alls[idx]
        n_explore = max(0, int(round(self.epsilon * n)))
        for i in np.argsort(-scores):
            if len(out) >= n - n_explore:
                break
            take(pop[i])
        for _ in range(20 * n):
            if len(out) >= n:
                break
            take(self._random())
        return list(out.values())

    def update(self, traces: Sequence[Trace], results) -> None:
        """Learn from measured programs (errors count as zero throughput)."""
        for t, r in zip(traces, results):
            cost = r.mean if r.ok else float("inf")
            self.measured[t.key()] = (t, cost)
            self.xs.append(self.features(t))
            self.ys.append(0.0 if not r.ok else (self.task.flop or 1.0) / max(cost, 1e-12))
            if cost < self.best_cost:
                self.best_cost, self.best_trace = cost, t
        if len(self.ys) >= 4 and max(self.ys) > 0:
            self.model.fit(np.stack(self.xs), self.ys)

    def load_history(self, records) -> int:
        """Take earlier measurements of this task from records; returns how many."""
        from ..measure import MeasureResult  # noqa: F401 (records carry results)
        traces, results = [], []
        for r in records:
            if r.task_key == self.task.key and r.kind == "trace" \
                    and r.target == str(self.task.target):
                traces.append(Trace.from_json(r.config))
                results.append(r.result)
        if traces:
            self.update(traces, results)
        return len(traces)
