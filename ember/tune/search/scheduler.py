"""The task scheduler: spreads a model's trial budget over its kernels by expected gain.

Every task first gets one round (``round_size`` candidates). After that each round goes to the
task with the largest expected gain on end-to-end latency::

    gain = weight * best_cost * (recent_improvement + explore / rounds)

``weight * best_cost`` is the task's current share of the model's latency (``weight``: how many
times the model runs the kernel), ``recent_improvement`` is the relative latency drop over its
last two rounds, and the ``explore`` term keeps a task that has had few rounds in play. A task
without any valid measurement yet is chosen first; a task whose search space is exhausted is
dropped. With ``early_stopping`` N, a task is dropped too once N of its trials in a row
did not improve its best cost (as the template tuners stop).
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Sequence

from ..measure import MeasureInput, create_measure_batch
from .evolution import SearchPolicy


class TaskScheduler:
    """Tunes ``policies`` (one ``SearchPolicy`` per task) with weights ``weights``."""

    def __init__(self, policies: Sequence[SearchPolicy], weights: Sequence[float],
                 measure_option: dict, round_size: int = 8, explore: float = 0.2,
                 callbacks: Sequence[Callable] = (), progress: bool = False, labels=None,
                 early_stopping: int | None = None):
        self.policies = list(policies)
        self.weights = list(weights)
        self.measure = create_measure_batch(measure_option)
        self.round_size = round_size
        self.explore = explore
        self.callbacks = list(callbacks)
        self.rounds = [0] * len(self.policies)
        self.history: list[list[float]] = [[] for _ in self.policies]  # best cost per round
        self.done = [False] * len(self.policies)
        self.early_stopping = early_stopping
        self.since_best = [0] * len(self.policies)  # trials since the task's best improved
        self.progress = progress
        self.labels = labels or [p.task.workload_key for p in self.policies]
        self.bars: list = []
        self.order: list[int] = []

    def gain(self, k: int) -> float:
        """Expected benefit of one more round on task ``k``: ``weight x best cost (s) x (recent
        relative improvement + explore / (1 + rounds))``; ``inf`` while the task has no valid
        result."""
        p = self.policies[k]
        if p.best_cost == float("inf"):
            return float("inf")
        h = self.history[k]
        rate = (h[-3] - h[-1]) / h[-3] if len(h) >= 3 and h[-3] < float("inf") else 0.0
        return self.weights[k] * p.best_cost * (max(rate, 0.0) +
                                                 self.explore / (1 + self.rounds[k]))

    def estimated_latency(self) -> float:
        """Sum over tasks of weight x best cost (seconds; tasks without results excluded)."""
        return sum(w * p.best_cost for w, p in zip(self.weights, self.policies)
                   if p.best_cost < float("inf"))

    def _round(self, k: int, n: int) -> int:
        p = self.policies[k]
        traces = p.propose(n)
        if not traces:
            self.done[k] = True
            return 0
        inputs = [MeasureInput(p.task.target, p.task, t) for t in traces]
        results = self.measure(inputs)
        best = p.best_cost
        for r in results:  # in measurement order, as the template tuners count
            if r.ok and r.mean < best:
                best, self.since_best[k] = r.mean, 0
            else:
                self.since_best[k] += 1
        if self.early_stopping is not None and self.since_best[k] >= self.early_stopping:
            self.done[k] = True  # no improvement in early_stopping trials
        p.trials += len(results)
        p.errors += sum(not r.ok for r in results)
        p.update(traces, results)
        self.rounds[k] += 1
        self.history[k].append(p.best_cost)
        self.order.append(k)
        for cb in self.callbacks:
            cb(p, inputs, results)
        if self.bars:
            bar = self.bars[k]
            bar.update(len(results))
            best = p.task.flop / p.best_cost / 1e9 if p.best_cost < float("inf") else 0.0
            bar.set_postfix_str(f"best {best:.2f} GFLOP/s {p.best_cost * 1e3:.3f} ms, "
                                f"errors {p.errors}")
        return len(results)

    def tune(self, n_trials: int, deadline: float | None = None) -> None:
        """Measure up to ``n_trials`` candidates over all tasks (stopping once
        ``time.monotonic()`` passes ``deadline``)."""
        if self.progress:
            from tqdm import tqdm
            self.bars = [tqdm(total=None, desc=f"[{k + 1}/{len(self.policies)}] {lab[:28]}",
                              position=k, file=sys.stderr, leave=True, unit="trial")
                         for k, lab in enumerate(self.labels)]
        left = n_trials
        try:
            for k in range(len(self.policies)):  # warm-up: one round each
                if self.done[k]:
                    continue
                if left <= 0 or (deadline is not None and time.monotonic() >= deadline):
                    break
                left -= self._round(k, min(self.round_size, left))
            while left > 0 and (deadline is None or time.monotonic() < deadline):
                live = [k for k in range(len(self.policies)) if not self.done[k]]
                if not live:
                    break
                k = max(live, key=self.gain)
                left -= self._round(k, min(self.round_size, left))
        finally:
            for b in self.bars:
                b.close()
            self.bars = []


def tune_tasks_search(tasks, trials: int, option: dict, history, records: str | None,
                      progress: bool = True, seed: int = 0, round_size: int = 8,
                      target="llvm", deadline: float | None = None,
                      early_stopping: int | None = None):
    """Template-free tuning of ``tasks`` (``TaskInfo``s) for ``tune_model``; returns
    ``[(trials, errors, best_cost)]`` per task (resumed records included). ``early_stopping``:
    a task stops after that many trials in a row without improvement."""
    from ..callbacks import log_to_file
    from .evolution import SearchTask
    policies, done = [], []
    for k, info in enumerate(tasks):
        pol = SearchPolicy(SearchTask(info.func, target), seed=seed + k)
        done.append(pol.load_history(history))
        pol.trials = 0
        policies.append(pol)
    left = max(0, trials - sum(done))
    sched = TaskScheduler(policies, [t.count for t in tasks], option, round_size=round_size,
                          callbacks=[log_to_file(records)] if records else [],
                          progress=progress, labels=[t.op for t in tasks],
                          early_stopping=early_stopping)
    sched.tune(left, deadline)
    return [(p.trials + d, p.errors, p.best_cost) for p, d in zip(policies, done)]
