"""Cutting a graph function into compiled segments with host steps between them.

An executor that runs some bindings outside compiled code (the distributed executor's
collectives, the NPU target's offloaded layers) cuts ``main`` at each such binding: every run of
ordinary bindings between two host bindings becomes a ``Segment`` (its own ``Function``, whose
parameters are the values it reads from earlier steps or the caller and whose outputs are the
values later steps or the function's outputs read), built once; the host bindings stay as they
are, in order. ``cut_function`` does the cutting, the executor builds and runs the pieces.
"""

from __future__ import annotations

import time
from typing import Callable

from .ir import Binding, Function, Var

__all__ = ["Segment", "cut_function", "later_uses", "run_items"]


class Segment:
    """One compiled run of bindings: ``func`` (parameters ``inputs``, outputs ``outputs``,
    graph ``Var``s of the enclosing function) and the ``model`` an executor built for it."""

    def __init__(self, func: Function, inputs: list, outputs: list, model=None):
        self.func, self.inputs, self.outputs, self.model = func, inputs, outputs, model


def later_uses(func: Function) -> list:
    """``later[i]``: ids of the values read by bindings ``i..`` of ``func`` or returned."""
    bs = func.bindings
    later = [set() for _ in range(len(bs) + 1)]
    later[-1] = {id(o) for o in func.outputs if isinstance(o, Var)}
    for i in range(len(bs) - 1, -1, -1):
        later[i] = later[i + 1] | {id(a) for a in bs[i].call.args if isinstance(a, Var)}
    return later


def _segment(run: list, later: set) -> Segment:
    defined = {id(o) for _, b in run for o in b.outputs}
    seen, inputs = set(), []
    for _, b in run:
        for a in b.call.args:
            if isinstance(a, Var) and id(a) not in defined and id(a) not in seen:
                seen.add(id(a))
                inputs.append(a)
    outputs = [o for _, b in run for o in b.outputs if id(o) in later]
    func = Function(inputs, [b for _, b in run], outputs, "main",
                    {"output_names": [o.name for o in outputs]})
    return Segment(func, inputs, outputs)


def cut_function(func: Function, is_host: Callable[[Binding], bool]) -> list:
    """``func``'s bindings as an ordered list of ``Segment``s (runs of bindings for which
    ``is_host`` is false; ``model`` not built yet) and the host ``Binding``s between them."""
    later = later_uses(func)
    items: list = []
    run: list = []
    for i, b in enumerate(func.bindings):
        if is_host(b):
            if run:
                items.append(_segment(run, later[run[-1][0] + 1]))
                run = []
            items.append(b)
        else:
            run.append((i, b))
    if run:
        items.append(_segment(run, later[run[-1][0] + 1]))
    return items


def run_items(items: list, env: dict, host: Callable) -> tuple[float, float]:
    """Run ``items`` in order on ``env`` (``{id(Var): array}``, updated in place): a
    ``Segment`` through its ``model.run``, any other item by ``host(item, env)``, which returns
    the value of the item's single output ``item.outputs[0]``. Returns ``(seconds in segments,
    seconds in host steps)``."""
    seg_s = host_s = 0.0
    for item in items:
        t0 = time.perf_counter()
        if isinstance(item, Segment):
            outs = item.model.run({a.name: env[id(a)] for a in item.inputs})
            for o, arr in zip(item.outputs, outs):
                env[id(o)] = arr
            seg_s += time.perf_counter() - t0
            continue
        env[id(item.outputs[0])] = host(item, env)
        host_s += time.perf_counter() - t0
    return seg_s, host_s
