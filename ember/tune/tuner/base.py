"""The tuning loop shared by every template tuner.

``tuner.tune(n_trial, measure_option, early_stopping=None, callbacks=())`` repeatedly asks the
tuner for a batch of configurations (``next_batch``), measures them, feeds the results back
(``update``) and calls each callback as ``callback(tuner, inputs, results)``. It stops after
``n_trial`` new measurements, when the space is exhausted, or when ``early_stopping`` trials
passed without a better configuration. Errors are never best: only ``error_no == 0`` results
count. ``load_history(records)`` resumes from a records file: measured configurations are
skipped and their results seed the tuner.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Sequence

from ...errors import TuningError
from ..measure import (MeasureErrorNo, MeasureInput, MeasureResult, create_measure_batch,
                       measure_option)
from ..records import Record, at_threads, is_in_model
from ..space import ConfigEntity

logger = logging.getLogger("ember.tune")


class Tuner:
    """Base class: subclasses implement ``next_batch``, ``has_next`` and (optionally)
    ``update``. Attributes after tuning: ``best_config``, ``best_cost`` (seconds),
    ``best_flops`` (FLOP/s, or 1/cost when the task's FLOPs are unknown), ``trials`` (measured
    in this run; configurations the template rejects before building, ``invalid``, do not
    count), ``errors``, ``history`` ([(config, result)] including resumed ones)."""

    def __init__(self, task):
        self.task = task
        self.space = task.config_space
        self.visited: set[int] = set()
        self.best_config: ConfigEntity | None = None
        self.best_cost = float("inf")
        self.best_flops = 0.0
        self.best_iter = 0
        self.trials = 0
        self.errors = 0
        self.invalid = 0
        self.history: list[tuple[ConfigEntity, MeasureResult]] = []
        self._anchor_base: float | None = None

    # to implement -----------------------------------------------------------------------------
    def next_batch(self, batch_size: int) -> list[ConfigEntity]:
        """Up to ``batch_size`` configurations not measured yet (fewer, or none, when the space
        runs out); subclasses implement it."""
        raise NotImplementedError

    def has_next(self) -> bool:
        """True while some configuration of the space is not measured."""
        return len(self.visited) < len(self.space)

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measured candidates (the base class only tracks the best)."""

    # shared -----------------------------------------------------------------------------------
    def score(self, result: MeasureResult) -> float:
        """Throughput of a result (FLOP/s; 1/seconds when FLOPs are unknown); 0 for errors."""
        if not result.ok or not result.costs:
            return 0.0
        return (self.task.flop or 1.0) / max(result.mean, 1e-12)

    def _record(self, config: ConfigEntity, result: MeasureResult, it: int) -> None:
        self.visited.add(config.index)
        self.history.append((config, result))
        if result.ok and result.mean < self.best_cost:
            self.best_cost = result.mean
            self.best_flops = self.score(result)
            self.best_config = config
            self.best_iter = it

    def load_history(self, records: Iterable[Record], threads: int | None = None) -> int:
        """Seed the tuner with earlier measurements of this task (records of other tasks or
        targets are ignored); those configurations will not be measured again. ``threads``:
        the thread count this run times with (``measure.measured_threads``); records timed
        with another count are ignored too (measured again, never ranked against this run's
        times; records of an unknown count are kept, see ``records.at_threads``). Returns how
        many of them count as trials (configurations the template rejected do not)."""
        inputs, results = [], []
        if threads is not None:
            records = at_threads(records, threads)
        for r in records:
            if r.task_key != self.task.key or r.target != str(self.task.target) \
                    or r.kind != "config" or is_in_model(r):
                continue
            try:
                cfg = ConfigEntity.from_json(r.config, self.space)
            except TuningError as e:
                logger.warning("skipping a record that does not fit the space: %s", e)
                continue
            self._record(cfg, r.result, 0)
            inputs.append(MeasureInput(self.task.target, self.task, cfg))
            results.append(r.result)
        if inputs:
            self.update(inputs, results)
        # distinct configurations (a configuration re-measured to confirm it counts once)
        return len({inp.config.index for inp, r in zip(inputs, results)
                    if r.error_no != MeasureErrorNo.INSTANTIATION_ERROR})

    def tune(self, n_trial: int, measure_option: dict | None = None,
             early_stopping: int | None = None, callbacks: Sequence[Callable] = (),
             batch_size: int | None = None, deadline: float | None = None,
             initial: Sequence[ConfigEntity] = (), anchor: ConfigEntity | None = None
             ) -> ConfigEntity | None:
        """Measure up to ``n_trial`` new configurations (stopping early once
        ``time.monotonic()`` passes ``deadline``), the not yet measured ones of ``initial``
        first (e.g. the default configuration, as trial 0); returns the best configuration
        found (over this run and loaded history), or ``None`` when every candidate failed.

        ``anchor`` (e.g. the default configuration): measured again with every batch (side by
        side when the runner interleaves); the tuner then learns from costs scaled by the
        anchor's first cost over its cost in the same batch, which cancels the machine load
        that batch saw. Anchor measurements go to callbacks that have ``log_extra`` (such as
        ``log_to_file``) and count as no trial."""
        option = measure_option or globals()["measure_option"]()
        measure = create_measure_batch(option)
        if batch_size is None:
            batch_size = max(2, getattr(option["builder"], "n_parallel", 1))
        self.trials = 0
        for cb in callbacks:
            if hasattr(cb, "start"):
                cb.start(self, n_trial)
        try:
            while self.trials < n_trial and self.has_next():
                if deadline is not None and time.monotonic() >= deadline:
                    logger.info("tuning time budget spent")
                    break
                first = [c for c in initial if c.index not in self.visited][:batch_size]
                initial = [c for c in initial if c not in first]
                want = min(batch_size, n_trial - self.trials) - len(first)
                configs = first + (self.next_batch(want) if want > 0 else [])
                seen: set[int] = set()
                configs = [c for c in configs if c.index not in self.visited
                           and not (c.index in seen or seen.add(c.index))]
                if not configs:
                    break
                inputs = [MeasureInput(self.task.target, self.task, c) for c in configs]
                if anchor is not None:
                    ainp = MeasureInput(self.task.target, self.task, anchor)
                    results = measure(inputs + [ainp])
                    ares = results.pop()
                    for cb in callbacks:
                        if hasattr(cb, "log_extra"):
                            cb.log_extra(self, [ainp], [ares])
                    raw = results
                    if ares.ok and ares.costs:
                        if self._anchor_base is None:
                            self._anchor_base = ares.mean
                        scale = self._anchor_base / ares.mean
                        results = [MeasureResult([c * scale for c in r.costs], r.error_no,
                                                 r.error_msg, r.all_cost, r.timestamp, r.group,
                                                 r.threads)
                                   for r in results]
                else:
                    results = raw = measure(inputs)
                for c, r in zip(configs, results):
                    if r.error_no == MeasureErrorNo.INSTANTIATION_ERROR:
                        self.invalid += 1  # rejected before building: costs no trial
                    else:
                        self.trials += 1
                        self.errors += not r.ok
                    self._record(c, r, self.trials)
                    if not r.ok:
                        logger.debug("config %d failed: %s", c.index, r.error_msg)
                self.update(inputs, results)
                for cb in callbacks:
                    cb(self, inputs, raw)
                if early_stopping is not None and self.trials - self.best_iter >= early_stopping:
                    logger.info("early stopping: no improvement in %d trials", early_stopping)
                    break
        finally:
            for cb in callbacks:
                if hasattr(cb, "finish"):
                    cb.finish(self)
        return self.best_config
