"""Tuning a whole model: ``tune_model`` (what ``ember tune MODEL ...`` runs).

``tune_model(model, target, trials, tuner, records)`` extracts the model's tasks, spreads the
trial budget over them (template tuners: in proportion to each task's share of the model's
FLOPs, at least ``min_trials`` each; ``tuner="search"``: the template-free search's task
scheduler decides by expected gain), tunes each with a progress bar, appends every measurement
to ``records`` and returns a ``TuneSummary`` whose ``table()`` is the per-task summary. The untuned kernel of each task is measured and recorded too, so
``apply_history_best`` never applies a program slower than the default. Running
it again with the same records resumes: measured candidates are skipped and count toward each
task's budget, when they were measured with the same thread count (``measure_threads``;
records without a count, from older files, count too): a run resumed with another count
measures the candidates and the untuned kernel again and ranks only its own times (the
untuned time needs a known, equal count). Then ``with
apply_history_best(records): ember.compile(model)`` builds the tuned model.

With a template tuner, the algorithm tasks (``conv_algo``: direct vs Winograd F(2x2) vs F(4x4)
per eligible convolution, ``ember.tune.strategy``) run first, each over its whole (small)
space, on top of ``trials`` (the kernels' budget); the kernel tasks are then extracted again
under the recorded choices, so the kernels tuned are those the tuned model runs.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import TuningError
from ..target import Target
from .callbacks import log_to_file, progress_bar
from .extract import TaskInfo, extract_tasks
from .measure import (LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult,
                      measure_option, measure_reference, measured_threads)
from .records import (at_threads, best_paired_speedup, is_in_model, load_records,
                      paired_speedups, save_records)


#: templates whose configuration 0 is the untuned program (measured first, the baseline)
DEFAULT_FIRST = ("rule", "conv_algo")

#: group id prefix of ``confirm_best``'s interleaved rounds (side-by-side evidence like any
#: group; the prefix lets a resumed run see which rounds it already holds)
CONFIRM_GROUP = "confirm:"


@dataclass
class TaskSummary:
    """Outcome of tuning one task (times in seconds; ``nan`` when unknown)."""

    name: str
    op: str
    count: int
    gflop: float
    trials: int
    errors: int
    untuned_s: float
    best_s: float

    @property
    def speedup(self) -> float:
        return self.untuned_s / self.best_s if self.best_s > 0 else float("nan")


@dataclass
class TuneSummary:
    """Per-task results of ``tune_model`` plus the run's wall time and records path."""

    tasks: list = field(default_factory=list)
    wall_s: float = 0.0
    records: str = ""
    in_model: list = field(default_factory=list)  # model_check.InModelResult per tuned task

    def rows(self) -> list[list[str]]:
        """One row of text per task, in the order of ``HEADER``: index, op, count, GFLOP (x count),
        trials, errors, untuned and tuned ms, speed-up (``-`` when nothing was tuned; then the
        in-model check's speed-up and verdict where it timed the task)."""
        rows = []
        checked = {r.workload: r for r in self.in_model}
        for k, t in enumerate(self.tasks):
            tuned = t.best_s < math.inf
            r = checked.get(t.name)
            verdict = "" if r is None else \
                f" (in the model {r.speedup:.2f}x: {'tuned' if r.kept else 'default kept'})"
            rows.append([str(k), t.op[:40], str(t.count), f"{t.gflop * t.count:.3f}",
                         str(t.trials), str(t.errors), f"{t.untuned_s * 1e3:.3f}",
                         f"{t.best_s * 1e3:.3f}" if tuned else "-",
                         f"{t.speedup:.2f}x{verdict}" if tuned else "-"])
        return rows

    def rejected_in_model(self) -> set[str]:
        """Workload keys (``TaskSummary.name``) of the tasks the in-model check timed and that
        keep their default schedule (not faster inside the running model)."""
        return {r.workload for r in self.in_model if not r.kept}

    HEADER = ["#", "task", "count", "GFLOP", "trials", "errors", "untuned ms", "tuned ms",
              "speed-up"]

    def table(self) -> str:
        """The summary as a plain-text table (one row per task, plus the weighted total: a
        task counts its default time there when its tuned program was slower, alone or inside
        the model)."""
        rows = self.rows()
        # kernel tasks only: an algorithm task (conv_algo) times a whole convolution, whose
        # kernels are tasks too; a task nothing measured has no time to add
        kern = [t for t in self.tasks if t.op != "conv_algo" and math.isfinite(t.untuned_s)]
        tot_u = sum(t.untuned_s * t.count for t in kern)
        # a task whose best program is slower than its default keeps the default, and so
        # does one that was not faster inside the running model (the in-model check)
        rejected = self.rejected_in_model()
        tot_b = sum((t.untuned_s if t.name in rejected else min(t.best_s, t.untuned_s)) * t.count
                    for t in kern)
        rows.append(["", "all kernel tasks (x count)", "", "",
                     str(sum(t.trials for t in self.tasks)),
                     str(sum(t.errors for t in self.tasks)), f"{tot_u * 1e3:.3f}",
                     f"{tot_b * 1e3:.3f}", f"{tot_u / tot_b if tot_b else float('nan'):.2f}x"])
        cols = [self.HEADER] + rows
        w = [max(len(r[i]) for r in cols) for i in range(len(self.HEADER))]
        lines = ["  ".join(c.ljust(x) for c, x in zip(r, w)) for r in cols]
        lines.insert(1, "  ".join("-" * x for x in w))
        return "\n".join(lines)


