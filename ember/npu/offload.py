"""Graph integration of the NPU: ``ember.build(mod, "npu", params)`` (and ``ember.compile(...,
target="npu")``).

1. The QDQ graph is realized with the integer requantization (``RealizeQnn`` under the
   ``PassContext`` config ``"RealizeQnn.requantize": "fixed"``): every ``qnn.conv2d`` with a
   per-tensor scale ratio computes ``(acc * M + round) >> shift`` - on the NPU and on the CPU.
2. ``partition`` (``ember.graph.pattern``) moves every ``qnn.conv2d`` the NPU can run (checked
   by ``npu_layer``: int8 activations with zero points 0, the fixed requantization with ``M <
   2**15`` and shift 0 or 2-31, batch 1, dilation 1, pads <= 15, a tiling that fits the
   scratchpads) into a composite function ``@npu_<k>``; each one becomes an ``NPUKernel``
   (``lower_conv2d`` / ``lower_dense``). The others stay on the CPU and their reason is kept.
3. ``main`` is cut at the composite calls (``ember.graph.segments``): the runs between them are
   built for the host CPU (``target.host()``) with the same integer requantization, the calls
   run on the simulator (``NPUKernel.run``), in one executor (``NPUModel``).

``info["npu"]``: ``cycles`` (sum over the offloaded layers), ``utilization`` (MACs / (cycles x
MACs per cycle)), ``time_ms`` at the config's clock, ``layers`` (per layer: ``layer``, ``shape``,
``cycles``, ``macs``, ``utilization``, ``dma_bytes``, ``stall_cycles``, ``intrinsic``,
``tiling``), ``fallback`` (``[{"layer", "reason"}]``: the ``qnn.conv2d`` that run on the CPU) and
``float_layers`` (conv/dense/matmul that stayed float32). The cycle counts come from one
cycle-mode simulation per layer at build time (they do not depend on the data); ``run`` uses the
functional mode.

Which operators are offloaded is a registry (``register_lowering(op, fn)``): ``qnn.conv2d`` is
its first entry; a user's operator (``ember.register_op``, or a PyTorch custom operator through
``ember.frontend.torch.register_op(..., npu=fn)``) declares its NPU lowering the same way, and
``fn`` builds the layer with the existing kernel generator (``lower_conv2d`` / ``lower_dense``).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..errors import EmberError, InputError, NPUError, ShapeMismatchError
from ..graph.ir import Constant, IRModule, Var
from ..graph.segments import Segment, cut_function, run_items

COMPOSITE = "npu"

#: graph operator name -> its NPU lowering (``register_lowering``)
_LOWERINGS: dict[str, Callable] = {}


def register_lowering(op: str, fn: Callable, override: bool = False) -> None:
    """Declare how the NPU runs graph operator ``op``: ``ember.build(mod, "npu")`` then offloads
    every call of ``op`` whose first input is the layer's activation and whose other inputs are
    constants (weights), and runs the others on the CPU with the reason kept in
    ``info["npu"]["fallback"]``.

    Args:
        op: a registered graph operator (``"qnn.conv2d"``, ``"mylib.qconv_relu"``).
        fn: ``fn(x_type, consts, attrs, cfg) -> NPUKernel``: ``x_type`` the activation's
            ``TensorType``, ``consts`` the NumPy arrays of the other inputs in order, ``attrs``
            the call's attributes, ``cfg`` the target's ``NPUConfig``. It builds the layer with
            ``lower_conv2d`` / ``lower_dense`` (pass ``config=cfg``) and raises ``NPUError`` (or
            ``TargetError``) with the reason when the NPU cannot run this call. The kernel's
            input and output must be the call's: int8 ``(1, C, H, W)`` -> ``(1, O, OH, OW)``
            (conv), ``(N, K)`` -> ``(N, M)`` (dense).
        override: replace an earlier lowering of ``op``.
    Raises:
        ValueError: ``op`` has a lowering already and ``override`` is false.
    """
    if op in _LOWERINGS and not override:
        raise ValueError(f"operator {op!r} has an NPU lowering already (pass override=True "
                         f"to replace it)")
    _LOWERINGS[op] = fn


def unregister_lowering(op: str) -> None:
    """Remove the NPU lowering of ``op`` (a no-op when it has none)."""
    _LOWERINGS.pop(op, None)


def lowered_ops() -> list[str]:
    """The graph operators with an NPU lowering, sorted."""
    return sorted(_LOWERINGS)


def _unpack_weight(wp: np.ndarray, c: int, kh: int, kw: int) -> np.ndarray:
    """``qnn.conv2d``'s packed ``(Cout, KH * KW * C4)`` weights back to ``(Cout, C, KH, KW)``."""
    cout = wp.shape[0]
    return np.ascontiguousarray(wp.reshape(cout, kh, kw, -1)[..., :c].transpose(0, 3, 1, 2))


