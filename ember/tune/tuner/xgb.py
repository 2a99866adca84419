"""Model-based tuning: an xgboost cost model, simulated-annealing proposals and diversity-aware
batch selection (AutoTVM's XGBTuner design).

Until ``plan_size`` candidates are measured the tuner samples at random; then, every
``plan_size`` measurements, it refits the model on everything measured, runs simulated annealing
on the model's predictions to find the ``3 * plan_size`` most promising unmeasured
configurations, and picks ``plan_size`` of them greedily by predicted score plus a bonus for knob
values the plan does not cover yet (so a batch is not ``plan_size`` near-copies). A fraction
``epsilon`` of each batch is random, for exploration.

Features (``feature_type``): ``"knob"`` (knob positions and numeric knob values), ``"loop"``
(``ember.tune.features.loop_features`` of the instantiated PrimFunc), or ``"knob+loop"``.
"""

from __future__ import annotations

import math
import random
import zlib

import numpy as np

from ...errors import TuningError
from ..cost_model import XGBoostCostModel
from ..features import NUM_FEATURES, loop_features
from .base import Tuner
from .sa import SimulatedAnnealingOptimizer


def knob_features(config) -> list[float]:
    """Knob positions plus log2 of numeric knob values (split factors, numeric knobs)."""
    out: list[float] = []
    for p, (name, val) in zip(config.knob_pos, config.values().items()):
        out.append(float(p))
        vals = val if isinstance(val, list) else [val]
        for v in vals:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append(math.log2(1 + abs(float(v))))
            elif isinstance(v, str):
                out.append(float(zlib.crc32(v.encode()) % 7))
    return out


class XGBTuner(Tuner):
    """Tuner driven by an ``XGBoostCostModel``; see the module doc for the algorithm."""

    def __init__(self, task, plan_size: int = 32, feature_type: str = "knob", loss: str = "rank",
                 epsilon: float = 0.05, diversity: float = 0.5, sa_iter: int = 150,
                 seed: int | None = None):
        super().__init__(task)
        if feature_type not in ("knob", "loop", "knob+loop"):
            raise TuningError(f"unknown feature_type {feature_type!r} (knob, loop, knob+loop)")
        self.plan_size = plan_size
        self.feature_type = feature_type
        self.epsilon = epsilon
        self.diversity = diversity
        self.rng = random.Random(seed)
        self.model = XGBoostCostModel(loss=loss, seed=seed or 0)
        self.sa = SimulatedAnnealingOptimizer(self.space, n_iter=sa_iter, seed=seed,
                                              parallel_size=64 if "loop" in feature_type else 128)
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.plan: list[int] = []
        self.fits = 0
        self._feat_cache: dict[int, np.ndarray] = {}

    # features ---------------------------------------------------------------------------------
    def features(self, index: int) -> np.ndarray:
        """The feature vector (float32) of configuration ``index``: knob features,
        ``loop_features`` of the instantiated kernel, or both (``feature_type``); cached. An
        invalid configuration gets all-zero loop features."""
        f = self._feat_cache.get(index)
        if f is None:
            cfg = self.space.get(index)
            parts = []
            if "knob" in self.feature_type:
                parts.append(np.asarray(knob_features(cfg), np.float32))
            if "loop" in self.feature_type:
                try:
                    parts.append(loop_features(self.task.instantiate(cfg)))
                except Exception:  # noqa: BLE001 - an invalid config: all-zero loop features
                    parts.append(np.zeros(NUM_FEATURES, np.float32))
            f = np.concatenate(parts)
            if len(self._feat_cache) > 200_000:
                self._feat_cache.clear()
            self._feat_cache[index] = f
        return f

    def predict(self, indexes) -> np.ndarray:
        """The cost model's scores (higher is better; zeros until it is trained) of the
        configurations ``indexes``."""
        return self.model.predict(np.stack([self.features(i) for i in indexes]))

    # tuner interface ----------------------------------------------------------------------------
    def _random_unvisited(self, exclude: set[int]) -> int | None:
        n = len(self.space)
        for _ in range(64):
            i = self.rng.randrange(n)
            if i not in self.visited and i not in exclude:
                return i
        for i in range(n):
            if i not in self.visited and i not in exclude:
                return i
        return None

    def next_batch(self, batch_size: int):
        """Up to ``batch_size`` unvisited configurations: from the model's plan once it is trained
        (a fraction ``epsilon`` random), else random."""
        out: list[int] = []
        while len(out) < batch_size:
            idx = None
            if self.model.trained and self.rng.random() >= self.epsilon:
                while self.plan and idx is None:
                    cand = self.plan.pop(0)
                    if cand not in self.visited and cand not in out:
                        idx = cand
            if idx is None:
                idx = self._random_unvisited(set(out))
            if idx is None:
                break
            out.append(idx)
        return [self.space.get(i) for i in out]

    def update(self, inputs, results) -> None:
        """Record the measured scores; every ``plan_size`` measurements refit the model and plan
        the next candidates (simulated annealing plus diversity-aware pick)."""
        for inp, res in zip(inputs, results):
            self.xs.append(inp.config.index)
            self.ys.append(self.score(res))
        if len(self.xs) >= self.plan_size * (self.fits + 1) and max(self.ys) > 0:
            self.fits += 1
            X = np.stack([self.features(i) for i in self.xs])
            self.model.fit(X, self.ys)
            cands = self.sa.find_maximums(self.predict, 3 * self.plan_size, set(self.visited))
            self.plan = self._diverse_pick(cands, self.plan_size)

    def _diverse_pick(self, cands: list[int], num: int) -> list[int]:
        """Greedy pick of ``num`` of ``cands`` (best first) by rank score plus a bonus for
        covering knob positions not yet in the pick."""
        if not cands:
            return []
        n_knobs = max(1, len(self.space.dims))
        rank_score = {c: 1.0 - k / len(cands) for k, c in enumerate(cands)}
        covered: list[set[int]] = [set() for _ in range(n_knobs)]
        pos = {c: self.space.point2knob(c) for c in cands}
        picked: list[int] = []
        left = list(cands)
        while left and len(picked) < num:
            def gain(c):
                new = sum(p not in covered[k] for k, p in enumerate(pos[c]))
                return rank_score[c] + self.diversity * new / n_knobs
            best = max(left, key=gain)
            left.remove(best)
            picked.append(best)
            for k, p in enumerate(pos[best]):
                covered[k].add(p)
        return picked
