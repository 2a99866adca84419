"""Task extraction: the distinct tunable kernels of a model, with their weights.

A model is optimized by the target's pass pipeline (fusion included, as ``ember.build`` does),
each binding is lowered to its kernel, and every kernel the ``tile`` template can schedule (one
reduction stage: convolutions, matmul/dense, pooling, with fused epilogues) becomes a workload
identified by ``workload_key(func)``: the operator plus a digest of the untuned kernel's code, so
equal kernels anywhere in the model (or in another model) are one task. Workloads live in a
process-wide cache keyed by that digest (``register_workload``), which is how records name a
kernel without storing it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..codegen.c import emit_c_function
from ..errors import ScheduleError, TuningError
from ..target import Target
from ..tir.stmt import PrimFunc, Store
from .task import Task
from .templates import has_rule_space
from .tiling import as_reduction_nest

_WORKLOADS: dict[str, PrimFunc] = {}


def workload_key(func: PrimFunc) -> str:
    """``"<op>:<digest>"`` of a kernel: equal untuned kernels get equal keys."""
    text = emit_c_function(func, "KERNEL")
    return f"{kernel_op(func)}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def kernel_op(func: PrimFunc) -> str:
    """The operator or fused-group name of a kernel, without its instance number."""
    return re.sub(r"_\d+$", "", str(func.attrs.get("op", "kernel")).lstrip("@"))


def register_workload(func: PrimFunc) -> str:
    """Remember ``func`` under its ``workload_key`` (returned)."""
    key = workload_key(func)
    _WORKLOADS.setdefault(key, func)
    return key


def get_workload(key: str) -> PrimFunc:
    """The kernel registered as ``key``.

    Raises:
        TuningError: unknown key (extract the model's tasks first in this process).
    """
    try:
        return _WORKLOADS[key]
    except KeyError:
        raise TuningError(f"workload {key} is not known in this process: extract the model's "
                          f"tasks (ember.tune.extract_tasks) before tuning or replaying it") \
            from None


def is_tunable(func: PrimFunc) -> bool:
    """True when the ``tile`` template can schedule ``func``."""
    try:
        as_reduction_nest(func)
        return True
    except ScheduleError:
        return False


@dataclass
class TaskInfo:
    """A distinct tunable kernel of a model.

    Attributes:
        task: the ``tile`` task, or ``None`` for a kernel only the template-free search can
            schedule (see ``extract_tasks(include_all=True)``).
        op: the operator or fused group it implements.
        count: how many times the model runs it.
        flops: FLOPs of one run times ``count``: its share of the model's work.
        func: the untuned kernel (``None`` for a ``conv_algo`` task).
        key: its workload key (the task key for a ``conv_algo`` task).
    """

    task: Task | None
    op: str
    count: int
    flops: float
    func: PrimFunc | None
    key: str = ""

    @property
    def flop(self) -> float:
        """FLOPs of one run."""
        return self.flops / self.count


def model_kernels(mod, params: Mapping[str, np.ndarray] | None, target: "str | Target"
                  ) -> list[PrimFunc]:
    """The kernels ``ember.build`` would generate for ``mod`` (after the pass pipeline), in
    execution order."""
    from ..graph.lower import constant_args, lower_binding
    from ..graph.passes import optimize
    mod, params = optimize(mod, Target(target), dict(params or {}))
    out = []
    for k, b in enumerate(mod.main.bindings):
        func = lower_binding(b, f"k{k}", mod)
        func.attrs["constant_params"] = constant_args(b, params)  # as ember.build marks them
        out.append(func)
    return out


def extract_tasks(mod, params: Mapping[str, np.ndarray] | None = None,
                  target: "str | Target" = "llvm", include_all: bool = False,
                  template: str = "rule", algorithms: bool = True) -> list[TaskInfo]:
    """The distinct tunable workloads of ``mod`` for ``target``, heaviest (total FLOPs) first.
    With ``template="rule"`` (the default) a kernel whose default schedule rule exposes knobs
    (``ember.tir.schedule.rules.rule_knobs``: the GEMM rule's register tile, loop order,
    reduction blocking, parallel fusion) becomes a ``rule`` task ``[key, target]``, the others
    ``tile`` tasks; ``template="tile"`` makes every tunable kernel a ``tile`` task.
    With ``include_all``, every kernel with loops is listed (elementwise, softmax...: the
    template-free search can still parallelize and vectorize them); their ``task`` is ``None``.
    With ``algorithms`` (the default), each distinct Winograd-eligible convolution also
    becomes a ``conv_algo`` task (``ember.tune.strategy``: direct vs F(2x2) vs F(4x4); op
    ``"conv_algo"``, ``func`` ``None``, FLOPs those of the direct convolution), listed after
    the kernel tasks (heaviest first among themselves). The kernel tasks
    are those of the algorithms the ``WinogradConv`` pass picks now: the heuristic's, or a
    recorded choice inside ``apply_history_best``.

    Raises:
        TuningError: the model has no tunable kernel. Lowering errors propagate as from
        ``ember.build``.
    """
    target = Target(target)
    found: dict[str, TaskInfo] = {}
    from ..graph.passes.winograd import algorithm_scope, current_chooser
    from .features import count_flops
    convs: list[list] = []
    outer = current_chooser()

    def collect(workload, default, tgt):
        convs.append(workload)
        return outer(workload, default, tgt) if outer is not None else None
    from .dispatch import current
    records = current()
    counted = records.algorithms_applied if records is not None else 0
    with algorithm_scope(collect):
        kernels = model_kernels(mod, params, target)
    if records is not None:  # extracting is not a build: its choices count in the builds only
        records.algorithms_applied = counted
    algos: dict[str, TaskInfo] = {}
    for wl in convs if algorithms else ():
        task = Task("conv_algo", wl, target)
        if task.key in algos:
            algos[task.key].count += 1
            algos[task.key].flops += task.flop
        else:
            algos[task.key] = TaskInfo(task, "conv_algo", 1, task.flop, None, task.key)
    for func in kernels:
        key = register_workload(func)
        if key in found:
            found[key].count += 1
            found[key].flops += found[key].flop
            continue
        ruled = template == "rule" and has_rule_space(key, target)
        tunable = ruled or is_tunable(func)
        if not tunable and not (include_all and not isinstance(func.body, Store)):
            continue
        task = (Task("rule", [key, str(target)], target) if ruled else
                Task("tile", [key], target) if tunable else None)
        flop = task.flop if task is not None else count_flops(func)
        found[key] = TaskInfo(task, kernel_op(func), 1, flop, func, key)
    if not found:
        raise TuningError("the model has no tunable kernel (no convolution, matmul, dense or "
                          "pooling)")
    return sorted(found.values(), key=lambda t: -t.flops) + \
        sorted(algos.values(), key=lambda t: -t.flops)
