"""Resuming a tuning run with another measuring thread count: the candidates timed with the old
count are measured again, and only one count's times are ranked (``records.at_threads``,
``records.one_thread_count``). A synthetic task and runner whose times depend on the thread
count stand in for kernels and timing (no compiling), so the tests take a fraction of a
second."""

from __future__ import annotations

import time

import pytest

from ember import tune
from ember.tune import MeasureResult, load_records
from ember.tune import model as tune_model_mod
from ember.tune.extract import TaskInfo
from ember.tune.measure import measure_option
from ember.tune.records import Record, at_threads, one_thread_count

from .synthetic import SyntheticBuilder

TRIALS = 6


def _cost(index: int, threads: int) -> float:
    """Seconds: with 1 thread configuration 0 is the fastest (0.1 ms, faster than any 2-thread
    time); with 2 threads configuration TRIALS - 1 is (5 ms, the others up to 10 ms)."""
    return (1 + index) * 1e-4 if threads == 1 else (10 - index) * 1e-3


class ThreadedRunner:
    """Times a configuration as ``_cost`` at its ``num_threads`` (``stamp_threads`` records
    that count in each result)."""

    def __init__(self, num_threads: int):
        self.num_threads = num_threads
        self.measured: list[int] = []

    def run(self, inputs, builds):
        self.measured += [i.config.index for i in inputs]
        return [MeasureResult([_cost(i.config.index, self.num_threads)], 0, "", 0.0,
                              time.time()) for i in inputs]


def _tune(monkeypatch, log, target: str, threads: int) -> tuple[ThreadedRunner, object]:
    """``tune_model`` (grid, ``TRIALS`` trials) of the synthetic task alone, timed by a
    ``ThreadedRunner`` of ``threads`` threads (what ``--measure-threads`` gives the runner)."""
    task = tune.create_task("test.synthetic", [64, 8], target)
    runner = ThreadedRunner(threads)
    monkeypatch.setattr(tune_model_mod, "extract_tasks", lambda *a, **k: [
        TaskInfo(task, "synthetic", 1, 1e6, None, task.key)])
    monkeypatch.setattr(tune_model_mod, "_make_option", lambda *a, **k: measure_option(
        builder=SyntheticBuilder(), runner=runner))
    summary = tune.tune_model((None, {}), target=target, trials=TRIALS, tuner="grid",
                              records=log, progress=False, model_check=0, log=None,
                              measure_threads=threads)
    return runner, summary


def _best_index(log, target: str) -> int:
    task = tune.create_task("test.synthetic", [64, 8], target)
    rec = tune.apply_history_best(log).query(task.key, target)
    return rec.config["index"]


def test_a_resume_with_other_measure_threads_measures_the_candidates_again(monkeypatch,
                                                                            tmp_path):
    # (was: the resume at 2 threads skipped the candidates timed at 1 thread, kept their
    # times, and its best was configuration 0's 1-thread time)
    log = tmp_path / "t.jsonl"
    first, s1 = _tune(monkeypatch, log, "llvm", 1)
    assert sorted(first.measured) == list(range(TRIALS))
    assert s1.tasks[0].best_s == pytest.approx(_cost(0, 1))
    again, _ = _tune(monkeypatch, log, "llvm", 1)  # same count: nothing measured again
    assert again.measured == []
    second, s2 = _tune(monkeypatch, log, "llvm", 2)
    assert sorted(second.measured) == list(range(TRIALS))  # all measured again
    assert s2.tasks[0].trials == TRIALS
    assert s2.tasks[0].best_s == pytest.approx(_cost(TRIALS - 1, 2))  # the 2-thread best
    counts = [r.result.threads for r in load_records(log)]
    assert counts.count(1) == TRIALS and counts.count(2) == TRIALS
    # the records hold both counts and the target names none: the most recent count (2)
    assert _best_index(log, "llvm") == TRIALS - 1
    third, _ = _tune(monkeypatch, log, "llvm", 2)  # resumed at 2 again: nothing to measure
    assert third.measured == []


def test_apply_history_best_prefers_the_targets_thread_count(monkeypatch, tmp_path):
    # the target runs with 1 thread: its 1-thread times decide, though the 2-thread run is
    # more recent
    log = tmp_path / "t.jsonl"
    target = "llvm -num-threads=1"
    _tune(monkeypatch, log, target, 1)
    second, _ = _tune(monkeypatch, log, target, 2)
    assert sorted(second.measured) == list(range(TRIALS))
    assert _best_index(log, target) == 0


def test_records_without_a_thread_count_keep_counting_as_measured(monkeypatch, tmp_path):
    # a records file of an older ember (no "threads"): its candidates are still skipped on
    # resume and still applied
    import json
    log = tmp_path / "t.jsonl"
    _tune(monkeypatch, log, "llvm", 1)
    lines = [json.loads(ln) for ln in log.read_text().splitlines()]
    for d in lines:
        d.pop("threads", None)
    log.write_text("".join(json.dumps(d) + "\n" for d in lines))
    again, _ = _tune(monkeypatch, log, "llvm", 2)
    assert again.measured == []
    assert _best_index(log, "llvm") == 0


def _rec(workload: str, threads, cost: float, stamp: float, group: str = "") -> Record:
    return Record("rule", [workload, "llvm"], f"rule:{workload}", "llvm", "config",
                  {"index": 1}, MeasureResult([cost], 0, "", 0.0, stamp, group, threads))


def test_one_thread_count_per_workload():
    recs = [_rec("a", 1, 1.0, 1), _rec("a", 2, 2.0, 2),         # a: most recent count 2
            _rec("b", 0, 1.0, 1), _rec("b", 2, 2.0, 3),         # b: the target's count (0)
            _rec("c", None, 1.0, 1), _rec("c", None, 1.5, 2),   # c: unknown only: as before
            _rec("d", 1, 1.0, 5), _rec("d", 2, 1.0, 1, "model:x"),  # in-model: kept
            _rec("e", None, 1.0, 9), _rec("e", 1, 1.0, 1), _rec("e", 2, 1.0, 2)]
    kept = one_thread_count(recs)  # e: unknown beside the most recent known count
    assert [(r.task_args[0], r.result.threads) for r in kept] == [
        ("a", 2), ("b", 0), ("c", None), ("c", None), ("d", 1), ("d", 2), ("e", None),
        ("e", 2)]
    assert [r.result.threads for r in at_threads(recs, 2)] == [2, 2, None, None, 2, None, 2]


def test_tuner_load_history_with_a_thread_count(monkeypatch, tmp_path):
    from ember.tune.tuner import TUNERS
    log = tmp_path / "t.jsonl"
    _tune(monkeypatch, log, "llvm", 1)
    task = tune.create_task("test.synthetic", [64, 8], "llvm")
    assert TUNERS["grid"](task).load_history(load_records(log), threads=1) == TRIALS
    assert TUNERS["grid"](task).load_history(load_records(log), threads=2) == 0
    assert TUNERS["grid"](task).load_history(load_records(log)) == TRIALS  # no count: all
