"""Applying tuning records when building: ``with apply_history_best("records.jsonl"):``.

Inside the context, ``ember.build`` / ``ember.compile`` replace each kernel that has a successful
record for the build's target by its best measured program: the best configuration of its
``rule`` task (the default rule's own knobs) or ``tile`` task, or the best trace of its
template-free ``search`` task, whichever measured faster
(records of other targets and failed candidates are ignored; kernels without a record, or whose
recorded untuned run was the fastest, keep their default schedule). Contexts nest; the innermost wins. ``ApplyHistoryBest.applied`` counts the kernels
it replaced in the builds it served.

The context also decides algorithms: each Winograd-eligible convolution with a ``conv_algo``
record (``ember.tune.strategy``) runs as its recorded algorithm (direct, F(2x2) or F(4x4)) when
that measured at least ``margin`` faster than the heuristic's choice (configuration 0), side by side when the records have interleaved evidence; ``algorithms_applied`` counts the convolutions
whose algorithm it changed.

In-model evidence (``ember.tune.model_check``: a task's tuned kernels and its default timed
inside the running model, interleaved) overrides the evidence of candidates timed alone: such a
task runs its tuned configuration only when that was at least ``margin`` faster in the model.
``ApplyHistoryBest.replaced`` lists ``(kernel name, record)`` of every kernel it replaced;
``ApplyHistoryBest.matched`` counts the kernels that had a record at all (replaced or not: 0
means the records are of another model or target).

Thread counts: times are compared only at one thread count per workload
(``records.one_thread_count``): when the records of a kernel were measured at several counts
(a run resumed with another ``--measure-threads``), those at the target's own count
(``-num-threads``; none given: the runtime's default, recorded as 0) are read when present,
else those of the most recent count; the others are ignored. Records without a count (older
files) are read as before, beside the chosen count's.
"""

from __future__ import annotations

import contextvars
import logging
import os
from typing import Iterable, Sequence

from ..errors import ScheduleError, TuningError
from ..target import Target
from .records import (Record, best_paired_speedup, best_records, is_in_model, load_records,
                      one_thread_count, paired_speedups)

logger = logging.getLogger("ember.tune")
_current: contextvars.ContextVar = contextvars.ContextVar("ember_tune_dispatch", default=None)


class ApplyHistoryBest:
    """The best record of each (workload, target) from ``records`` (a path or records)."""

    def __init__(self, records: "str | os.PathLike | Iterable[Record]", margin: float = 0.02,
                 min_evidence: int = 2):
        if isinstance(records, (str, os.PathLike)):
            if not os.path.exists(records):  # a mistyped path must not build untuned silently
                raise TuningError(f"records file {os.fspath(records)!r} does not exist: give the "
                                  f"file `ember tune --records FILE` wrote (or tune first)")
            records = load_records(records)
        records = one_thread_count(records)
        self.best = best_records(records)
        self.margin = margin
        self.min_evidence = min_evidence
        # the fastest measurement of each workload's default schedule: a "default" record or
        # configuration 0 of its rule task (both are the untuned schedule)
        self.defaults: dict[tuple[str, str], float] = {}
        alone = [r for r in records if not is_in_model(r)]
        for r in alone:
            if r.ok and r.result.costs and (r.kind == "default" or _is_default_config(r)):
                k = (str(r.task_args[0]), r.target)
                self.defaults[k] = min(self.defaults.get(k, float("inf")), r.cost)
        # side-by-side (interleaved) evidence against the default: the configuration with the
        # best median speed-up, when at least 1 + margin
        self.paired: dict[tuple[str, str], tuple[Record | None, float]] = {}
        configs = {(r.task_key, r.target, r.config.get("index")): r for r in records
                   if r.ok and r.kind == "config" and isinstance(r.config, dict)}
        # in-model evidence (``model_check``: the task's kernels timed inside the running
        # model, tuned vs default) is decisive where it exists
        for in_model in (False, True):
            for k, per in paired_speedups(records, in_model=in_model).items():
                best = best_paired_speedup(per, min_evidence)
                if best is None:
                    continue
                idx, s = best
                self.paired[k] = (configs.get((k[0], k[1], idx)) if s >= 1 + margin else None,
                                  s)
        # configuration 0 (the default) of tasks that have one (rule, conv_algo): fastest cost
        self.config0: dict[tuple[str, str], float] = {}
        for r in alone:
            if r.ok and r.result.costs and r.kind == "config" and isinstance(r.config, dict) \
                    and r.config.get("index") == 0:
                k = (r.task_key, r.target)
                self.config0[k] = min(self.config0.get(k, float("inf")), r.cost)
        self.applied = 0
        self.matched = 0  # kernels of the builds served that had a record (applied or not)
        self.replaced: list[tuple[str, Record]] = []  # (kernel name, record) of each build
        self.algorithms_applied = 0
        self._token = None

    def default_cost(self, workload: str, target: "str | Target") -> float | None:
        """Fastest measured cost (s) of a workload's untuned schedule, or ``None``."""
        return self.defaults.get((workload, str(Target(target))))

    def query(self, task_key: str, target: "str | Target") -> Record | None:
        """The best record of a task key for ``target``, or ``None``."""
        return self.best.get((task_key, str(Target(target))))

    def choose(self, task_key: str, target: "str | Target") -> Record | None:
        """The record to follow for a task whose configuration 0 is its default (``rule``,
        ``conv_algo``): the best side-by-side configuration when the records hold interleaved
        evidence (``None`` when none beats the default by ``margin``), else the fastest record
        when at least ``margin`` faster than configuration 0's fastest; ``None`` = keep the
        default."""
        tgt = str(Target(target))
        if (task_key, tgt) in self.paired:
            return self.paired[(task_key, tgt)][0]
        rec = self.query(task_key, tgt)
        if rec is None or _is_default_config(rec):
            return None
        base = self.config0.get((task_key, tgt))
        if base is not None and rec.cost > base * (1.0 - self.margin):
            return None
        return rec

    def conv_algorithm(self, workload: list, default: int, target: str) -> int | None:
        """The recorded algorithm of a Winograd-eligible convolution (``conv_algo`` task of
        ``workload``, see ``ember.tune.strategy``): -1 direct, ``m`` Winograd F(m x m), or
        ``None`` (no decisive record: the ``WinogradConv`` heuristic decides). Counted in
        ``algorithms_applied`` when it differs from ``default``."""
        from .task import task_key
        if not target:
            return None
        rec = self.choose(task_key("conv_algo", workload), target)
        if rec is None:
            return None
        try:
            tile = int({n: v for n, _, v in rec.config["entity"]}["tile"])
        except (KeyError, TypeError, ValueError) as e:
            logger.warning("not applying the algorithm record of %s: %s", workload, e)
            return None
        if tile != default:
            self.algorithms_applied += 1
        return tile

    def __enter__(self):
        from ..graph.passes.winograd import algorithm_scope
        self._token = _current.set(self)
        self._scope = algorithm_scope(self.conv_algorithm)
        self._scope.__enter__()
        return self

    def __exit__(self, *exc):
        self._scope.__exit__(*exc)
        _current.reset(self._token)


