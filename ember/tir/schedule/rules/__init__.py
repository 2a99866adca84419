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
from .gemm import gemm_rule
from .generic import generic_rule
from .pooling import pooling_rule

ScheduleRule = Callable[[PrimFunc, Target], "Schedule | None"]

RULES: dict[str, list] = {
    "llvm": [gemm_rule, pooling_rule, generic_rule],
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


__all__ = ["RULES", "schedule_default", "gemm_rule", "generic_rule", "pooling_rule"]