def npu_layer(call, x_type, cfg, out_type=None):
    """``(NPUKernel, None)`` for a call the NPU runs (by its operator's registered lowering,
    ``register_lowering``), else ``(None, reason)``.

    Raises:
        ShapeMismatchError: the lowering built a kernel that does not take ``x_type`` or does
            not give ``out_type`` (int8): a bug of that lowering, not a fallback."""
    fn = _LOWERINGS.get(call.op)
    if fn is None:
        return None, f"operator {call.op} has no NPU lowering (ember.npu.register_lowering)"
    if not all(isinstance(a, Constant) for a in call.args[1:]):
        return None, (f"{call.op}: the NPU needs every input after the activation to be a "
                      f"constant (weights), got a run-time value")
    try:
        k = fn(x_type, [np.asarray(a.data) for a in call.args[1:]], dict(call.attrs), cfg)
    except EmberError as e:  # NPUError (unsupported form) / TargetError (no tile fits)
        return None, f"{type(e).__name__}: {e}"
    s = k.shape
    k_in = (s.H, s.C) if k.dense else (1, s.C, s.H, s.W)
    k_out = (s.H, s.O) if k.dense else (1, s.O, s.OH, s.OW)
    for what, want, got in (("activation", x_type, k_in), ("output", out_type, k_out)):
        if want is not None and (tuple(want.shape) != got or want.dtype != "int8"):
            raise ShapeMismatchError(f"the NPU lowering of {call.op} built a kernel whose "
                                     f"{what} is int8 {got}, but the call's is {want}")
    return k, None


