"""The in-model check: tuned kernels timed inside the running model before they are kept.

A candidate is timed alone: one kernel, caches flushed, often on one thread. That ranks the
candidates of a task, but it is not how the kernel runs. Inside the model the kernel finds its
input in L2, where the kernel before left it; its weights come from a weight arena on huge
pages, and every core is busy. A configuration that won alone can lose there. On ResNet-50,
the tuned kernels were 1.02x faster summed over the tasks timed alone, but the model was 0.98x
as fast end to end.

``check_in_model`` first checks the algorithm choices (``check_algorithms``: each recorded
``conv_algo`` choice that is not the heuristic's, the whole model timed with and without it).
Then it takes, for every ``rule`` task the records have side-by-side evidence for,
up to ``top`` candidate configurations: the one ``apply_history_best`` would apply, then the
next best timed alone. It builds the model with the records but every such task on its
default schedule (the algorithms and the other tasks as the records choose, so the graphs line
up), and once per candidate rank (variant ``j`` runs every task's ``j``-th candidate), times
every kernel inside each running model (the step-by-step executor, the models alternating for
``rounds`` rounds), and appends, per task, the summed in-model time of its kernels for the
default and for each candidate to the records: each round is one repeat of one interleaved
group whose id starts with ``records.MODEL_GROUP``. ``ApplyHistoryBest`` treats that evidence as decisive: a task runs
the configuration that was fastest inside the model, and only when it was at least ``margin``
faster than the default there.

``tune_model`` checks with ``reuse=True``: a resumed run that measured nothing new finds the
records file as the last check left it and reuses that check's outcome (kept in
``RECORDS.check.json``) instead of timing the model again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..errors import TuningError
from ..target import Target
from .measure import MeasureErrorNo, MeasureInput, MeasureResult
from .records import (MODEL_GROUP, is_in_model, load_records, one_thread_count, paired_speedups,
                      save_records)

logger = logging.getLogger("ember.tune")


@dataclass
class InModelResult:
    """The in-model check of one tuned task.

    Attributes:
        task_key: the ``rule`` task.
        op: the operator of its kernels.
        kernels: how many kernel launches of the model run it.
        default_ms, tuned_ms: their summed in-model time per run (median over rounds, ms).
        speedup: median over rounds of default / tuned (> 1: the tuned kernels are faster),
            for the configuration that was fastest in the model.
        kept: whether ``apply_history_best`` now applies a tuned configuration.
        candidates: how many configurations were timed in the model.
        workload: the workload key of its kernels (``TaskSummary.name`` of the task).
    """

    task_key: str
    op: str
    kernels: int
    default_ms: float
    tuned_ms: float
    speedup: float
    kept: bool
    candidates: int = 1
    workload: str = ""


#: candidates timed alone at least this fast relative to the default are worth timing in the
#: model (ResNet-50: configurations 0.97-1.0x alone were up to 1.1x faster in the model)
MIN_ALONE_SPEEDUP = 0.95


def _candidates(records: list, ctx, target: str, top: int) -> dict[str, list]:
    """Per ``rule`` task with side-by-side evidence from candidates timed alone: the records of
    up to ``top`` configurations to time in the model, best first. The configuration ``ctx``
    applies comes first; then come those with the best median speed-up over the default (any
    number of repeats: one batch timed with the default is enough to rank), down to
    ``MIN_ALONE_SPEEDUP``."""
    configs = {}
    for r in records:
        if r.ok and r.kind == "config" and isinstance(r.config, dict) and r.target == target \
                and r.task_name == "rule" and not is_in_model(r):
            configs.setdefault((r.task_key, r.config.get("index")), r)
    rule_keys = {k for k, _ in configs}
    out: dict[str, list] = {}
    for (key, tgt), per in paired_speedups(records).items():
        if tgt != target or key not in rule_keys:
            continue
        chosen = ctx.paired.get((key, tgt), (None, 0.0))[0]
        picked = [chosen] if chosen is not None else []
        ranked = sorted(((float(np.median(v)), i) for i, v in per.items()
                         if v and i != 0), reverse=True)
        for speed, i in ranked:
            if len(picked) >= top or speed < MIN_ALONE_SPEEDUP:
                break
            r = configs.get((key, i))
            if r is not None and all(x.config.get("index") != i for x in picked):
                picked.append(r)
        if picked:
            out[key] = picked
    return out


def check_in_model(mod, params: Mapping[str, np.ndarray] | None, target: "str | Target",
                   records: str, rounds: int = 6, repeat: int = 5, margin: float = 0.02,
                   seed: int = 0, top: int = 4, reuse: bool = False,
                   algorithms: bool = True) -> list[InModelResult]:
    """Time the tuned kernels of ``records`` inside the running model against the defaults and
    append the evidence to ``records`` (see the module doc).

    Up to ``top`` configurations of every tuned ``rule`` task are timed: the one
    ``apply_history_best`` would apply, then the next best by their side-by-side speed-up
    timed alone. Model variant ``j`` runs every task's ``j``-th candidate, so ``1 + top``
    builds cover all the tasks.

    Args:
        mod, params: the model as ``ember.build`` takes it.
        target: the target the records were tuned for; its thread count is the one timed.
        rounds: interleaved rounds. Each round is one repeat of the evidence, and
            ``apply_history_best`` wants at least 2.
        repeat: runs per round; each kernel's median over them counts.
        margin: the speed-up over the default that keeps a tuned configuration, as in
            ``apply_history_best``.
        top: candidate configurations per task.
        algorithms: also check the recorded algorithm choices not checked before
            (``check_algorithms``; ``tune_model`` checks them itself, right after tuning
            them, so that the kernel tasks it tunes next are those of the final choices).
        reuse: when the records file is byte for byte the one an earlier check (with the same
            model, target, thread count, rounds, repeat, margin, seed and top) left behind,
            return that check's results without timing anything (``tune_model`` resuming a
            finished run). The outcome is kept in a side file, ``records + ".check.json"``;
            a changed records file or setting times the model again.

    Returns:
        One ``InModelResult`` per task timed, for its best configuration in the model. The
        list is empty when no task has a candidate, or when a variant's kernels do not line up
        one to one with the default model's (nothing is written to ``records`` then).

    Raises:
        TuningError: a malformed records file, or ``rounds`` / ``repeat`` below 1. Build
            errors propagate as from ``ember.build``.
    """
    if rounds < 1 or repeat < 1:
        raise TuningError(f"the in-model check needs rounds >= 1 and repeat >= 1 (got rounds="
                          f"{rounds}, repeat={repeat}); rounds >= 2 count as evidence")
    target = Target(target)
    settings = {"rounds": rounds, "repeat": repeat, "margin": margin, "seed": seed, "top": top}
    if reuse:
        prev = load_outcome(mod, params, target, records, settings)
        if prev is not None:
            logger.info("in-model check: reusing the outcome of the check of these records")
            return prev
    out = (check_algorithms(mod, params, target, records, rounds, repeat, margin, seed)
           if algorithms else [])
    out += _run_check(mod, params, target, records, rounds, repeat, margin, seed, top)
    if reuse:
        save_outcome(mod, params, target, records, settings, out)
    return out


def outcome_path(records: str) -> str:
    """The side file of ``records`` that keeps its last in-model check's outcome."""
    return os.fspath(records) + ".check.json"


