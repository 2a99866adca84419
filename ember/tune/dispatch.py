"""Applying tuning records when building: ``with apply_history_best("records.jsonl"):``.

Inside the context, ``ember.build`` / ``ember.compile`` replace each kernel that has a successful
record for the build's target by its best measured program: the best configuration of its
``tile`` task or the best trace of its template-free ``search`` task, whichever measured faster
(records of other targets and failed candidates are ignored; kernels without a record, or whose
recorded untuned run was the fastest, keep their default schedule). Contexts nest; the innermost wins. ``ApplyHistoryBest.applied`` counts the kernels
it replaced in the builds it served.
"""

from __future__ import annotations

import contextvars
import os
from typing import Iterable, Sequence

from ..target import Target
from .records import Record, best_records, load_records

_current: contextvars.ContextVar = contextvars.ContextVar("ember_tune_dispatch", default=None)


class ApplyHistoryBest:
    """The best record of each (workload, target) from ``records`` (a path or records)."""

    def __init__(self, records: "str | os.PathLike | Iterable[Record]"):
        if isinstance(records, (str, os.PathLike)):
            records = load_records(records)
        self.best = best_records(records)
        self.applied = 0
        self._token = None

    def query(self, task_key: str, target: "str | Target") -> Record | None:
        """The best record of a task key for ``target``, or ``None``."""
        return self.best.get((task_key, str(Target(target))))

    def __enter__(self):
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc):
        _current.reset(self._token)


def apply_history_best(records) -> ApplyHistoryBest:
    """Context manager applying the best records of ``records`` (path or ``Record``s) to the
    builds inside it. Raises ``TuningError`` on a malformed records file."""
    return ApplyHistoryBest(records)


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
    for func in kernels:
        key = register_workload(func)
        recs = [r for r in (ctx.query(task_key("tile", [key]), target),
                            ctx.query(task_key("search", [key]), target)) if r is not None]
        if not recs:
            out.append(func)
            continue
        rec = min(recs, key=lambda r: r.cost)
        if rec.kind == "default":  # the untuned kernel measured fastest
            out.append(func)
            continue
        if rec.kind == "trace":
            from .search import SearchTask, Trace
            tuned = SearchTask(func, target).instantiate(Trace.from_json(rec.config))
        else:
            task = Task("tile", [key], target)
            tuned = task.instantiate(ConfigEntity.from_json(rec.config, task.config_space))
        tuned.name = func.name
        out.append(tuned)
        ctx.applied += 1
    return out
