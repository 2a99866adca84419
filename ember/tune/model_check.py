"""The in-model check: tuned kernels timed inside the running model before they are kept.

A candidate is timed alone: one kernel, caches flushed, often on one thread. That ranks the
candidates of a task, but it is not how the kernel runs. Inside the model the kernel finds its
input in L2, where the kernel before left it; its weights come from a weight arena on huge
pages, and every core is busy. A configuration that won alone can lose there. On ResNet-50,
the tuned kernels were 1.02x faster summed over the tasks timed alone, but the model was 0.98x
as fast end to end.

``check_in_model`` builds the model twice, with the records applied and without them. It times
every kernel inside each running model (the step-by-step executor, the two models alternating
for ``rounds`` rounds). Then, for every ``rule`` task whose kernels the records replaced, it
appends the task's summed in-model time, tuned and default, to the records. Each round is one
repeat of one interleaved group whose id starts with ``records.MODEL_GROUP``.
``ApplyHistoryBest`` treats that evidence as decisive: a task keeps its tuned configuration
only when the configuration was at least ``margin`` faster inside the model.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..target import Target
from .measure import MeasureErrorNo, MeasureInput, MeasureResult
from .records import MODEL_GROUP, load_records, save_records

logger = logging.getLogger("ember.tune")


@dataclass
class InModelResult:
    """The in-model check of one tuned task.

    Attributes:
        task_key: the ``rule`` task.
        op: the operator of its kernels.
        kernels: how many kernel launches of the model run it.
        default_ms, tuned_ms: their summed in-model time per run (median over rounds, ms).
        speedup: median over rounds of default / tuned (> 1: the tuned kernels are faster).
        kept: whether ``apply_history_best`` now applies the tuned configuration.
    """

    task_key: str
    op: str
    kernels: int
    default_ms: float
    tuned_ms: float
    speedup: float
    kept: bool


class _ConfigJSON:
    """A configuration's record JSON, as ``records.encode`` reads it (``to_json()``)."""

    def __init__(self, d: dict):
        self.d = d

    def to_json(self) -> dict:
        return self.d


def check_in_model(mod, params: Mapping[str, np.ndarray] | None, target: "str | Target",
                   records: str, rounds: int = 6, repeat: int = 5, margin: float = 0.02,
                   seed: int = 0) -> list[InModelResult]:
    """Time the kernels that the records in ``records`` replace inside the running model, tuned
    vs default, and append the evidence to ``records`` (see the module doc).

    Args:
        mod, params: the model as ``ember.build`` takes it.
        target: the target the records were tuned for; its thread count is the one timed.
        rounds: interleaved rounds. Each round is one repeat of the evidence, and
            ``apply_history_best`` wants at least 2.
        repeat: runs per round; each kernel's median over them counts.
        margin: the speed-up over the default that keeps a tuned configuration, as in
            ``apply_history_best``.

    Returns:
        One ``InModelResult`` per tuned ``rule`` task. The list is empty when the records
        replace no kernel, or when the tuned model's kernels do not line up one to one with
        the default model's (an algorithm record changed the graph; nothing is written then).

    Raises:
        TuningError: a malformed records file. Build errors propagate as from ``ember.build``.
    """
    from ..driver import build
    from .dispatch import ApplyHistoryBest
    from .task import Task
    target = Target(target)
    default = build(mod, target, params)
    with ApplyHistoryBest(list(load_records(records)), margin=margin) as ctx:
        tuned = build(mod, target, params)
    groups: dict[str, list] = {}  # task key -> [(step index, record)]
    for name, rec in ctx.replaced:
        if rec.task_name == "rule" and name.startswith("k") and name[1:].isdigit():
            groups.setdefault(rec.task_key, []).append((int(name[1:]), rec))
    if not groups:
        return []
    steps_d, steps_t = default.plan["steps"], tuned.plan["steps"]
    if [s["name"] for s in steps_d] != [s["name"] for s in steps_t]:
        logger.warning("in-model check skipped: the tuned model's kernels differ from the "
                       "default model's (an algorithm record changed the graph)")
        return []
    inputs = default.random_inputs(seed)
    times = {"default": [], "tuned": []}
    models = {"default": default, "tuned": tuned}
    for r in range(rounds):
        for which in (("default", "tuned") if r % 2 == 0 else ("tuned", "default")):
            per_step = models[which]._executor.time_steps(inputs, repeat=repeat)
            times[which].append([s["ms"] for s in per_step])
    out, pairs = [], []
    group = f"{MODEL_GROUP}{uuid.uuid4().hex[:12]}"
    now = time.time()
    for key, members in groups.items():
        idx = sorted({k for k, _ in members})
        rec = members[0][1]
        d = [sum(t[k] for k in idx) / 1e3 for t in times["default"]]  # seconds per round
        u = [sum(t[k] for k in idx) / 1e3 for t in times["tuned"]]
        speed = float(np.median([a / b for a, b in zip(d, u) if b > 0]))
        task = Task(rec.task_name, rec.task_args, target)
        cfg0 = task.config_space.get(0).to_json()
        for cfg, costs in ((cfg0, d), (rec.config, u)):
            pairs.append((MeasureInput(target, task, _ConfigJSON(cfg)),
                          MeasureResult(costs, MeasureErrorNo.NO_ERROR, all_cost=sum(costs),
                                        timestamp=now, group=group)))
        out.append(InModelResult(key, steps_d[idx[0]]["op"], len(idx),
                                 float(np.median(d)) * 1e3, float(np.median(u)) * 1e3, speed,
                                 speed >= 1.0 + margin))
    save_records(records, pairs)
    return out


def format_results(results: list[InModelResult]) -> str:
    """The in-model check as text, one line per tuned task."""
    if not results:
        return "in-model check: no tuned kernel to check"
    kept = sum(r.kept for r in results)
    lines = [f"in-model check: {kept} of {len(results)} tuned tasks kept (their kernels timed "
             f"inside the running model, tuned vs default, interleaved)"]
    for r in sorted(results, key=lambda r: -r.default_ms):
        lines.append(f"  {r.op[:32]:32s} x{r.kernels:<2d} {r.default_ms:7.3f} -> "
                     f"{r.tuned_ms:7.3f} ms ({r.speedup:.2f}x) "
                     f"{'kept' if r.kept else 'default restored'}")
    return "\n".join(lines)