def _qnn_conv2d(x_type, consts, a, cfg):
    """The NPU lowering of ``qnn.conv2d`` (``consts``: the packed weights, int32 bias and
    float32 multiplier); the NPU's bias is the CPU's plus the ``128 * sum(w)`` the CPU kernel
    folds in for its unsigned activations.

    Raises:
        NPUError: the forms the NPU does not run (module doc, step 2)."""
    from . import lower_conv2d, lower_dense
    if a.get("requant", "float") != "fixed":
        raise NPUError("float32 requantization (per-channel scales, or no (M, shift) fits): "
                       "the NPU needs one per-tensor integer multiplier")
    if x_type.dtype != "int8" or a["out_dtype"] != "int8":
        raise NPUError(f"activations {x_type.dtype} -> {a['out_dtype']}: the NPU needs int8 "
                       f"(symmetric) activations")
    if int(a["x_zp"]) != 0 or int(a["y_zp"]) != 0:
        raise NPUError(f"zero points x={a['x_zp']}, y={a['y_zp']}: the NPU needs symmetric "
                       f"quantization (zero points 0)")
    lo, hi = max(-128, int(a["lo"])), min(127, int(a["hi"]))
    if (lo, hi) not in ((-128, 127), (0, 127)):
        raise NPUError(f"output clamp [{lo}, {hi}]: the NPU clips to [-128, 127] or [0, 127]")
    m, s = int(a["rq_mult"]), int(a["rq_shift"])
    if not (1 <= abs(m) < 2**15) or s == 1:
        raise NPUError(f"requantize M={m}, shift={s}: the NPU needs |M| < 2**15, shift 0 or "
                       f"2-31")
    if tuple(a.get("dilations", (1, 1))) != (1, 1):
        raise NPUError(f"dilations {tuple(a['dilations'])}: the NPU supports dilation 1")
    wp, bias = consts[0], consts[1]
    kh, kw = a["kernel"]
    c = x_type.shape[1]
    w = _unpack_weight(wp, c, kh, kw)
    bias = (bias.astype(np.int64) + 128 * w.astype(np.int64).reshape(len(w), -1).sum(1))
    if np.any(np.abs(bias) >= 2**31):
        raise NPUError("bias out of int32 range once the zero-point fold is undone")
    bias = bias.astype(np.int32)
    relu = lo == 0
    if a["layout"] == "rows":
        return lower_dense(w[:, :, 0, 0], bias, batch=int(x_type.shape[0]), multiplier=m,
                           shift=s, relu=relu, config=cfg)
    if x_type.shape[0] != 1:
        raise NPUError(f"batch {x_type.shape[0]}: the NPU kernels run batch 1")
    return lower_conv2d(w, bias, input_shape=tuple(x_type.shape), strides=tuple(a["strides"]),
                        pads=tuple(a["pads"]), multiplier=m, shift=s, relu=relu, config=cfg)


register_lowering("qnn.conv2d", _qnn_conv2d)


def _layer_row(name, k, stats, cfg) -> dict:
    s = k.shape
    shape = (f"dense {s.H}x{s.C} -> {s.O}" if k.dense else
             f"conv {s.C}x{s.H}x{s.W} -> {s.O}x{s.OH}x{s.OW} k{s.KH}x{s.KW} s{s.strides[0]}")
    macs = int(k.macs)
    return {"layer": name, "shape": shape, "cycles": int(stats.cycles), "macs": macs,
            "utilization": macs / max(1, stats.cycles * cfg.macs_per_cycle),
            "dma_bytes": int(stats.dram_read + stats.dram_written),
            "stall_cycles": int(sum(stats.token_stall) + sum(stats.port_stall)),
            "intrinsic": k.intrinsic, "tiling": str(k.tiling)}


class _NPUStep:
    """An offloaded layer: its composite call ``binding``, ``NPUKernel`` and the ``Stats`` of
    its build-time cycle-mode simulation (with the per-instruction unit trace)."""

    def __init__(self, binding, kernel, name, stats=None):
        self.binding, self.kernel, self.name, self.stats = binding, kernel, name, stats
        self.outputs = binding.outputs


