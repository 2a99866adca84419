"""The compiler driver: ``build`` (graph IR -> compiled model) and ``compile`` (ONNX -> compiled
model), tying the layers together: the target's graph pass pipeline (under the current
``PassContext``) -> graph lowering (one kernel per operator or fused group) -> C codegen ->
shared library -> execution plan with a static memory plan."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Mapping, Sequence

import numpy as np

from .codegen.aot import (AOT_SYMBOL, SYMBOLIC_AOT_SYMBOL, generate_aot_entry,
                          generate_symbolic_aot_entry, symbolic_aot_symbols)
from .codegen.build import StreamedBuild, build_jobs, build_library, prefetch_compiler_info
from .codegen.module import UnitStream, generate_c_units
from .graph.ir import Constant, IRModule, Var
from .graph.lower import constant_args, kernel_args, kernel_inputs, lower_binding
from .graph.passes import PassContext, optimize, register_config
from .runtime.memory_plan import plan_memory
from .runtime.module import CompiledModel
from .errors import LoweringError
from .target import Target
from .tir.stmt import PrimFunc
from .tir.text import structural_key
from .tune.dispatch import apply_best_schedules
from .tune.features import count_flops


SCHEDULE_LEVEL = register_config(
    "schedule.level", int,
    "default schedules: 0 = naive loop nests, 1 = rules with scalar micro-kernels (tiling, "
    "packed weights, parallel loops), 2 = rules with SIMD micro-kernels (the default)")


def _block_written(kernel: PrimFunc, buf) -> bool:
    """True when ``kernel`` (unscheduled) writes ``buf`` only inside tensor-expression blocks,
    whose accesses (and the schedules built on them) follow ``buf.strides``. Hand-built kernels
    (``ops.imperative``: gathers, int8 convolutions, fused inverted-residual blocks, attention)
    compute some addresses themselves and keep their dense outputs."""
    from .tir.schedule.analysis import stmt_children
    from .tir.stmt import Block, KernelCall, Store
    seen = [False]

    def visit(x) -> bool:
        if isinstance(x, Block):
            seen[0] = True
            return True
        if isinstance(x, Store) and x.buffer is buf:
            return False
        if isinstance(x, KernelCall) and any(w is buf for w in x.writes):
            return False
        return all(visit(c) for c in stmt_children(x))
    return visit(kernel.body) and seen[0]


def concat_in_place(func, kernels: Sequence[PrimFunc]) -> tuple[dict, set]:
    """Concatenations whose inputs are written in place: each producing kernel stores straight
    into its slice of the concatenation's buffer, and the concatenation runs no kernel
    (SqueezeNet's fire modules: the 1x1 and the 3x3 expand convolutions into one tensor).

    ``kernels[k]`` is the (unscheduled) kernel of ``func.bindings[k]``. A ``concatenate`` of
    static shape qualifies when every input is the single output of an earlier kernel that is
    not itself a graph output, an in-place concatenation, or an input of another one, and
    either its slice is contiguous (all dims before the axis are 1: other consumers read it
    as an ordinary tensor) or the concatenation is its only use, and whose kernel writes its
    output only in tensor-expression blocks (``_block_written``); the producer's output buffer
    then takes the concatenation's row-major strides (``Buffer.strides``, recorded in the
    kernel's ``attrs["strided_output"]`` so it is keyed apart from the dense program).
    Call before scheduling: schedules read the output strides (micro-kernel row strides).

    Returns ``(views, skip)``: ``views`` maps ``id(producer output)`` to ``(concatenation
    output Var, element offset of the slice)``; ``skip`` holds the indices of the in-place
    concatenations' bindings."""
    producer: dict[int, int] = {}
    uses: dict[int, int] = {}
    for k, b in enumerate(func.bindings):
        for o in b.outputs:
            producer[id(o)] = k
        for a in kernel_inputs(b.call):
            uses[id(a)] = uses.get(id(a), 0) + 1
    outs = {id(o) for o in func.outputs}
    views: dict[int, tuple] = {}
    skip: set[int] = set()
    for k, b in enumerate(func.bindings):
        if b.call.is_function_call or b.call.op != "concatenate" or len(b.outputs) != 1:
            continue
        out = b.outputs[0]
        shape = out.type.shape
        if not all(isinstance(d, int) for d in shape) or id(out) in views:
            continue
        axis = int(b.call.attrs["axis"]) % len(shape)
        dense = int(np.prod(shape[:axis], dtype=np.int64)) == 1
        strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
        args = list(b.call.args)
        ok = len({id(a) for a in args}) == len(args)
        for a in args:
            j = producer.get(id(a)) if isinstance(a, Var) else None
            if not ok or j is None or j in skip or len(func.bindings[j].outputs) != 1 \
                    or id(a) in outs or id(a) in views \
                    or (not dense and uses.get(id(a), 0) != 1) \
                    or kernels[j].attrs.get("symbols") or kernels[j].attrs.get("strided_output"):
                ok = False
                break
            buf = kernels[j].params[-1]
            if tuple(buf.shape) != tuple(a.type.shape) or buf.dtype != a.type.dtype \
                    or buf.strides is not None or not _block_written(kernels[j], buf):
                ok = False
        if not ok:
            continue
        off = 0
        for a in args:
            j = producer[id(a)]
            if not dense:
                kernels[j].params[-1].strides = tuple(strides)
                kernels[j].attrs["strided_output"] = list(strides)
            views[id(a)] = (out, off * strides[axis])
            off += a.type.shape[axis]
        skip.add(k)
    return views, skip


def _plan(func, params: Mapping[str, np.ndarray], symbols: Sequence[str],
          output_names: Sequence[str] | None = None, kernels: Sequence | None = None,
          align: int = 64, nbytes=None, views: Mapping | None = None,
          skip: set | None = None):
    """Execution plan for ``func`` whose i-th binding runs kernel ``symbols[i]``; graph outputs
    are named ``output_names`` (the names before the passes) when given. ``align`` and
    ``nbytes(slot)`` (bytes of a slot) set the arena layout (the WebGPU runtime: 256, 32-bit
    storage words). ``views``/``skip`` (``concat_in_place``, static plans only): a value in
    ``views`` is an arena slot inside its base's slot (at the element offset), the base live
    from its first writer on; the bindings in ``skip`` run no step."""
    views = views or {}
    skip = skip or set()
    base_of: dict[int, int] = {}  # view slot -> the slot it lies in
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
            if id(o) in slot_of:  # an in-place concatenation: placed by its first writer
                continue
            if id(o) in views:
                base, off = views[id(o)]
                if id(base) not in slot_of:
                    bs = new_slot(base, "arena")
                    first[bs] = last[bs] = k
                s = new_slot(o, "arena", view_of=slot_of[id(base)], view_offset=int(off))
                base_of[s] = slot_of[id(base)]
                continue
            s = new_slot(o, "arena")
            first[s] = k
            last[s] = k
        if k in skip:
            continue
        args = [slot(a) for a in kernel_args(b)]
        if kernels is not None:
            args = _packed_args(kernels[k], args, slots, bound)
        for s in args:
            s = base_of.get(s, s)
            if s in last:
                last[s] = max(last[s], k)
        steps.append({"symbol": symbols[k], "args": args, "op": b.call.op,
                      "name": b.outputs[0].name})
        if kernels is not None and kernels[k].attrs.get("index_checks"):
            steps[-1]["index_checks"] = [{"what": c["what"], "bounds": c["bounds"]}
                                         for c in kernels[k].attrs["index_checks"]]
    outputs = []
    for k, o in enumerate(func.outputs):
        s = slot(o)
        if base_of.get(s, s) in last:
            last[base_of.get(s, s)] = len(func.bindings)
        name = output_names[k] if output_names else (o.name if isinstance(o, Var)
                                                      else f"output{k}")
        outputs.append({"name": name, "slot": s})
    arena_slots = sorted(first)
    symbolic = _symbolic_slots(slots, inputs)
    if symbolic:  # sizes known per run: the runtime places the slots (runtime.symbolic_run)
        offsets, total = [None] * len(arena_slots), 0
    else:
        offsets, total = plan_memory([((nbytes or _nbytes)(slots[s]), first[s], last[s])
                                      for s in arena_slots], align=align)
    for s, off in zip(arena_slots, offsets):
        slots[s]["offset"] = off
    for s, b in base_of.items():  # views: inside their base slot
        slots[s]["offset"] = slots[b]["offset"] + slots[s]["view_offset"] * \
            np.dtype(slots[s]["dtype"]).itemsize
    plan = {"inputs": inputs, "outputs": outputs, "slots": slots, "steps": steps,
            "arena_bytes": total}
    if symbolic:
        plan["symbols"] = {n: list(b) for n, b in func.attrs.get("symbol_bounds", {}).items()}
        for n in symbolic:
            plan["symbols"].setdefault(n, [0, None])
        plan["lifetimes"] = [[s, first[s], last[s]] for s in arena_slots]
        if kernels is not None:
            for st, k in zip(steps, kernels):
                if k.attrs.get("symbols"):
                    st["symbols"] = list(k.attrs["symbols"])
    used = {slots[a]["param"] for st in steps for a in st["args"]} | \
        {slots[o["slot"]]["param"] for o in outputs}
    for s in slots:  # weights only their packed copies use are dropped
        if s["kind"] == "param" and s["param"] not in used:
            s["kind"], s["param"] = "unused", None
    bound = {k: v for k, v in bound.items() if k in used}
    return plan, bound


def _symbolic_slots(slots: list, inputs: list) -> list[str]:
    """The symbols of a plan's slot shapes (sorted; none for a static plan); symbolic dims are
    written as their text (``"(batch * seq)"``) so the plan stays JSON."""
    from .tir.symbolic import dim_str, is_symbolic, symbols_of
    names = sorted({n for s in slots for n in symbols_of(s["shape"])})
    if names:
        for s in list(slots) + list(inputs):
            s["shape"] = [dim_str(d) if is_symbolic(d) else int(d) for d in s["shape"]]
    return names


def _packed_args(kernel, args: list, slots: list, bound: dict) -> list:
    """``args`` with each weight the kernel's schedule re-laid out (``param_layouts``) replaced
    by a slot holding the packed copy (packed once, here, at compile time)."""
    layouts = kernel.attrs.get("param_layouts") if kernel is not None else None
    if not layouts:
        return args
    from .tir.schedule import IndexMap
    args = list(args)
    for j, lay in sorted(layouts.items()):
        j = int(j)
        src = slots[args[j]]
        if src["kind"] != "param":
            raise LoweringError(f"kernel {kernel.name}: its schedule re-lays out argument {j}, "
                                f"which is not a compile-time constant")
        name = packed_name(src["param"], lay["index_map"])
        if name not in bound:  # packed when the weight arena is laid out (``_bind_weights``)
            bound[name] = _Packed(np.asarray(bound[src["param"]]),
                                  IndexMap.from_json(lay["index_map"]))
        shape = list(bound[name].shape)
        found = [i for i, s in enumerate(slots) if s["kind"] == "param" and s["param"] == name]
        if found:
            args[j] = found[0]
        else:
            slots.append({"shape": shape, "dtype": src["dtype"], "kind": "param",
                          "offset": None, "param": name})
            args[j] = len(slots) - 1
    return args


def packed_name(param: str, index_map_json: str) -> str:
    """The name of ``param``'s copy packed by the layout transform ``index_map_json``
    (``IndexMap.to_json``): ``NAME@packed`` + a digest of the transform's text, the same in
    every process (Python's ``hash`` is salted per process), so a model compiled twice names
    its weights alike."""
    digest = hashlib.blake2b(index_map_json.encode(), digest_size=5).hexdigest()
    return f"{param}@packed{digest}"


class _Packed:
    """A weight a schedule re-lays out (``param_layouts``), not packed yet: ``_bind_weights``
    writes ``imap.apply_numpy(src)`` straight into the weight arena, so compiling never holds
    a packed copy beside the arena."""

    def __init__(self, src: np.ndarray, imap):
        self.src, self.imap = src, imap
        self.shape = tuple(imap.new_shape(src.shape))

    def array(self, out: np.ndarray | None = None) -> np.ndarray:
        return self.imap.apply_numpy(self.src, out=out)


def _bind_weights(plan: dict, bound: dict) -> dict:
    """``bound`` with every weight the steps read copied (packed, for a ``_Packed`` one) into
    the model's weight arena (``executor.weight_arena``), so the executor uses those arrays in
    place instead of copying them once more: compiling peaks at the imported weights plus the
    arena. Weights no step reads (a constant graph output) are copied on their own: never the
    caller's array, which the model would otherwise return (and ``model.params`` write into)
    after the caller changed it."""
    from .dtypes import np_dtype
    from .runtime.executor import weight_arena
    dest = weight_arena(plan, list(bound))
    slots = {s["param"]: s for s in plan["slots"] if s["kind"] == "param"}
    out = {}
    for name, v in bound.items():
        if name not in dest:
            out[name] = v.array() if isinstance(v, _Packed) else np.array(v, copy=True)
            continue
        s = slots[name]
        dst = dest[name].view(np_dtype(s["dtype"])).reshape(s["shape"])
        if isinstance(v, _Packed):
            v.array(out=dst)
        else:
            dst[...] = np.asarray(v).reshape(dst.shape)
        out[name] = dst
    return out


def schedule_kernels(kernels: list, target: Target, level: int,
                     keys: Sequence[str] | None = None) -> list:
    """Each kernel scheduled by the target's default rules (``level``: see ``schedule.level``);
    kernels already scheduled by tuning records are kept. ``build`` has set each kernel's
    ``constant_params``. Kernels with equal ``tir.text.structural_key`` (``keys``, computed
    when not given) are scheduled once and share the result."""
    return list(iter_scheduled(kernels, target, level, keys))


def iter_scheduled(kernels, target: Target, level: int, keys=None):
    """``schedule_kernels`` one kernel at a time (a generator: ``build`` prints and compiles
    the first kernels while the next are scheduled)."""
    from .tir.schedule.rules import schedule_default
    if level <= 0:
        yield from kernels
        return
    tgt = target if level >= 2 or target.is_gpu else Target(str(target) + " -isa=scalar")
    # equal kernels (ResNet-50: 80 kernels, 35 distinct programs) are scheduled once; the
    # others share the scheduled body under their own name (the C printer then prints it once)
    done: dict[str, PrimFunc] = {}
    for k, key in zip(kernels, keys if keys is not None else map(structural_key, kernels)):
        s = done.get(key)
        if s is None:
            s = done[key] = schedule_default(k, tgt)
            yield s
        else:
            yield PrimFunc(k.name, s.params, s.body, {**s.attrs, "op": k.attrs.get("op")})


def _num_units(num_kernels: int) -> int:
    """C translation units a model's kernels are split into: one compiler process per core
    (``$EMBER_BUILD_JOBS`` overrides; 1 gives one file), at most one per 4 kernels, at most 8."""
    return max(1, min(build_jobs(), 8, num_kernels // 4))


#: the streamed build (``StreamedBuild``): about this many units per compiler process, so
#: the first ones compile while the rest are scheduled, and the last (compiled after the
#: schedules, with the AOT entry) is small; each unit compiles the micro-kernels its
#: kernels call once more (ResNet-50, cc CPU: 2 units 4.9 s, 4 units 5.6 s, 6 units 5.9 s)
STREAM_UNITS_PER_JOB = 2
#: fewest distinct kernels a build streams (fewer: one unit per core, as ``_num_units``)
STREAM_MIN_KERNELS = 16


def _nbytes(slot: dict) -> int:
    from .dtypes import itemsize
    item = itemsize(slot["dtype"])
    return int(np.prod(slot["shape"], dtype=np.int64)) * item


def build(mod: IRModule, target: "str | Target" = "llvm",
          params: Mapping[str, np.ndarray] | None = None, *,
          _consume_params: bool = False) -> CompiledModel:
    """Compile ``mod["main"]`` for ``target``; function parameters named in ``params`` are bound
    as weights, the others are the model's run-time inputs.

    The target's pass pipeline (``ember.graph.passes.PIPELINES``) runs first, under the current
    ``PassContext`` (``with ember.PassContext(opt_level=3): ember.build(...)``; default
    opt_level 2). ``info`` of the result reports ``num_bindings`` (operators before the passes)
    and ``num_kernels`` (kernel launches after fusion).

    Raises:
        UnsupportedOpError / LoweringError: an operator cannot be lowered (names the binding).
        ToolchainError: no C compiler. CodegenError: the C compiler failed.
        InputError: a ``params`` name that is no parameter of ``mod["main"]`` (the message
            names the unknown ones and lists the parameters); raised before any compilation.
        ShapeMismatchError: a ``params`` value whose shape is not its parameter's (up to
            dimensions of size 1).

    ``params`` is not modified, and the model keeps no reference to its arrays (the weights
    are copied into the model's weight arena).

    A ``ShardedModule`` (``ember.distributed.partition_for_distributed``) is compiled on the
    ranks of the current ``DeviceCluster`` and gives a ``DistributedModel``.

    ``_consume_params`` (internal, ``compile``): the caller hands ``params`` over; the dict is
    emptied once the weights are bound into the graph, so the imported weights the passes
    replace (batch-norm folding, Winograd transforms) are freed instead of living on beside the
    new ones until the build returns.
    """
    if hasattr(mod, "shards"):  # an ember.distributed.ShardedModule: built on its ranks
        return mod.build(target)
    target = Target(target)
    if target.is_npu:  # NPU layers offloaded, the rest on the host CPU (docs/npu.md)
        from .npu.offload import build_npu
        return build_npu(mod, target, params, build)
    t0 = time.perf_counter()
    if not target.is_gpu:
        prefetch_compiler_info()  # the compiler's version and OpenMP probe, during the passes
    num_imported = len(mod.main.bindings)
    output_names = list(mod.main.attrs.get("output_names") or
                        [o.name if isinstance(o, Var) else f"output{k}"
                         for k, o in enumerate(mod.main.outputs)])
    mod, params = optimize(mod, target, params, consume=_consume_params)
    t_passes = time.perf_counter()
    func = mod.main
    kernels = [lower_binding(b, f"k{k}", mod) for k, b in enumerate(func.bindings)]
    # concatenations written in place by their producers (before scheduling: the schedules
    # read the producers' strided outputs); CPU plans with static shapes at opt_level >= 1
    # (opt_level 0 keeps one kernel per operator)
    views, skip = ({}, set()) if target.is_gpu or PassContext.current().opt_level < 1 \
        or any(k.attrs.get("symbols") for k in kernels) else concat_in_place(func, kernels)
    from .graph.passes.to_mixed_precision import active_dtype
    low = active_dtype(target)  # ToMixedPrecision ran: rules/cuda_tensorcore.py reads it
    for k, b in zip(kernels, func.bindings):  # what a schedule may pack at compile time
        k.attrs["constant_params"] = constant_args(b, params)
        if low:
            k.attrs["mixed_precision"] = low
    keys = [structural_key(k) for k in kernels]  # equal programs: counted and scheduled once
    flop_of: dict[str, int] = {}
    flops = [None if k.attrs.get("symbols") else  # symbolic kernels: no static FLOP count
             flop_of[key] if key in flop_of else flop_of.setdefault(key, count_flops(k))
             for key, k in zip(keys, kernels)]
    tuned = apply_best_schedules(kernels, target)  # tuning records, when a context is active
    ctx = PassContext.current()
    level = ctx.config.get(SCHEDULE_LEVEL, 2)
    rest = [i for i, (a, t) in enumerate(zip(kernels, tuned)) if a is t]
    jobs = build_jobs()
    distinct = len({keys[i] for i in range(len(kernels)) if i not in skip})
    streaming = not (target.is_gpu or jobs <= 1 or distinct < STREAM_MIN_KERNELS)
    sched = (iter_scheduled if streaming else schedule_kernels)(
        [kernels[i] for i in rest], target, level, [keys[i] for i in rest])
    if not streaming:
        kernels = list(tuned)
        for i, s_ in zip(rest, sched):
            kernels[i] = s_
        t_lower = time.perf_counter()
        if target.is_gpu:  # WGSL kernels on the WebGPU runtime (docs/gpu.md)
            return _build_gpu(mod, kernels, params, output_names, target, flops,
                              {"num_bindings": num_imported, "opt_level": ctx.opt_level,
                               "passes_s": t_passes - t0, "lower_s": t_lower - t_passes}, t0)
        run = [k for i, k in enumerate(kernels) if i not in skip]
        units, run_symbols = generate_c_units(run, target, _num_units(len(run)))
        streamed = None
    else:
        # streamed: each unit of kernels is compiled (cc -c) as soon as it is printed, while
        # the next kernels are scheduled; the last unit (thread pool, AOT entry) and the link
        # wait for the plan
        streamed = StreamedBuild(target.mcpu, jobs=jobs)
    try:
        if streamed is not None:
            per_unit = -(-distinct // (STREAM_UNITS_PER_JOB * jobs))
            stream = UnitStream(target, streamed.add, per_unit)
            kernels = list(tuned)
            pos = {i: j for j, i in enumerate(rest)}
            run_symbols = []
            for i in range(len(kernels)):
                if i in pos:
                    kernels[i] = next(sched)
                if i not in skip:
                    run_symbols.append(stream.add(kernels[i]))
            t_lower = time.perf_counter()
            units = [stream.finish(), *stream.units]
            run = [k for i, k in enumerate(kernels) if i not in skip]
        it = iter(run_symbols)
        symbols = [None if i in skip else next(it) for i in range(len(kernels))]
        plan, bound = _plan(func, params, symbols, output_names, kernels, views=views, skip=skip)
        flops = [fl for i, fl in enumerate(flops) if i not in skip]
        kernels = run
        symbolic = bool(plan.get("symbols"))
        for st, fl in zip(plan["steps"], flops):
            st["flops"] = fl if not symbolic else None
            st["bytes"] = sum(_nbytes(plan["slots"][a]) for a in st["args"]) if not symbolic \
                else None
        if not symbolic:
            units[0] += "\n" + generate_aot_entry(plan)
            plan["aot"] = AOT_SYMBOL
        else:  # offsets and symbol values are tables the runtime fills per set of symbol values
            units[0] += "\n" + generate_symbolic_aot_entry(plan)
            plan["aot"] = SYMBOLIC_AOT_SYMBOL
            plan["aot_symbols"] = symbolic_aot_symbols(plan)
        source = "\n".join(f"/* ---- translation unit {i} of {len(units)} ---- */\n{u}"
                            for i, u in enumerate(units)) if len(units) > 1 else units[0]
        t_codegen = time.perf_counter()
        if streamed is None:
            lib = build_library(units, target.mcpu)
            t_cc = time.perf_counter()
            bound = _bind_weights(plan, bound)
        else:  # the weights are bound (packed) while the last units compile
            done = {}
            lib = streamed.finish(units[0], overlap=lambda: done.update(
                bound=_bind_weights(plan, bound), t=time.perf_counter()))
            t_cc = time.perf_counter()
            bound = done["bound"]
            t_codegen = done["t"]  # cc_s: the compilers' time left after the binding
    finally:
        if streamed is not None:
            streamed.close()
    info = {"num_bindings": num_imported, "num_kernels": len(kernels), "opt_level": ctx.opt_level,
            "passes_s": t_passes - t0,
            "num_unique_kernels": len(set(symbols)), "arena_bytes": plan["arena_bytes"],
            "lower_s": t_lower - t_passes, "codegen_s": t_codegen - t_lower, "cc_s": t_cc - t_codegen,
            "compile_count": 1}
    if symbolic:
        info["symbols"] = dict(plan["symbols"])
    model = CompiledModel(lib, plan, bound, mod.text(), str(target), info, source,
                          target.num_threads)
    model.info["compile_s"] = time.perf_counter() - t0
    return model


def _build_gpu(mod, kernels, params, output_names, target, flops, info, t0):
    """The ``build`` of a GPU target: WGSL per kernel (``codegen.wgsl``), the plan with the
    device's layout, and a ``WebGPUModel`` (``runtime.webgpu``)."""
    from .errors import TargetError
    if target.kind == "cuda":  # CUDA C through NVRTC (docs/gpu.md, "CUDA")
        return _build_cuda(mod, kernels, params, output_names, target, flops, info, t0)
    if target.kind != "webgpu":
        raise TargetError(f"target {target.kind}: ember has no {target.kind} code generation "
                          f"yet; use target='webgpu' or 'cuda' for GPUs (docs/gpu.md)")
    from .codegen.wgsl import emit_index_checks, emit_wgsl
    from .runtime.webgpu import WebGPUModel, storage_nbytes
    steps, symbols = [], []
    for k in kernels:
        ws, wk = emit_wgsl(k, target)
        wk = [c for _, c in emit_index_checks(k)] + wk
        steps.append(([b.alloc_size * 4 for b in ws], wk))
        symbols.append("wgsl_" + hashlib.sha256("".join(x.source for x in wk).encode())
                       .hexdigest()[:16])
    plan, bound = _plan(mod.main, params, symbols, output_names, kernels, align=256,
                        nbytes=storage_nbytes)
    for st, fl in zip(plan["steps"], flops):
        st["flops"] = fl
    t_codegen = time.perf_counter()
    bound = {n: (v.array() if isinstance(v, _Packed) else np.array(v, copy=True))
             for n, v in bound.items()}
    info.update(num_kernels=len(kernels), num_unique_kernels=len(set(symbols)),
                num_dispatches=sum(len(w) for _, w in steps), arena_bytes=plan["arena_bytes"],
                codegen_s=t_codegen - t0 - info["passes_s"] - info["lower_s"])
    model = WebGPUModel(plan, bound, steps, mod.text(), str(target), info)
    model.info["compile_s"] = time.perf_counter() - t0
    return model


def _build_cuda(mod, kernels, params, output_names, target, flops, info, t0):
    """The ``build`` of a ``cuda`` target: CUDA C per kernel (``codegen.cuda``), one module
    built with NVRTC to PTX and a cubin for the target's arch (``codegen.nvrtc``; kernels over
    the target's registers, spills or shared memory are refused), the plan with 256-byte
    offsets, and a ``CUDAModel`` (``runtime.cuda``: no GPU needed until ``run``)."""
    from .codegen.cuda import emit_cuda, emit_index_checks, module_source
    from .codegen.nvrtc import build_cuda, check_resources
    from .dtypes import itemsize
    from .runtime.cuda import CUDAModel
    steps, symbols, allk, what = [], [], [], {}
    for k, b in zip(kernels, mod.main.bindings):
        ws, ck = emit_cuda(k, target)
        ck = emit_index_checks(k) + ck
        allk += ck
        steps.append({"workspace": [b_.alloc_size * itemsize(b_.dtype) for b_ in ws],
                      "kernels": [{"name": c.name, "args": [list(a) for a in c.args],
                                   "grid": list(c.grid), "block": list(c.block)} for c in ck]})
        symbols.append("cuda_" + hashlib.sha256(" ".join(c.name for c in ck).encode())
                       .hexdigest()[:16])
        for c in ck:
            what.setdefault(c.name, (f"kernel {k.name} ({k.attrs.get('op', '?')})",
                                     c.block[0] * c.block[1] * c.block[2]))
    source = module_source(allk)
    plan, bound = _plan(mod.main, params, symbols, output_names, kernels, align=256)
    for st, fl in zip(plan["steps"], flops):
        st["flops"] = fl
    t_codegen = time.perf_counter()
    binary = build_cuda(source, [target.attr("arch")], name=f"model_{len(kernels)}_kernels")
    check_resources(binary, what, target)
    bound = {n: (v.array() if isinstance(v, _Packed) else np.array(v, copy=True))
             for n, v in bound.items()}
    info.update(num_kernels=len(kernels), num_unique_kernels=len(set(c.name for c in allk)),
                num_launches=sum(len(s["kernels"]) for s in steps),
                tensor_core_kernels=sum(1 for k in kernels if k.attrs.get("tensor_cores")),
                arena_bytes=plan["arena_bytes"], archs=sorted(binary.cubins),
                codegen_s=t_codegen - t0 - info["passes_s"] - info["lower_s"],
                nvrtc_s=time.perf_counter() - t_codegen)
    model = CUDAModel(plan, bound, steps, binary, source, mod.text(), str(target), info)
    model.info["compile_s"] = time.perf_counter() - t0
    return model


EXECUTORS = ("auto", "static", "staged")
#: ``compile(quantize=...)`` values that mean mixed precision, and their storage dtype
MIXED_PRECISION = {"fp16": "float16", "float16": "float16", "bf16": "bfloat16",
                   "bfloat16": "bfloat16"}


def _compile_mixed(model, target, shapes, executor, dtype: str, dynamic=None):
    """``compile`` under the current ``PassContext`` with ToMixedPrecision required in
    ``dtype`` (its ``ToMixedPrecision.dtype``): GEMMs and convolutions store float16 /
    bfloat16 and accumulate in float32, sensitive operators stay float32
    (``graph/passes/to_mixed_precision.py``); on CUDA sm_80+ the GEMMs run on tensor cores."""
    from .graph.passes import PassContext
    ctx = PassContext.current()
    with PassContext(ctx.opt_level, ctx.disabled_pass - {"ToMixedPrecision"},
                     ctx.required_pass | {"ToMixedPrecision"}, ctx.instruments,
                     {**ctx.config, "ToMixedPrecision.dtype": dtype}):
        return compile(model, target, shapes, executor, dynamic=dynamic)


def compile(model, target: "str | Target" = "llvm",  # noqa: A001 - the public verb
            shapes: Mapping[str, Sequence[int]] | None = None, executor: str = "auto", *,
            quantize: str | None = None, calibration=None, calibrate: str = "minmax",
            per_channel: bool = True, skip: Sequence[str] = (),
            example_inputs=None, dynamic_shapes=None, dynamic=None):
    """Compile an ONNX model (path, bytes or ``onnx.ModelProto``) to a runnable model.

    Example::

        m = ember.compile("resnet50.onnx", target="llvm -mcpu=native")
        y, = m.run({"data": x})

    A model compiled before (same bytes, target, shapes, ``dynamic``, ``PassContext`` and ember
    version) is loaded from the compiled-model cache (``ember.compile_cache``;
    ``info["cache_hit"]``), symbolic compiles included.

    ``executor``:
      - ``"static"``: the whole model as one ahead-of-time compiled ``CompiledModel`` (static
        shapes, one native call per inference, ``save``-able). Raises ``RuntimeValueError`` /
        ``UnsupportedOpError`` when a shape depends on run-time data.
      - ``"staged"``: a ``StagedModel`` (``ember.frontend.staging``): compiled segments
        specialized on run-time shape values, host kernels for data-dependent operators
        (``NonZero``, ``Unique``, control flow, strings). Its segments compile at first run.
      - ``"auto"`` (default): static when possible, else staged (``info["executor"]`` says
        which, ``info["staged_reason"]`` why: ``staged_reason``). Operators ONNX defines by a
        function body are expanded into it by the importer and compile statically.

    ``quantize="int8"`` with ``calibration`` (input dicts, or an ``.npz`` file / directory):
    post-training quantization first (``ember.quantize``, the same keywords ``calibrate``,
    ``per_channel``, ``skip``), then int8 kernels; ``info["quantization"]`` reports it
    (``ember.quant.onnx_qdq.compile_quantized``, docs/quantization.md). Static executor only.
    ``quantize="fp16"`` / ``"bf16"``: mixed precision (ToMixedPrecision: float16 / bfloat16
    storage of GEMM and convolution operands, float32 accumulation; tensor cores on CUDA
    sm_80+, docs/gpu.md); the inputs and outputs keep their dtypes. ``"bf16"`` on a CPU:
    conv/Gemm/MatMul on ``vdpbf16ps`` bf16 micro-kernels with float32 accumulation
    (``ember.quant.bf16``; float32 with a note in ``info["quantization"]`` on a CPU without
    AVX512_BF16).

    ``dynamic``: ``True`` or ``{symbol: (lo, hi)}`` compiles once for symbolic dimensions
    (``from_onnx(..., dynamic=)``; docs/dynamic_shapes.md): the model then runs any sizes
    within the bounds without compiling again (``info["compile_count"]`` stays 1); inputs
    that contradict a symbol or its bounds raise ``ShapeMismatchError``. ``shapes=`` entries
    naming symbols (``("batch", "seq")``) do the same for those inputs. Static executor.

    A ``torch.nn.Module`` (or ``torch.jit.ScriptModule``) is compiled by the PyTorch frontend
    with ``example_inputs=(x, ...)`` fixing its input shapes; ``dynamic_shapes=`` (torch's
    ``torch.export.Dim`` spec) compiles it once for symbolic sizes; see ``docs/torch.md``.

    Raises:
        ModelLoadError, UnsupportedOpError, ShapeMismatchError, ToolchainError, CodegenError;
        ValueError for an unknown ``executor``; QuantizationError / InputError for
        quantization (see ``ember.quantize``), and InputError for ``calibration`` without
        ``quantize="int8"``; ``TorchExportError`` when torch cannot capture a module.
    """
    if _is_torch_module(model):
        from .frontend.torch import compile_module
        return compile_module(model, example_inputs, target, dynamic_shapes)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if calibration is not None and (quantize is None or quantize in MIXED_PRECISION):
        from .errors import InputError  # a calibration set would be silently ignored
        raise InputError(f"calibration= is used only by quantize='int8' (got quantize="
                         f"{quantize!r}): pass quantize='int8' to quantize with it, or drop "
                         f"calibration= ({quantize or 'float32'} needs no calibration)")
    if quantize in MIXED_PRECISION:  # float16 / bfloat16 compute (ToMixedPrecision)
        tgt = Target(target)
        if MIXED_PRECISION[quantize] == "bfloat16" and not (tgt.is_gpu or tgt.is_npu):
            # vdpbf16ps micro-kernels (docs/quantization.md, "bf16")
            from .quant.bf16 import compile_bf16
            return compile_bf16(model, target, shapes, lambda m, t, s: compile(
                m, t, s, executor, dynamic=dynamic))
        return _compile_mixed(model, target, shapes, executor, MIXED_PRECISION[quantize],
                              dynamic)
    if quantize is not None:
        from .quant.onnx_qdq import compile_quantized
        return compile_quantized(model, target, shapes, quantize, calibration, calibrate,
                                 per_channel, skip)
    if dynamic is not None or _names_symbols(shapes):
        return _compile_static(model, target, shapes, dynamic)
    if executor == "static":
        return _compile_static(model, target, shapes)
    if executor == "staged":
        return _compile_staged(model, target, shapes, reason="executor='staged'")
    from .errors import ShapeMismatchError, UnsupportedOpError
    try:
        return _compile_static(model, target, shapes)
    except (UnsupportedOpError, ShapeMismatchError) as e:
        reason = staged_reason(e, shapes)
        if reason is None:
            raise
        return _compile_staged(model, target, shapes, reason=reason)


def staged_reason(e: Exception, shapes=None) -> str | None:
    """Why the staged executor runs a model that the static compiler refused with ``e``, or
    ``None`` when ``e`` is an error the staged executor cannot help with (an operator no
    executor runs, a bad ``shapes=``...). The answer is what ``info["staged_reason"]`` says:

    - a value the compiler needs is only known at run time (``RuntimeValueError``: a Reshape
      shape computed by the graph, reduce axes from an input...);
    - an operator that runs as a host kernel (data-dependent output shapes such as ``NonZero``,
      strings, sequences, optionals, control flow, ``TreeEnsemble``);
    - a string, sequence, optional or map graph input (``HostValueError``);
    - a graph input with a symbolic dimension when ``shapes=`` does not fix it
      (``SymbolicShapeError``).
    """
    from .errors import HostValueError, RuntimeValueError, SymbolicShapeError, UnsupportedOpError
    from .frontend.hostops import host_ops
    from .frontend.staging import CONTROL_OPS
    if isinstance(e, RuntimeValueError):
        return f"a value needed at compile time is computed at run time: {e}"
    if isinstance(e, HostValueError):
        return f"a value that is not a numeric tensor: {e}"
    if isinstance(e, SymbolicShapeError):
        return None if shapes else f"an input shape is known only at run time: {e}"
    if isinstance(e, UnsupportedOpError) and e.op is not None and (
            e.op in CONTROL_OPS or any(op == e.op for _, op in host_ops())):
        kind = "control flow" if e.op in CONTROL_OPS else "a host kernel"
        return (f"node {e.node!r}: operator {e.op} runs as {kind} (its output shapes or "
                f"element types need host code), the rest of the graph as compiled segments")
    return None


def _with_shapes(model, shapes):
    """The ONNX model with the graph-input dimensions of ``shapes`` fixed (what the staged
    executor's ``random_inputs`` makes)."""
    from .errors import ShapeMismatchError
    from .frontend.onnx import load_model
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(load_model(model))
    inputs = {vi.name: vi for vi in m.graph.input}
    for name, dims in shapes.items():
        if name not in inputs:
            raise ShapeMismatchError(f"shapes names {name!r}, which is not an input of the model; "
                                     f"its inputs are {list(inputs)}")
        shape = inputs[name].type.tensor_type.shape
        del shape.dim[:]
        for d in dims:
            shape.dim.add().dim_value = int(d)
    return m


def _is_torch_module(model) -> bool:
    """True for a ``torch.nn.Module`` (torch is only imported when the user already has)."""
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _compile_staged(model, target, shapes, reason: str):
    from .frontend.staging import StagedModel
    if shapes:
        model = _with_shapes(model, shapes)
    tgt = Target(target)
    staged = StagedModel(model, build=lambda mod, params: build(mod, tgt, params))
    staged.info.update(executor="staged", staged_reason=reason, target=str(tgt))
    return staged


def _file_stamp(model):
    """``(inode, size, mtime_ns)`` of a model given by path, else ``None``."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    try:
        st = os.stat(model)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _names_symbols(shapes) -> bool:
    """True when a ``shapes=`` entry gives a dimension by symbol name."""
    return bool(shapes) and any(isinstance(d, str) for s in shapes.values()
                                if not isinstance(s, (str, bytes)) for d in s)


def _compile_static(model, target, shapes, dynamic=None) -> CompiledModel:
    from . import compile_cache
    from .frontend.onnx import from_onnx, load_model
    t0 = time.perf_counter()
    target = Target(target)
    stamp = _file_stamp(model)
    external: list[str] = []
    proto = load_model(model, external)
    # a large model is not serialized again for its key (that held two more copies of the
    # weights and took most of a warm compile): the key walks the loaded proto, hashing each
    # weight's buffer in place (``compile_cache.proto_digest``)
    if dynamic is not None and dynamic is not True and dynamic is not False:
        from .frontend.onnx import check_dynamic
        check_dynamic(dynamic)  # a bad dynamic= raises before it is hashed into a key
    key = compile_cache.cache_key(lambda: compile_cache.model_digest(model, proto, external),
                                  target, shapes, PassContext.current(), dynamic)
    if key is not None and stamp != _file_stamp(model):
        key = None  # the file changed while it was read: its hash may not be what was compiled
    if target.is_gpu or target.is_npu:
        key = None  # the compiled-model cache stores CPU artifacts only (static or symbolic)
    if key is not None:
        from .frontend.converters.random import has_unseeded_random
        if has_unseeded_random(proto):
            key = None  # unseeded generators draw a new key per compile: no reuse
    if key is not None:
        cached = compile_cache.lookup(key, target.num_threads)
        if cached is not None:
            cached.info["cache_hit"] = True
            cached.info["compile_s"] = time.perf_counter() - t0
            # the cached entry remembers the path it was first compiled from, not this one
            cached.info.pop("model", None)
            if isinstance(model, (str, os.PathLike)):
                cached.info["model"] = os.fspath(model)
            return cached
    mod, params = from_onnx(proto, shapes=shapes, dynamic=dynamic)
    del proto  # its weights are in ``params`` now: one copy fewer at build's peak
    t1 = time.perf_counter()
    compiled = build(mod, target, params, _consume_params=True)
    compiled.info["import_s"] = t1 - t0
    compiled.info["compile_s"] = time.perf_counter() - t0
    compiled.info["executor"] = "static"
    if isinstance(model, (str, os.PathLike)):
        compiled.info["model"] = os.fspath(model)
    if key is not None:
        compile_cache.store(key, compiled)
    return compiled
