"""Running a plan with symbolic dimensions: one compiled model, any input sizes.

A plan built from a graph with symbolic dimensions (``ember.tir.symbolic``) records slot
shapes as dimension text (``"(batch * seq)"``), the symbols' declared bounds
(``plan["symbols"]``), each arena slot's lifetime (``plan["lifetimes"]``) and, per step, the
symbols its kernel takes as trailing ``int64`` arguments (``step["symbols"]``). At each run the
``SymbolicRunner`` binds the symbols from the input shapes (``bind_shapes``: inputs that
contradict a symbol or its bounds raise ``ShapeMismatchError`` naming them), evaluates every
slot's size, places the intermediates with the same liveness planner as a static plan
(``memory_plan.plan_memory``; the layout is cached per set of symbol values), grows the arena
when a run needs more, calls the kernels and shapes the outputs. Nothing is compiled at run
time.
"""

from __future__ import annotations

import ctypes
from typing import Mapping

import numpy as np

from ..errors import InputError
from ..tir.symbolic import bind_shapes, evaluate, parse_dim
from .memory_plan import ALIGN, plan_memory


def is_symbolic_plan(plan: dict) -> bool:
    """True for a plan with symbolic dimensions (``plan["symbols"]``)."""
    return bool(plan.get("symbols"))


def _dims(shape) -> tuple:
    return tuple(parse_dim(d) if isinstance(d, str) else int(d) for d in shape)


class SymbolicRunner:
    """The per-run part of ``GraphExecutor`` for a symbolic plan (see the module doc).

    Args:
        executor: the ``GraphExecutor`` (its library, weights, thread count and input specs).
    """

    def __init__(self, executor):
        self.ex = executor
        plan = executor.plan
        self.bounds = {k: (int(v[0]), None if v[1] is None else int(v[1]))
                       for k, v in plan["symbols"].items()}
        self.shapes = [_dims(s["shape"]) for s in plan["slots"]]
        self.lifetimes = [tuple(int(x) for x in t) for t in plan["lifetimes"]]
        self.steps = []
        for st in plan["steps"]:
            fn = getattr(executor.lib, st["symbol"])
            names = list(st.get("symbols", ()))
            fn.restype = ctypes.c_int32
            fn.argtypes = [ctypes.c_void_p] * len(st["args"]) + [ctypes.c_int64] * len(names)
            self.steps.append((fn, list(st["args"]), names, st))
        self._layouts: dict = {}
        self.arena = None
        self.layouts_planned = 0

    def _layout(self, env: dict) -> tuple[dict, int]:
        key = tuple(sorted(env.items()))
        got = self._layouts.get(key)
        if got is None:
            slots = self.ex.plan["slots"]
            sizes = [int(np.prod([evaluate(d, env) for d in self.shapes[s]], dtype=np.int64))
                     * np.dtype(_np(slots[s]["dtype"])).itemsize for s, _, _ in self.lifetimes]
            offs, total = plan_memory([(n, f, la) for n, (_, f, la) in zip(sizes, self.lifetimes)])
            got = ({s: o for (s, _, _), o in zip(self.lifetimes, offs)}, total)
            if len(self._layouts) < 64:  # a bounded cache of layouts by symbol values
                self._layouts[key] = got
            self.layouts_planned += 1
        return got

    def run(self, arrays: list) -> list[np.ndarray]:
        """Run on bound input ``arrays`` (in input order; dtypes checked by the executor).

        Raises:
            ShapeMismatchError: input shapes that contradict a symbol, its bounds or a static
                dimension.
            EmberError: a kernel failed (names the node)."""
        from .executor import hugepage_empty, kernel_failure
        ex = self.ex
        specs = ex.input_specs
        env = bind_shapes([(d["name"], self.shapes[d["slot"]]) for d in specs],
                          {d["name"]: a.shape for d, a in zip(specs, arrays)}, self.bounds)
        offsets, total = self._layout(env)
        if self.arena is None or self.arena.nbytes < total:
            self.arena = hugepage_empty(max(total, ALIGN))
        base = self.arena.ctypes.data
        ptr = list(ex._ptr)
        for s, off in offsets.items():
            ptr[s] = base + off
        for d, a in zip(specs, arrays):
            ptr[d["slot"]] = a.ctypes.data if a.nbytes else base
        ex.apply_num_threads()
        for fn, args, names, st in self.steps:
            rc = fn(*[ptr[a] for a in args], *[env[n] for n in names])
            if rc != 0:
                raise kernel_failure(st, rc)
        outs = []
        for o in ex.output_specs:
            s = o["slot"]
            slot = ex.plan["slots"][s]
            shape = tuple(evaluate(d, env) for d in self.shapes[s])
            dt = np.dtype(_np(slot["dtype"]))
            if slot["kind"] == "arena":
                n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
                outs.append(self.arena[offsets[s]:offsets[s] + n].view(dt).reshape(shape).copy())
            elif slot["kind"] == "param":
                outs.append(ex._params[slot["param"]].copy())
            else:
                k = next(i for i, d in enumerate(specs) if d["slot"] == s)
                outs.append(arrays[k].copy())
        return outs


def bind_symbolic_inputs(specs: list, inputs) -> list[np.ndarray]:
    """The input arrays of one run in input order, C-contiguous, dtypes checked (shapes are
    checked against the symbols by ``SymbolicRunner.run``).

    Raises:
        InputError: unknown, missing or extra inputs, or a wrong dtype."""
    names = [d["name"] for d in specs]
    if isinstance(inputs, Mapping):
        unknown = [k for k in inputs if k not in names]
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise InputError(f"inputs {sorted(inputs)} do not match the model's inputs {names}"
                             f" (unknown: {unknown}, missing: {missing})")
        values = [inputs[n] for n in names]
    else:
        values = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(values) != len(specs):
            raise InputError(f"expected {len(specs)} input(s) {names}, got {len(values)}")
    out = []
    for d, v in zip(specs, values):
        a = np.asarray(v)
        want = np.dtype(_np(d["dtype"]))
        if a.dtype != want:
            raise InputError(f"input {d['name']!r}: expected dtype {want}, got {a.dtype} "
                             f"(convert with .astype(np.{want}))")
        out.append(a if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(a.shape))
    return out


def _np(dtype: str):
    from ..dtypes import np_dtype
    return np_dtype(dtype)