class NPUModel:
    """A model compiled for ``Target("npu")``: CPU segments (``CompiledModel``) and NPU layers
    (``NPUKernel``, simulated) run in order by one executor.

    ``run(inputs)`` takes ``{name: array}`` (or a list in ``input_names`` order) and returns the
    outputs in ``output_names`` order; ``info["npu"]`` is the report of the module doc."""

    def __init__(self, func, items, info, target):
        self.func, self.items, self.info, self.target = func, items, info, str(target)
        self._params = [p for p in func.params]

    @property
    def input_names(self) -> list[str]:
        return [p.name for p in self._params]

    @property
    def output_names(self) -> list[str]:
        return list(self.func.attrs.get("output_names") or
                    [o.name if isinstance(o, Var) else f"output{k}"
                     for k, o in enumerate(self.func.outputs)])

    def run(self, inputs) -> list[np.ndarray]:
        """Run every step; raises ``InputError`` for a missing input."""
        if not isinstance(inputs, dict):
            inputs = dict(zip(self.input_names, inputs))
        env = {}
        for p in self._params:
            if p.name not in inputs:
                raise InputError(f"missing input {p.name!r} (inputs: {self.input_names})")
            env[id(p)] = np.asarray(inputs[p.name])
        def npu(step, env_):
            x = np.ascontiguousarray(env_[id(step.binding.call.args[0])])
            return step.kernel.run(x, mode="functional", check=False)[0]
        cpu_s, npu_s = run_items(self.items, env, npu)
        self.info["last_run"] = {"cpu_s": cpu_s, "npu_sim_s": npu_s}
        return [env[id(o)] if isinstance(o, Var) else o.data for o in self.func.outputs]

    def chrome_trace(self) -> dict:
        """The NPU's timeline of one inference as Chrome trace-event JSON (``chrome://tracing``,
        Perfetto): the offloaded layers back to back in model order, each as a span on a
        ``layers`` row, and every instruction of each layer as a complete event on the row of
        its unit (load, compute, store), from the layer's build-time cycle-mode simulation.
        Times in microseconds at the config's clock; ``args`` give cycles. The CPU segments
        between layers are not on this clock and are left out."""
        clock = float(self.info["npu"]["clock_mhz"])
        units = ("load", "compute", "store")
        events = [{"ph": "M", "pid": 0, "tid": u, "name": "thread_name",
                   "args": {"name": n}} for u, n in enumerate(units + ("layers",))]
        offset = 0
        for step in self.items:
            if not isinstance(step, _NPUStep) or step.stats is None:
                continue
            cycles = int(step.stats.cycles)
            events.append({"ph": "X", "pid": 0, "tid": len(units), "name": step.name,
                           "ts": offset / clock, "dur": cycles / clock,
                           "args": {"cycles": cycles, "start_cycle": offset}})
            instrs = step.kernel.program.instrs
            for pc, u, start, end in step.stats.trace:
                events.append({"ph": "X", "pid": 0, "tid": u, "name": instrs[pc].kind.name,
                               "ts": (offset + start) / clock, "dur": (end - start) / clock,
                               "args": {"layer": step.name, "pc": pc, "cycles": end - start}})
            offset += cycles
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write_chrome_trace(self, path) -> None:
        """Write ``chrome_trace()`` to ``path`` as JSON."""
        import json
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random inputs of the model's input types (standard normal floats, small
        integers)."""
        rng = np.random.default_rng(seed)
        out = {}
        for p in self._params:
            shape, dt = tuple(p.type.shape), np.dtype(p.type.dtype)
            out[p.name] = (rng.standard_normal(shape).astype(dt) if dt.kind == "f" else
                           rng.integers(0, 8, shape).astype(dt))
        return out

    def save(self, path) -> None:
        """Raises ``ArtifactError``: an NPU model (simulated layers) has no artifact yet."""
        from ..errors import ArtifactError
        raise ArtifactError(f"an NPU model ({self.target}) cannot be saved as an artifact yet: "
                            f"compile it again with ember.compile(..., target='npu')")

    def benchmark(self, inputs, number: int = 5, warmup: int = 1) -> dict:
        """Wall time of ``run`` (ms; the NPU layers as simulated on the host)."""
        for _ in range(warmup):
            self.run(inputs)
        ts = []
        for _ in range(number):
            t0 = time.perf_counter()
            self.run(inputs)
            ts.append((time.perf_counter() - t0) * 1e3)
        return {"mean_ms": float(np.mean(ts)), "min_ms": float(np.min(ts)), "number": number}


def build_npu(mod: IRModule, target, params, build) -> NPUModel:
    """Compile ``mod["main"]`` for an ``npu`` ``target`` (module doc); ``build`` is
    ``ember.driver.build``, used for the CPU segments on ``target.host()``.

    Raises what ``build`` raises for the CPU part; layers the NPU cannot run are never an error
    (they fall back, with the reason in ``info["npu"]["fallback"]``)."""
    from ..graph.passes import PassContext, get_pass
    from ..graph.passes.bind_params import bind_params
    from ..graph.passes.realize_qnn import REQUANTIZE, realize_report
    from ..graph.pattern import CallPattern, partition
    t0 = time.perf_counter()
    cfg = target.npu_config
    host = target.host()
    cur = PassContext.current()
    ctx = PassContext(opt_level=cur.opt_level, disabled_pass=cur.disabled_pass,
                      required_pass=cur.required_pass, instruments=cur.instruments,
                      config={**cur.config, REQUANTIZE: "fixed"})
    output_names = list(mod.main.attrs.get("output_names") or [])
    with ctx:
        mod = bind_params(mod, params)
        for name in ("InferType", "RealizeQnn", "InferType"):
            mod = get_pass(name)(mod)
    report = realize_report(mod)
    kernels: list = []  # in binding order: the order of the composite calls in main
    fallback: list[dict] = []

    def check(m) -> bool:
        b = m.producer(m.root)
        k, why = npu_layer(b.call, b.call.args[0].type, cfg, b.outputs[0].type)
        if k is None:
            fallback.append({"layer": m.root.name, "reason": why})
            return False
        kernels.append((m.root.name, k))
        return True

    pat = None
    for op in sorted(_LOWERINGS):  # any call of an operator with a lowering; check decides
        p = CallPattern(op, None)
        pat = p if pat is None else pat | p
    if pat is not None:
        mod = partition(pat, mod, COMPOSITE, check=check)
    func = mod.main
    if output_names:
        func.attrs["output_names"] = output_names

    def is_npu(b) -> bool:
        return b.call.is_function_call and \
            mod.functions[b.call.callee].attrs.get("composite") == COMPOSITE

    items = []
    rows = []
    for item in cut_function(func, is_npu):
        if isinstance(item, Segment):
            with ctx:
                item.model = build(IRModule.from_function(item.func), host, {})
            items.append(item)
            continue
        name, k = kernels[len(rows)]
        x_t = item.call.args[0].type
        x0 = np.zeros(tuple(x_t.shape), np.int8)
        _, stats = k.run(x0, mode="cycle")  # cycles do not depend on the data
        rows.append(_layer_row(name, k, stats, cfg))
        items.append(_NPUStep(item, k, name, stats))
    cycles = sum(r["cycles"] for r in rows)
    macs = sum(r["macs"] for r in rows)
    info = {"target": str(target), "executor": "npu",
            "num_segments": sum(isinstance(i, Segment) for i in items),
            "npu": {"cycles": cycles, "macs": macs,
                    "utilization": macs / max(1, cycles * cfg.macs_per_cycle),
                    "time_ms": cycles / (cfg.clock_mhz * 1e3), "config": cfg.name,
                    "clock_mhz": cfg.clock_mhz,
                    "layers": rows, "fallback": fallback, "float_layers": report["float"]}}
    info["compile_s"] = time.perf_counter() - t0
    return NPUModel(func, items, info, target)


def format_layers(info_npu: dict) -> str:
    """The per-layer table of ``info["npu"]`` as text (``ember profile --target npu``)."""
    head = f"{'layer':<34}{'shape':<40}{'cycles':>10}{'MACs':>12}{'util':>7}{'DMA B':>10}" \
        f"{'stalls':>9}"
    lines = [head, "-" * len(head)]
    for r in info_npu["layers"]:
        lines.append(f"{r['layer'][:33]:<34}{r['shape'][:39]:<40}{r['cycles']:>10}"
                     f"{r['macs']:>12}{r['utilization']:>7.2f}{r['dma_bytes']:>10}"
                     f"{r['stall_cycles']:>9}")
    lines.append(f"total: {info_npu['cycles']} cycles, utilization "
                 f"{info_npu['utilization']:.3f}, {info_npu['time_ms']:.3f} ms at the clock")
    for f in info_npu["fallback"]:
        lines.append(f"CPU fallback {f['layer']}: {f['reason']}")
    return "\n".join(lines)