def _outcome_key(mod, params, target: Target, records: str, settings: dict) -> str:
    """A digest of everything the check's outcome depends on: the records file's bytes (its
    in-model evidence included), the model's graph (weights by name, dtype and shape), the
    target (with its thread count), the machine's core count and the check's settings."""
    from ..graph.text import print_module
    h = hashlib.sha256()
    try:
        with open(records, "rb") as f:
            h.update(f.read())
    except FileNotFoundError:
        pass
    h.update(print_module(mod, max_const_elems=16).encode())
    for name in sorted(params or {}):
        a = np.asarray(params[name])
        h.update(f"{name}:{a.dtype}:{a.shape}".encode())
    h.update(json.dumps([str(target), target.num_threads, os.cpu_count(), settings],
                        sort_keys=True).encode())
    return h.hexdigest()


def load_outcome(mod, params, target: Target, records: str, settings: dict
                 ) -> list[InModelResult] | None:
    """The results of the check that left ``records`` as it is now with these settings
    (``None``: no such check, or an unreadable side file; the check then runs again)."""
    try:
        with open(outcome_path(records), encoding="utf-8") as f:
            d = json.load(f)
        if d.get("key") != _outcome_key(mod, params, target, records, settings):
            return None
        return [InModelResult(**r) for r in d["results"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save_outcome(mod, params, target: Target, records: str, settings: dict,
                 results: list[InModelResult]) -> None:
    """Keep ``results`` in ``records``' side file, keyed by the records as the check left
    them (see ``_outcome_key``)."""
    d = {"key": _outcome_key(mod, params, target, records, settings),
         "results": [dataclasses.asdict(r) for r in results]}
    try:
        with open(outcome_path(records), "w", encoding="utf-8") as f:
            json.dump(d, f)
    except OSError as e:  # only costs a re-check on resume
        logger.warning("could not keep the in-model check's outcome in %s (%s)",
                       outcome_path(records), e)


def _step_times(models: list, rounds: int, repeat: int, seed: int) -> list[list[list]]:
    """Per model, per round, its kernels' times in ms (``time_steps``: median over ``repeat``
    runs) on the first model's seeded random inputs, the models alternating forward and
    backward in ``rounds`` interleaved rounds."""
    inputs = models[0].random_inputs(seed)
    times: list[list] = [[] for _ in models]
    for r in range(rounds):
        for k in (range(len(models)) if r % 2 == 0 else reversed(range(len(models)))):
            times[k].append([s["ms"] for s in models[k]._executor.time_steps(inputs, repeat)])
    return times


def _mark_kept(out: list[InModelResult], records: str, tgt: str, margin: float) -> None:
    """Set each result's ``kept``: what a build now applies, the evidence just appended to
    ``records`` pooled with earlier checks' (or, with fewer than ``min_evidence`` rounds in
    the model, the evidence of the candidates alone)."""
    from .dispatch import ApplyHistoryBest
    final = ApplyHistoryBest(list(load_records(records)), margin=margin)
    for r in out:
        r.kept = final.paired.get((r.task_key, tgt), (None, 0.0))[0] is not None


def check_algorithms(mod, params, target: Target, records: str, rounds: int, repeat: int,
                      margin: float, seed: int) -> list[InModelResult]:
    """The in-model check of the algorithm choices (``conv_algo`` tasks): each choice the
    records would apply that is not the heuristic's is timed in the model, the model with every
    recorded choice against the same model with that one convolution back on the heuristic's
    algorithm (the kernels differ -- a Winograd convolution is three kernels, a direct one is
    one -- so the whole model's summed kernel time is compared, in interleaved rounds). The
    evidence is appended to ``records`` like the rule tasks' (configuration 0 = the heuristic's
    choice), so ``apply_history_best`` keeps a choice only where it was at least ``margin``
    faster in the model. (Timed alone on one thread, ResNet-18's stage-1 F(4x4) products ranked
    1.05x faster than the heuristic's choice; in the model they made it 0.89x as fast.) A
    choice that already has in-model evidence is not timed again.

    Returns:
        One ``InModelResult`` per choice timed (``op`` ``"conv_algo"``; ``default_ms`` and
        ``tuned_ms`` are whole-model sums of kernel times, ms); empty when none was to time.
    Raises:
        TuningError: a malformed records file. Build errors propagate as from ``ember.build``.
    """
    from ..driver import build
    from .dispatch import ApplyHistoryBest
    from .space import ConfigEntity
    from .task import Task
    tgt = str(target)
    recs = one_thread_count(load_records(records))
    ctx = ApplyHistoryBest(recs, margin=margin)
    checked = set(paired_speedups(recs, in_model=True))  # decided by an earlier check
    chosen = {}
    for r in recs:
        if r.task_name == "conv_algo" and r.target == tgt and r.task_key not in chosen \
                and (r.task_key, tgt) not in checked:
            rec = ctx.choose(r.task_key, tgt)
            if rec is not None and isinstance(rec.config, dict) and rec.config.get("index") != 0:
                chosen[r.task_key] = rec
    if not chosen:
        return []

    def reverted(key: str | None) -> ApplyHistoryBest:
        c = ApplyHistoryBest(recs, margin=margin)
        if key is not None:
            c.paired[(key, tgt)] = (None, 0.0)  # the heuristic's algorithm for this one
        return c
    models = []
    for key in [None] + list(chosen):
        with reverted(key):
            models.append(build(mod, target, params))
    totals = [[sum(step_ms) / 1e3 for step_ms in per_round]
              for per_round in _step_times(models, rounds, repeat, seed)]
    out, pairs = [], []
    run = f"{MODEL_GROUP}{uuid.uuid4().hex[:12]}"
    now = time.time()
    for n, (key, rec) in enumerate(chosen.items()):
        task = Task(rec.task_name, rec.task_args, target)
        d, u = totals[n + 1], totals[0]  # the heuristic's algorithm here / the recorded one
        speed = float(np.median([a / b for a, b in zip(d, u) if b > 0]))
        for cfg, costs in ((task.config_space.get(0), d),
                           (ConfigEntity.from_json(rec.config, task.config_space), u)):
            pairs.append((MeasureInput(target, task, cfg),
                          MeasureResult(costs, MeasureErrorNo.NO_ERROR, all_cost=sum(costs),
                                        timestamp=now, group=f"{run}:a{n}")))
        out.append(InModelResult(key, "conv_algo", 0,
                                 float(np.median(d)) * 1e3, float(np.median(u)) * 1e3, speed,
                                 False, 1, str(task.args[0])))
    save_records(records, pairs)
    _mark_kept(out, records, tgt, margin)
    return out


def _run_check(mod, params, target: Target, records: str, rounds: int, repeat: int,
               margin: float, seed: int, top: int) -> list[InModelResult]:
    """The check itself (``check_in_model`` without the reuse)."""
    from ..driver import build
    from .dispatch import ApplyHistoryBest
    from .space import ConfigEntity
    from .task import Task
    tgt = str(target)
    recs = one_thread_count(load_records(records))  # the times apply_history_best reads
    cands = _candidates(recs, ApplyHistoryBest(recs, margin=margin), tgt, top)
    if not cands:
        return []

    def forced(j: int | None) -> ApplyHistoryBest:
        """The records, with every candidate task running its ``j``-th candidate (``None``
        or none left: its default); the rest (algorithm choices, other tasks) as recorded,
        so every variant has the default model's graph and kernels."""
        ctx = ApplyHistoryBest(recs, margin=margin)
        for key, picked in cands.items():
            ctx.paired[(key, tgt)] = (picked[j] if j is not None and j < len(picked) else None,
                                      0.0)
        return ctx

    with forced(None):
        default = build(mod, target, params)
    names = [s["name"] for s in default.plan["steps"]]
    variants = []  # (model, {task key: (record, [step index])})
    for j in range(max(len(v) for v in cands.values())):
        with forced(j) as ctx:
            model = build(mod, target, params)
        if [s["name"] for s in model.plan["steps"]] != names:
            logger.warning("in-model check skipped: a tuned model's kernels differ from the "
                           "default model's")
            return []
        steps: dict[str, tuple] = {}
        for name, rec in ctx.replaced:
            if rec.task_key in cands and name.startswith("k") and name[1:].isdigit():
                steps.setdefault(rec.task_key, (rec, []))[1].append(int(name[1:]))
        variants.append((model, steps))
    models = [default] + [m for m, _ in variants]
    times = _step_times(models, rounds, repeat, seed)
    out, pairs = [], []
    run = f"{MODEL_GROUP}{uuid.uuid4().hex[:12]}"
    now = time.time()
    for n, key in enumerate(cands):
        group = f"{run}:{n}"  # one group per task: paired_speedups pairs within a task
        timed = [steps[key] + (j,) for j, (_, steps) in enumerate(variants) if key in steps]
        if not timed:
            continue
        task = Task(timed[0][0].task_name, timed[0][0].task_args, target)
        idx = sorted(set(timed[0][1]))
        d = [sum(t[k] for k in idx) / 1e3 for t in times[0]]  # seconds, per round
        entries = [(task.config_space.get(0), d)]
        best = None
        for rec, _, j in timed:
            u = [sum(t[k] for k in idx) / 1e3 for t in times[j + 1]]
            speed = float(np.median([a / b for a, b in zip(d, u) if b > 0]))
            # (the build replayed this record, so it fits the space)
            entries.append((ConfigEntity.from_json(rec.config, task.config_space), u))
            if best is None or speed > best[0]:
                best = (speed, u)
        for cfg, costs in entries:
            pairs.append((MeasureInput(target, task, cfg),
                          MeasureResult(costs, MeasureErrorNo.NO_ERROR, all_cost=sum(costs),
                                        timestamp=now, group=group)))
        out.append(InModelResult(key, default.plan["steps"][idx[0]]["op"], len(idx),
                                 float(np.median(d)) * 1e3, float(np.median(best[1])) * 1e3,
                                 best[0], best[0] >= 1.0 + margin, len(timed),
                                 str(task.args[0])))
    save_records(records, pairs)
    _mark_kept(out, records, tgt, margin)
    return out


def format_results(results: list[InModelResult]) -> str:
    """The in-model check as text, one line per tuned task."""
    if not results:
        return ("in-model check: no tuned kernel or algorithm choice to check (it times rule "
                "tasks with side-by-side evidence and recorded conv_algo choices)")
    kept = sum(r.kept for r in results)
    lines = [f"in-model check: {kept} of {len(results)} tasks tuned (their kernels timed inside "
             f"the running model against the default, interleaved; best of the candidates)"]
    for r in sorted(results, key=lambda r: (r.op != "conv_algo", -r.default_ms)):
        if r.op == "conv_algo":  # whole-model times: the kernels differ between algorithms
            lines.append(f"  {'conv_algo (whole model)':35s} {r.default_ms:7.3f} -> "
                         f"{r.tuned_ms:7.3f} ms ({r.speedup:.2f}x) "
                         f"{'algorithm kept' if r.kept else 'heuristic kept'}")
            continue
        lines.append(f"  {r.op[:32]:32s} x{r.kernels:<2d} {r.default_ms:7.3f} -> "
                     f"{r.tuned_ms:7.3f} ms ({r.speedup:.2f}x, best of {r.candidates}) "
                     f"{'tuned' if r.kept else 'default kept'}")
    return "\n".join(lines)