def load_model(model: Any, shapes: Mapping[str, Sequence[int]] | None = None):
    """``(mod, params)`` from an ONNX path / ModelProto / bytes, or a ``(mod, params)`` pair."""
    if isinstance(model, tuple) and len(model) == 2:
        return model
    from ..frontend.onnx import from_onnx
    return from_onnx(model, shapes=shapes)


def default_records(model: Any) -> str:
    """Where ``tune_model`` keeps the records when none is given: ``<model>.tune.jsonl`` next
    to a model given by path, else ``tune.jsonl``."""
    if isinstance(model, (str, os.PathLike)):
        return os.path.splitext(os.fspath(model))[0] + ".tune.jsonl"
    return "tune.jsonl"


def allocate_trials(tasks: Sequence[TaskInfo], trials: int, min_trials: int = 8) -> list[int]:
    """Split ``trials`` over ``tasks``: ``min_trials`` each (as far as the budget goes), the
    rest in proportion to each task's total FLOPs, never more than a task's space size. What a
    task's space cannot take goes to the tasks whose spaces still have room, again by FLOPs,
    so the whole budget is spent unless every space is exhausted.

    Returns:
        trials per task, in the order of ``tasks``; their sum is ``min(trials, sum of the
        space sizes)``.
    """
    n = len(tasks)
    sizes = [len(t.task.config_space) for t in tasks]
    alloc = [min(min_trials, trials // max(n, 1), s) for s in sizes]
    left = trials - sum(alloc)
    while left > 0:
        room = [k for k in range(n) if alloc[k] < sizes[k]]
        if not room:
            break
        total = sum(tasks[k].flops for k in room) or 1.0
        given = 0
        for k in room:
            add = min(int(left * tasks[k].flops / total), sizes[k] - alloc[k])
            alloc[k] += add
            given += add
        if given == 0:  # rounding leftovers: one each to the heaviest tasks with room
            for k in sorted(room, key=lambda k: -tasks[k].flops)[:left]:
                alloc[k] += 1
                given += 1
        left -= given
    return alloc


def _make_option(target: Target, dask: Any, timeout: float, repeat: int, number: int,
                 per_call: bool = False, cache_flush: bool = True,
                 measure_threads: int | None = None) -> dict:
    runner_kw = {"timeout": timeout, "repeat": repeat, "number": number,
                 "num_threads": measure_threads or target.num_threads, "per_call": per_call,
                 "interleave": per_call and not dask, "enable_cpu_cache_flush": cache_flush}
    if dask:
        from .dask_runner import DaskRunner
        runner = DaskRunner(dask, resource=None, **runner_kw)
    else:
        runner = LocalRunner(**runner_kw)
    return measure_option(builder=LocalBuilder(timeout=60), runner=runner)


def confirm_best(tuner, option: dict, records: str, top: int = 3, rounds: int = 2) -> None:
    """Measure the ``top`` fastest configurations of ``tuner``'s history and configuration 0
    (the default) again, interleaved (the order reversed every round), ``rounds`` times; the
    measurements are appended to ``records`` (their groups prefixed ``CONFIRM_GROUP``) and
    update ``tuner``'s best. When ``tuner`` measured nothing new (a resumed run), the
    confirmation rounds its loaded history holds count: a resumed run does not measure them
    again."""
    from .measure import create_measure_batch
    space = tuner.space
    ok = sorted((r.mean, c.index) for c, r in tuner.history if r.ok and c.index != 0)
    picks = [0] + [i for _, i in ok[:top]]
    if len(picks) < 2:
        return
    # a resumed run that measured nothing new for this task keeps the confirmation rounds its
    # records already hold (their groups are marked CONFIRM_GROUP) and only completes them
    done = 0
    if tuner.trials == 0:
        done = len({r.group for _, r in tuner.history if r.group.startswith(CONFIRM_GROUP)})
    if done >= rounds:
        return
    measure = create_measure_batch(option)
    for k in range(done, rounds):
        order = picks if k % 2 == 0 else picks[::-1]
        inputs = [MeasureInput(tuner.task.target, tuner.task, space.get(i)) for i in order]
        results = measure(inputs)
        for res in results:
            if res.group:
                res.group = CONFIRM_GROUP + res.group
        save_records(records, list(zip(inputs, results)))
        for inp, res in zip(inputs, results):
            tuner.history.append((inp.config, res))
            if res.ok and res.mean < tuner.best_cost:
                tuner.best_cost, tuner.best_config = res.mean, inp.config


def _tune_task(info: TaskInfo, n: int, k: int, num_tasks: int, tuner: str, option: dict,
               history: list, records: str, deadline: float | None, trials_left: int,
               seed: int, per_call: bool, confirm: int, confirm_rounds: int,
               early_stopping: int | None, progress: bool) -> tuple[int, int, float]:
    """Tune one task with ``n`` trials (the ``k``-th of ``num_tasks``), taking its share of the
    time left before ``deadline`` in proportion to ``n`` over ``trials_left``; returns
    ``(trials, errors, best cost)``."""
    from .tuner import TUNERS
    kw = {} if tuner == "grid" else {"seed": seed}
    if tuner == "xgb":  # refit often enough for the model to steer small budgets
        kw["plan_size"] = min(32, max(8, n // 4))
    tnr = TUNERS[tuner](info.task, **kw)
    done = tnr.load_history(history)
    task_deadline = deadline
    if deadline is not None:  # the time left is shared like the trials
        share = max(0, n - done) / max(1, trials_left - done)
        task_deadline = time.monotonic() + (deadline - time.monotonic()) * share
    cbs = [log_to_file(records)]
    if progress:
        cbs.append(progress_bar(prefix=f"[{k + 1}/{num_tasks}] {info.op[:28]}"))
    with_default = info.task.name in DEFAULT_FIRST
    initial = [info.task.config_space.get(0)] if with_default else []
    anchor = initial[0] if initial and per_call else None
    tnr.tune(max(0, n - done), option, early_stopping=early_stopping, callbacks=cbs,
             deadline=task_deadline, initial=initial, anchor=anchor)
    if with_default and confirm:
        confirm_best(tnr, option, records, top=confirm, rounds=confirm_rounds)
    return tnr.trials + done, tnr.errors, tnr.best_cost


#: (option, smallest value, what it means) of ``tune_model``'s counts; ``None`` is always fine
_LIMITS = {"trials": ("--trials", 0, "the measurement budget over all tasks (0 measures only "
                      "the untuned kernels)"),
           "max_tasks": ("--max-tasks", 1, "the number of heaviest tasks to tune (omit it "
                         "for all)"),
           "confirm": ("--confirm", 0, "configurations re-measured per rule task (0 = off)"),
           "measure_threads": ("--measure-threads", 1, "threads the candidates are timed with "
                               "(omit it for the target's)"),
           "time_budget": ("--time-budget", 1e-9, "seconds of measuring (omit it for no "
                           "limit)"),
           "early_stopping": ("--early-stopping", 1, "trials without improvement before a "
                              "task stops (omit it to use the whole budget)")}


def _check_counts(**values) -> None:
    """Refuse an out-of-range count before any tuning (``TuningError`` naming the option)."""
    for name, v in values.items():
        flag, lo, what = _LIMITS[name]
        if v is not None and v < lo:
            low = f"a value of at least {lo}" if lo >= 1 or lo == 0 else "a positive value"
            raise TuningError(f"{name} ({flag}) is {v}: it is {what}; give {low}")


def tune_model(model: Any, target: "str | Target" = "llvm", trials: int = 200,
               tuner: str = "xgb", records: "str | os.PathLike | None" = None,
               dask: Any = None, shapes: Mapping[str, Sequence[int]] | None = None,
               early_stopping: int | None = None, timeout: float = 10.0, repeat: int = 3,
               min_trials: int = 8, progress: bool = True, max_tasks: int | None = None,
               seed: int = 0, time_budget: float | None = None, number: int = 2,
               log=print, template: str | None = None, per_call: bool = False, confirm: int = 0,
               confirm_rounds: int = 2, cache_flush: bool = True,
               measure_threads: int | None = None, algorithms: bool = True,
               model_check: int = 8, margin: float = 0.02, check_top: int = 12) -> TuneSummary:
    """Tune every tunable kernel of ``model`` (ONNX path/ModelProto, or ``(mod, params)``).

    Args:
        target: the target to tune for (records are per target).
        trials: total measurement budget over all tasks (resumed records count toward it).
        tuner: ``xgb``, ``ga``, ``random``, ``grid`` (template tuners) or ``search``
            (template-free: sketches + evolutionary search + task scheduler).
        records: JSON-lines file appended to (and resumed from); default ``<model>.tune.jsonl``
            for a path, else ``tune.jsonl``.
        dask: a dask scheduler address or ``distributed.Client``: measure on its workers.
        max_tasks: tune only the heaviest ``max_tasks`` tasks.
        time_budget: stop measuring after this many seconds (the summary still follows); template
            tuners give each task a share of the time in proportion to its trials.
        timeout, repeat, number: per-candidate run time-out (s), timed repeats, calls per
            repeat.
        log: where the summary lines go (``print``; ``None`` for silence).
        template: ``"rule"`` (``None``: the default): kernels whose default schedule rule has
            knobs are tuned over those knobs (``rule`` tasks), the others with ``tile``;
            ``"tile"``: all with ``tile`` (see ``extract_tasks``). Template tuners only:
            ``tuner="search"`` has no templates and refuses one.
        early_stopping: stop a task after this many trials in a row without improvement
            (every tuner, ``search`` included).
        per_call: time each call alone and keep the fastest, the candidates of a batch
            side by side with their calls interleaved (see ``LocalRunner``); robust on a
            machine shared with other work.
        measure_threads: threads the candidates are timed with (default: the target's). On
            a machine shared with other busy processes a pool worker is often not scheduled
            and a 2-thread time flips between two modes; 1 thread ranks the single-core
            efficiency of the candidates without that noise.
        cache_flush: flush the CPU caches before each timed call (``False``: warm caches, as
            a kernel finds its input right after the kernel that produced it).
        confirm, confirm_rounds: after tuning a ``rule`` task, its ``confirm`` fastest
            configurations and the default (configuration 0) are measured again,
            interleaved, ``confirm_rounds`` times, so the default and the candidates are
            compared under the same machine load (0: no confirmation).
        algorithms: also tune the algorithm of each Winograd-eligible convolution (direct,
            F(2x2), F(4x4): ``conv_algo`` tasks, tuned first, their candidates on top of
            ``trials``); ``False`` keeps the ``WinogradConv`` heuristic's choices.
        model_check: rounds of the in-model check (``ember.tune.model_check``): the kernels
            the records replace are timed inside the running model against the defaults,
            and a tuned task that is not faster there keeps its default schedule; 0 skips
            it. ``TuneSummary.in_model`` holds its results. A resumed run that finds the
            records as the last check left them reuses its outcome (``RECORDS.check.json``).
        margin: the speed-up over the default the in-model check keeps a tuned task at (give
            ``apply_history_best`` the same, so its report says what the build applies).
        check_top: candidate configurations per task the in-model check times (the one the
            records would apply, then the next best timed alone). Timed alone on one thread,
            a configuration's rank says little about its time inside the model on two: on
            ResNet-50 the in-model winners of the stride-2 3x3 convolution (1.15x) and of the
            Winograd products (1.04x) ranked 5th-12th alone, so 12 are checked (tuning wall
            time 150 -> 204 s).

    Returns:
        A ``TuneSummary`` (``.table()`` prints the per-task table).

    Raises:
        TuningError: unknown tuner, a ``template`` given with ``tuner="search"``, a negative
            ``model_check``, ``trials`` or ``confirm``, ``max_tasks``, ``measure_threads`` or
            ``early_stopping`` below 1, a ``time_budget`` not positive (all refused before tuning), or a model without
            tunable kernels.
    """
    from .tuner import TUNERS
    if tuner not in TUNERS and tuner != "search":
        raise TuningError(f"unknown tuner {tuner!r}: choose one of "
                          f"{sorted(TUNERS) + ['search']}")
    if tuner == "search" and template is not None:
        raise TuningError(f"template (--template) {template!r} does not apply to the "
                          f"template-free search (--tuner search derives its programs from "
                          f"each kernel); drop --template, or use a template tuner (--tuner "
                          f"xgb, ga, random or grid) to tune with it")
    template = template or "rule"
    if model_check < 0:  # refused before tuning, not after it
        raise TuningError(f"model_check (--model-check) is {model_check}: give the rounds of the "
                          f"in-model check (at least 2 to count as evidence), or 0 to skip it")
    if model_check and check_top < 1:
        raise TuningError(f"check_top (--check-top) is {check_top}: the in-model check times at "
                          f"least the one configuration the records would apply; give 1 or more")
    _check_counts(trials=trials, max_tasks=max_tasks, confirm=confirm,
                  measure_threads=measure_threads, time_budget=time_budget,
                  early_stopping=early_stopping)
    target = Target(target)
    t0 = time.perf_counter()
    if records is None:
        records = default_records(model)
    records = os.fspath(records)
    mod, params = load_model(model, shapes)
    algo_checked: list = []  # the in-model check of the algorithm choices (below)
    tasks = extract_tasks(mod, params, target, include_all=tuner == "search", template=template,
                          algorithms=algorithms and tuner != "search")
    if max_tasks:  # the heaviest kernel tasks (algorithm tasks are few and all kept)
        tasks = [t for t in tasks if t.op != "conv_algo"][:max_tasks] + \
            [t for t in tasks if t.op == "conv_algo"]
    option = _make_option(target, dask, timeout, repeat, number, per_call, cache_flush,
                          measure_threads)
    deadline = time.monotonic() + time_budget if time_budget else None
    # what this run counts as measured: records timed with its thread count (or an unknown
    # one); a candidate timed with another count is measured again and its time not ranked
    threads = measured_threads(option["runner"], target)
    history = at_threads(load_records(records), threads)
    summary = TuneSummary(records=records)
    if log:
        log(f"tuning {len(tasks)} tasks for {target} with {tuner}, {trials} trials, "
            f"records {records}")
    try:
        if tuner == "search":
            from .search import tune_tasks_search
            results = tune_tasks_search(tasks, trials, option, history, records, progress, seed,
                                        target=target, deadline=deadline,
                                        early_stopping=early_stopping)
        else:
            results = []
            algos = [t for t in tasks if t.task.name == "conv_algo"]
            kernels = [t for t in tasks if t.task.name != "conv_algo"]
            if algos:  # algorithms first: the kernel tasks are those of the chosen algorithms
                n_algo = [len(t.task.config_space) for t in algos]
                # a few candidates each, each a whole convolution: not held to a trial share,
                # but to a share of the time (its candidates over those left, kernels' included)
                results = [_tune_task(info, n, k, len(tasks), tuner, option, history, records,
                                      deadline, sum(n_algo[k:]) + trials, seed, per_call,
                                      confirm, confirm_rounds, early_stopping, progress)
                           for k, (info, n) in enumerate(zip(algos, n_algo))]
                if model_check:  # the choices are final before their kernels are tuned
                    from .model_check import check_algorithms
                    algo_checked = check_algorithms(mod, params, Target(target), records,
                                                    rounds=model_check, repeat=5,
                                                    margin=margin, seed=0)
                from .dispatch import ApplyHistoryBest
                with ApplyHistoryBest(list(load_records(records)), margin=margin):
                    kernels = extract_tasks(mod, params, target, template=template,
                                            algorithms=False)
                if max_tasks:
                    kernels = kernels[:max_tasks]
            else:
                kernels = tasks
            alloc = allocate_trials(kernels, trials, min_trials)
            for k, (info, n) in enumerate(zip(kernels, alloc)):
                results.append(_tune_task(info, n, len(algos) + k, len(algos) + len(kernels),
                                          tuner, option, history, records, deadline,
                                          sum(alloc[k:]), seed, per_call, confirm,
                                          confirm_rounds, early_stopping, progress))
            # the summary lists the kernel tasks first, as extract_tasks does
            tasks = kernels + algos
            results = results[len(algos):] + results[:len(algos)]
        # read once: the loop below appends only "default" records (for tasks without one)
        measured = at_threads(load_records(records), threads)
        for info, (n, errors, best) in zip(tasks, results):
            ref_task = info.task
            if ref_task is None:
                from .search import SearchTask
                ref_task = SearchTask(info.func, target)
            # the untuned kernel's time: recorded by an earlier run (resumed) with the same
            # thread count, else measured (a time taken with other threads is no baseline)
            known = [r for r in measured if r.task_key == ref_task.key and r.kind == "default"
                     and r.ok and r.result.costs and r.target == str(target)
                     and r.result.threads == threads]
            if known:
                ref = min((r.result for r in known), key=lambda x: x.mean)
            elif ref_task.name != "conv_algo":
                ref = measure_reference(ref_task, option)
                if ref.ok:
                    save_records(records, [(MeasureInput(target, ref_task, None), ref)])
            else:
                ref = MeasureResult([], MeasureErrorNo.UNKNOWN_ERROR)
            untuned = ref.mean
            if ref_task.name in DEFAULT_FIRST:  # configuration 0 is the untuned one
                recs = [r for r in measured if r.task_key == ref_task.key]
                untuned = min([untuned] + [r.cost for r in recs if r.ok and r.kind == "config"
                                           and r.config["index"] == 0 and not is_in_model(r)
                                           and r.result.threads == threads])
                paired = best_paired_speedup(
                    paired_speedups(recs).get((ref_task.key, str(target)), {}))
                if paired:  # side-by-side evidence: the best median speed-up over the default
                    best = untuned / paired[1]
            summary.tasks.append(TaskSummary(info.key, info.op, info.count, info.flop / 1e9,
                                             n, errors, untuned, best))
    finally:
        close = getattr(option["runner"], "close", None)
        if close:
            close()
    if model_check:
        from .model_check import check_in_model
        summary.in_model = algo_checked + check_in_model(
            mod, params, target, records, rounds=model_check, margin=margin, top=check_top,
            reuse=True, algorithms=False)
    summary.wall_s = time.perf_counter() - t0
    if log:
        log(summary.table())
        if model_check:
            from .model_check import format_results
            log(format_results(summary.in_model))
        log(f"tuned in {summary.wall_s:.1f} s; build with "
            f"`with ember.tune.apply_history_best({records!r}): ember.compile(...)`")
    return summary