def apply_history_best(records, margin: float = 0.02, min_evidence: int = 2) -> ApplyHistoryBest:
    """Context manager applying the best records of ``records`` (path or ``Record``s) to the
    builds inside it. A tuned program replaces the default schedule only when it measured at
    least ``margin`` (a fraction) faster than the default: when the records hold interleaved
    side-by-side measurements of a ``rule`` task with its configuration 0 (``tune_model``'s
    confirmation), the configuration with the best median side-by-side speed-up over at least
    ``min_evidence`` repeats, if at least ``1 + margin``; otherwise the fastest record against the default's fastest measurement.
    Records of one kernel measured at several thread counts: only one count's are read (the
    target's own when present, else the most recent; ``records.one_thread_count``).
    Raises ``TuningError`` on a missing or malformed records file."""
    return ApplyHistoryBest(records, margin, min_evidence)


def current() -> ApplyHistoryBest | None:
    """The innermost active ``apply_history_best`` context."""
    return _current.get()


def apply_best_schedules(kernels: Sequence, target: "str | Target") -> list:
    """``kernels`` with each tuned one replaced by its best recorded schedule (unchanged when no
    ``apply_history_best`` context is active). The kernel keeps its name and parameters."""
    ctx = current()
    if ctx is None or not ctx.best:
        return list(kernels)
    from .extract import register_workload
    from .space import ConfigEntity
    from .task import Task, task_key
    out = []
    tgt = str(Target(target))
    for func in kernels:
        key = register_workload(func)
        rule_key = task_key("rule", [key, tgt])
        if (rule_key, tgt) in ctx.paired:  # measured side by side with the default: decisive
            rec = ctx.paired[(rule_key, tgt)][0]
            recs = [rec] if rec is not None else []
        else:
            recs = [r for r in (ctx.query(task_key("tile", [key]), target),
                                ctx.query(task_key("search", [key]), target),
                                ctx.query(rule_key, target)) if r is not None]
        if (rule_key, tgt) in ctx.paired or recs:
            ctx.matched += 1
        if not recs:
            out.append(func)
            continue
        rec = min(recs, key=lambda r: r.cost)
        if rec.kind == "default" or _is_default_config(rec):
            out.append(func)  # the untuned kernel measured fastest
            continue
        default_cost = ctx.default_cost(key, target)
        if (rule_key, tgt) not in ctx.paired and default_cost is not None \
                and rec.cost > default_cost * (1.0 - ctx.margin):
            out.append(func)  # not measurably faster than the default schedule
            continue
        try:
            if rec.kind == "trace":
                from .search import SearchTask, Trace
                tuned = SearchTask(func, target).instantiate(Trace.from_json(rec.config))
            else:
                task = Task(rec.task_name, rec.task_args, target)
                tuned = task.instantiate(ConfigEntity.from_json(rec.config, task.config_space))
        except (TuningError, ScheduleError) as e:  # a record this ember cannot replay
            logger.warning("not applying the record of %s (keeping its default schedule): %s",
                           key, e)
            out.append(func)
            continue
        tuned.name = func.name
        out.append(tuned)
        ctx.applied += 1
        ctx.replaced.append((func.name, rec))
    return out


def _is_default_config(rec: Record) -> bool:
    """A ``rule`` record of configuration 0: the default schedule itself."""
    return rec.task_name == "rule" and rec.kind == "config" and \
        isinstance(rec.config, dict) and rec.config.get("index") == 0
