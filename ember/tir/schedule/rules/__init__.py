"""Default (untuned) schedules: per target, a list of rules ``apply(func, target) -> Schedule |
None``; the first rule that returns a schedule wins (``None``: not applicable).

    from ember.tir.schedule.rules import schedule_default
    func = schedule_default(func, target)   # scheduled PrimFunc; attrs["schedule_rule"] names it

A rule that hits a ``ScheduleError`` on an unexpected kernel shape counts as not applicable, so
a kernel always gets at least the generic fallback (parallel outer loop, vectorized inner loop).
"""

from __future__ import annotations

from typing import Callable

from ....errors import ScheduleError
from ....target import Target
from ...stmt import PrimFunc
from ..schedule import Schedule
from .attention import attention_rule
from .cuda_tensorcore import cuda_tensorcore_rule, tensorcore_knobs
from .depthwise import depthwise_rule
from .gemm import gemm_knobs, gemm_rule
from .generic import generic_rule
from .gpu import gpu_fallback_rule, gpu_gemm_rule, gpu_row_reduction_rule
from .inverted_residual import inverted_residual_rule
from .pooling import pooling_rule
from .qnn import qnn_knobs, qnn_rule
from .row_reduction import row_reduction_rule
from .winograd import winograd_rule

ScheduleRule = Callable[[PrimFunc, Target], "Schedule | None"]

RULES: dict[str, list] = {
    "llvm": [qnn_rule, attention_rule, inverted_residual_rule, winograd_rule, depthwise_rule, gemm_rule, pooling_rule,
             row_reduction_rule, generic_rule],
    # GPU targets: docs/gpu.md, "Writing a GPU rule"
    "webgpu": [gpu_gemm_rule, gpu_row_reduction_rule, gpu_fallback_rule],
    "cuda": [cuda_tensorcore_rule, gpu_gemm_rule, gpu_row_reduction_rule, gpu_fallback_rule],
}


def schedule_default(func: PrimFunc, target: "Target | str" = "llvm",
                     rules: list | None = None) -> PrimFunc:
    """``func`` scheduled by the first applicable rule of ``target`` (or of ``rules``); the
    result's ``attrs`` hold ``schedule_rule`` (its name) and ``schedule_trace`` (JSON)."""
    target = Target(target)
    for rule in (rules if rules is not None else RULES.get(target.kind, RULES["llvm"])):
        try:
            sch = rule(func, target)
        except ScheduleError:
            sch = None
        except (IndexError, KeyError, ValueError, AttributeError, TypeError) as e:
            # a rule bug must not break compilation: record it and fall through
            func.attrs.setdefault("schedule_notes", []).append(
                f"{rule.__name__}: {type(e).__name__}: {e}")
            sch = None
        if sch is not None:
            out = sch.func
            out.attrs["schedule_rule"] = rule.__name__
            out.attrs["schedule_trace"] = sch.trace.to_json()
            return out
    return func


# rules whose own decisions are tunable: rule name -> knobs(func, target) -> {knob: [values]}
# with the rule's default decision first in every list (``gemm_rule`` documents the knobs)
RULE_KNOBS: dict = {"gemm_rule": gemm_knobs, "cuda_tensorcore_rule": tensorcore_knobs,
                    "qnn_rule": qnn_knobs}


def rule_knobs(func: PrimFunc, target: "Target | str" = "llvm") -> "tuple[str, dict] | None":
    """``(rule name, {knob: [values]})`` of the rule that schedules ``func`` by default, when
    that rule exposes tuning knobs with more than one configuration; else ``None``."""
    target = Target(target)
    out = schedule_default(func, target)
    name = out.attrs.get("schedule_rule") if out is not func else None
    knobs_of = RULE_KNOBS.get(name)
    if knobs_of is None:
        return None
    try:
        knobs = knobs_of(func, target)
    except ScheduleError:
        return None
    if not knobs or all(len(v) <= 1 for v in knobs.values()):
        return None
    return name, knobs


def schedule_config(func: PrimFunc, target: "Target | str", rule: str, cfg: dict) -> PrimFunc:
    """``func`` scheduled by the default rule named ``rule`` with its decisions overridden by
    ``cfg`` (see ``rule_knobs``); ``attrs`` as ``schedule_default`` sets them plus
    ``schedule_config``.

    Raises:
        ScheduleError: unknown rule, a ``cfg`` the rule cannot apply to ``func``, or a rule
            that does not apply to ``func``.
    """
    target = Target(target)
    fn = {r.__name__: r for rs in RULES.values() for r in rs}.get(rule)
    if fn is None or rule not in RULE_KNOBS:
        raise ScheduleError(f"schedule_config: rule {rule!r} has no tuning knobs (known: "
                            f"{sorted(RULE_KNOBS)})")
    sch = fn(func, target, cfg=dict(cfg))
    if sch is None:
        raise ScheduleError(f"schedule_config: {rule} does not apply to kernel {func.name}")
    out = sch.func
    out.attrs["schedule_rule"] = rule
    out.attrs["schedule_trace"] = sch.trace.to_json()
    out.attrs["schedule_config"] = dict(cfg)
    return out


__all__ = ["RULES", "attention_rule", "RULE_KNOBS", "rule_knobs", "schedule_config", "schedule_default",
           "depthwise_rule", "gemm_knobs", "gemm_rule", "generic_rule", "gpu_fallback_rule", "gpu_gemm_rule",
           "gpu_row_reduction_rule", "pooling_rule",
           "row_reduction_rule", "winograd_rule"]
