"""The compiler driver: ``build`` (graph IR -> compiled model) and ``compile`` (ONNX -> compiled
model), tying the layers together: the target's graph pass pipeline (under the current
``PassContext``) -> graph lowering (one kernel per operator or fused group) -> C codegen ->
shared library -> execution plan with a static memory plan."""

from __future__ import annotations

import os
import time
from typing import Mapping, Sequence

import numpy as np

from .codegen.build import build_library
from .codegen.module import generate_c_module
from .graph.ir import Constant, IRModule, Var
from .graph.lower import kernel_args, lower_binding
from .graph.passes import PassContext, optimize
from .runtime.memory_plan import plan_memory
from .runtime.module import CompiledModel
from .target import Target
from .tune.dispatch import apply_best_schedules


def _plan(func, params: Mapping[str, np.ndarray], symbols: Sequence[str],
          output_names: Sequence[str] | None = None):
    """Execution plan for ``func`` whose i-th binding runs kernel ``symbols[i]``; graph outputs
    are named ``output_names`` (the names before the passes) when given."""
    slots: list[dict] = []
    slot_of: dict[int, int] = {}
    bound = dict(params)
    inputs = []

    def new_slot(v, kind, **kw):
        slots.append({"shape": list(v.type.shape), "dtype": v.type.dtype, "kind": kind,
                      "offset": None, "param": None, **kw})
        slot_of[id(v)] = len(slots) - 1
        return len(slots) - 1

    for p in func.params:
        if p.name in params:
            new_slot(p, "param", param=p.name)
        else:
            s = new_slot(p, "input")
            inputs.append({"name": p.name, "shape": list(p.type.shape), "dtype": p.type.dtype,
                           "slot": s})

    def slot(v) -> int:
        if id(v) not in slot_of:
            if isinstance(v, Constant):
                name = f"__const{len(bound)}"
                bound[name] = v.data
                new_slot(v, "param", param=name)
            else:
                raise KeyError(v)
        return slot_of[id(v)]

    steps, first, last = [], {}, {}
    for k, b in enumerate(func.bindings):
        for o in b.outputs:
            s = new_slot(o, "arena")
            first[s] = k
            last[s] = k
        args = [slot(a) for a in kernel_args(b)]
        for s in args:
            if s in last:
                last[s] = max(last[s], k)
        steps.append({"symbol": symbols[k], "args": args, "op": b.call.op,
                      "name": b.outputs[0].name})
    outputs = []
    for k, o in enumerate(func.outputs):
        s = slot(o)
        if s in last:
            last[s] = len(steps)
        name = output_names[k] if output_names else (o.name if isinstance(o, Var)
                                                      else f"output{k}")
        outputs.append({"name": name, "slot": s})
    arena_slots = sorted(first)
    offsets, total = plan_memory([(_nbytes(slots[s]), first[s], last[s]) for s in arena_slots])
    for s, off in zip(arena_slots, offsets):
        slots[s]["offset"] = off
    plan = {"inputs": inputs, "outputs": outputs, "slots": slots, "steps": steps,
            "arena_bytes": total}
    return plan, bound


def _nbytes(slot: dict) -> int:
    from .dtypes import itemsize
    item = itemsize(slot["dtype"])
    return int(np.prod(slot["shape"], dtype=np.int64)) * item


def build(mod: IRModule, target: "str | Target" = "llvm",
          params: Mapping[str, np.ndarray] | None = None) -> CompiledModel:
    """Compile ``mod["main"]`` for ``target``; function parameters named in ``params`` are bound
    as weights, the others are the model's run-time inputs.

    The target's pass pipeline (``ember.graph.passes.PIPELINES``) runs first, under the current
    ``PassContext`` (``with ember.PassContext(opt_level=3): ember.build(...)``; default
    opt_level 2). ``info`` of the result reports ``num_bindings`` (operators before the passes)
    and ``num_kernels`` (kernel launches after fusion).

    Raises:
        UnsupportedOpError / LoweringError: an operator cannot be lowered (names the binding).
        ToolchainError: no C compiler. CodegenError: the C compiler failed.
    """
    target = Target(target)
    t0 = time.perf_counter()
    num_imported = len(mod.main.bindings)
    output_names = list(mod.main.attrs.get("output_names") or
                        [o.name if isinstance(o, Var) else f"output{k}"
                         for k, o in enumerate(mod.main.outputs)])
    mod, params = optimize(mod, target, params)
    t_passes = time.perf_counter()
    func = mod.main
    kernels = [lower_binding(b, f"k{k}", mod) for k, b in enumerate(func.bindings)]
    kernels = apply_best_schedules(kernels, target)  # tuning records, when a context is active
    t_lower = time.perf_counter()
    source, symbols = generate_c_module(kernels, target)
    t_codegen = time.perf_counter()
    lib = build_library(source, target.mcpu)
    t_cc = time.perf_counter()
    plan, bound = _plan(func, params, symbols, output_names)
    ctx = PassContext.current()
    info = {"num_bindings": num_imported, "num_kernels": len(kernels), "opt_level": ctx.opt_level,
            "passes_s": t_passes - t0,
            "num_unique_kernels": len(set(symbols)), "arena_bytes": plan["arena_bytes"],
            "lower_s": t_lower - t_passes, "codegen_s": t_codegen - t_lower, "cc_s": t_cc - t_codegen}
    model = CompiledModel(lib, plan, bound, mod.text(), str(target), info, source,
                          target.num_threads)
    model.info["compile_s"] = time.perf_counter() - t0
    return model


def compile(model, target: "str | Target" = "llvm",  # noqa: A001 - the public verb
            shapes: Mapping[str, Sequence[int]] | None = None) -> CompiledModel:
    """Compile an ONNX model (path, bytes or ``onnx.ModelProto``) to a runnable model.

    Example::

        m = ember.compile("resnet50.onnx", target="llvm -mcpu=native")
        y, = m.run({"data": x})

    Raises:
        ModelLoadError, UnsupportedOpError, ShapeMismatchError, ToolchainError, CodegenError.
    """
    from .frontend.onnx import from_onnx
    t0 = time.perf_counter()
    mod, params = from_onnx(model, shapes=shapes)
    t1 = time.perf_counter()
    compiled = build(mod, target, params)
    compiled.info["import_s"] = t1 - t0
    compiled.info["compile_s"] = time.perf_counter() - t0
    if isinstance(model, (str, os.PathLike)):
        compiled.info["model"] = os.fspath(model)
    return compiled
