"""Post-training quantization: a float graph and a calibration set -> the QDQ graph form
(``ember.ops.qnn``), the form onnxruntime's ``quantize_static`` writes (QDQ format).

    qmod, qparams = ember.quantize(mod, params, calibration, dtype="int8",
                                   calibrate="minmax", per_channel=True, skip=["conv_7"])

Steps:
1. *Selection* (``select_layers``): every 2-D ``nn.conv`` with ``group=1``, ``nn.gemm`` (alpha =
   beta = 1, A not transposed) and ``matmul`` whose weight is a parameter is a layer, unless its
   output name is in ``skip``; its input activation and its output (after a ReLU that is the
   output's only user) are the tensors to calibrate.
2. *Calibration* (``calibrate``): the model, with those tensors exposed as extra outputs, is
   compiled by ember and run on every feed (a progress bar over the set); one observer per
   tensor (``ember.quant.observers``: minmax, percentile, entropy) gives its range.
3. *Rewrite*: each calibrated tensor ``t`` is followed by ``qnn.dequantize(qnn.quantize(t))``
   with asymmetric uint8 parameters (all of ``t``'s users read the dequantized value); weights
   become int8 parameters (symmetric, per output channel with ``per_channel``) read through
   ``qnn.dequantize``; biases become int32 (scale ``x_scale * w_scale``, zero point 0). The
   CPU pipeline's ``RealizeQnn`` pass then lowers the layers to int8 kernels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import InputError, QuantizationError
from ..graph.builder import FunctionBuilder
from ..graph.ir import Constant, Function, IRModule, Var
from .observers import METHODS, Observer, affine_uint8, quantize_weight, symmetric_int8


@dataclass
class QuantLayer:
    """One layer to quantize: ``name`` (its output value), ``kind`` (graph operator), the
    value names of its ``input`` activation and quantized ``output`` (after a fused ReLU), its
    ``weight`` parameter with the output-channel ``weight_axis``, and its ``bias`` parameter
    name (``None``: none, or an inline constant)."""

    name: str
    kind: str
    input: str
    output: str
    weight: str
    weight_axis: int
    bias: str | None = None


def _users(func: Function) -> dict:
    out: dict[int, list] = {}
    for b in func.bindings:
        for a in b.call.args:
            out.setdefault(id(a), []).append(b)
    for o in func.outputs:
        out.setdefault(id(o), []).append(None)
    return out


def select_layers(func: Function, params: Mapping[str, np.ndarray],
                  skip: Sequence[str] = ()) -> tuple[list[QuantLayer], list[str]]:
    """``(layers, float_ops)``: the quantizable layers of ``func`` (module doc, step 1) and the
    conv/gemm/matmul/dense bindings that stay float32 (skipped or of a form ember does not
    quantize)."""
    users = _users(func)
    layers, floats = [], []
    for b in func.bindings:
        op, a = b.call.op, b.call.attrs
        if op not in ("nn.conv", "nn.gemm", "matmul", "nn.dense"):
            continue
        name = b.outputs[0].name
        x, w = b.call.args[0], b.call.args[1]
        ok = isinstance(w, Var) and w.name in params and x.type.dtype == "float32" and \
            not (isinstance(x, Var) and x.name in params) and name not in skip
        axis = 0
        if ok and op == "nn.conv":
            ok = w.type.ndim == 4 and a.get("group", 1) == 1
        elif ok and op == "nn.gemm":
            ok = w.type.ndim == 2 and a["alpha"] == 1.0 and a["beta"] == 1.0 and not a["trans_a"]
            axis = 0 if a["trans_b"] else 1
        elif ok and op == "matmul":
            ok, axis = w.type.ndim == 2 and x.type.ndim >= 2, 1
        else:
            ok = False
        if not ok:
            floats.append(name)
            continue
        out = b.outputs[0]
        us = users.get(id(out), [])
        if len(us) == 1 and us[0] is not None and us[0].call.op == "nn.relu":
            out = us[0].outputs[0]
        bias = None
        if len(b.call.args) > 2 and isinstance(b.call.args[2], Var) and \
                b.call.args[2].name in params and b.call.args[2].type.ndim <= 1:
            bias = b.call.args[2].name
        layers.append(QuantLayer(name, op, x.name, out.name, w.name, axis, bias))
    return layers, floats


def _check_feed(i: int, feed, inputs: dict) -> dict:
    if isinstance(feed, str) and feed in inputs:  # calibration= was one dict: its keys
        raise InputError(f"calibration= is one input dict (its keys were iterated as feeds); "
                         f"give an iterable of input dicts, e.g. calibration=[feed]")
    if not isinstance(feed, Mapping):
        raise InputError(f"calibration feed {i} is a {type(feed).__name__}; each feed must be a "
                         f"dict of input name -> array (inputs: {sorted(inputs)})")
    out = {}
    for k, v in feed.items():
        if k not in inputs:
            raise InputError(f"calibration feed {i} names input {k!r}, which the model does "
                             f"not have (inputs: {sorted(inputs)})")
        v = np.asarray(v)
        t = inputs[k]
        if tuple(v.shape) != tuple(t.shape) or str(v.dtype) != t.dtype:
            raise InputError(f"calibration feed {i}, input {k!r}: got {v.dtype}{list(v.shape)}, "
                             f"the model takes {t.dtype}{list(t.shape)}")
        if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
            raise InputError(f"calibration feed {i}, input {k!r} holds NaN or infinite values; "
                             f"calibration needs finite data (clean or drop that sample)")
        out[k] = v
    missing = sorted(set(inputs) - set(out))
    if missing:
        raise InputError(f"calibration feed {i} lacks input(s) {missing}")
    return out


def calibrate(mod: IRModule, params: Mapping[str, np.ndarray], names: Sequence[str],
              calibration: Iterable, method: str = "minmax", target="llvm",
              progress: bool = True) -> tuple[dict, int]:
    """``({name: (lo, hi)}, number of feeds)``: the ranges of the values ``names`` of
    ``mod["main"]`` over ``calibration`` (an iterable of input dicts), observed with
    ``method`` by running ember's own compiled model with those values exposed as outputs.

    Raises:
        InputError: a feed with wrong names, shapes or dtypes, or NaN/inf values; an empty
            calibration set.
        QuantizationError: an intermediate value becomes NaN/inf on a feed.
    """
    from ..driver import build
    func = mod["main"]
    inputs = {p.name: p.type for p in func.params if p.name not in params}
    by_name = {p.name: p for p in func.params}
    for b in func.bindings:
        for o in b.outputs:
            by_name[o.name] = o
    exposed = [n for n in names if n not in inputs]
    cal = Function(list(func.params), list(func.bindings), [by_name[n] for n in exposed],
                   func.name)
    model = build(IRModule({func.name: cal}), target, dict(params))
    obs = {n: Observer(method, seed=k) for k, n in enumerate(names)}
    n_feeds = 0
    try:
        from tqdm import tqdm
        it = tqdm(calibration, desc=f"calibrating ({method})", unit="feed", disable=not progress)
    except ImportError:  # pragma: no cover - tqdm is a dependency of the quant extra
        it = calibration
    for i, feed in enumerate(it):
        feed = _check_feed(i, feed, inputs)
        outs = model.run(feed)
        for n, v in zip(exposed, outs):
            if not np.all(np.isfinite(v)):
                raise QuantizationError(f"calibration feed {i}: value %{n} holds NaN or "
                                        f"infinite values; the float model overflows on it")
            obs[n].update(v)
        for n in names:
            if n in inputs:
                obs[n].update(feed[n])
        n_feeds += 1
    if n_feeds == 0:
        raise InputError("the calibration set is empty: give at least one input dict")
    return {n: o.range() for n, o in obs.items()}, n_feeds


def quantize_with_report(mod: IRModule, params: Mapping[str, np.ndarray], calibration: Iterable,
                         dtype: str = "int8", calibrate: str = "minmax", per_channel: bool = True,
                         skip: Sequence[str] = (), target="llvm",
                         progress: bool = True,
                         symmetric_activations: bool = False) -> tuple[IRModule, dict, dict]:
    """``ember.quantize`` with its report (``(qmod, qparams, report)``); ``report`` is what
    ``info["quantization"]`` shows: ``method``, ``num_feeds``, ``layers`` (per layer: kind,
    input/output scale and zero point, weight scale range, per_channel), ``float_ops``,
    ``weight_bytes`` (``{"float32": ..., "quantized": ...}``).

    ``symmetric_activations``: int8 activations with zero point 0 (``scale = max(|lo|, |hi|) /
    127``) instead of asymmetric uint8: the NPU target's form (docs/npu.md)."""
    if dtype != "int8":
        raise QuantizationError(f"dtype={dtype!r}: only 'int8' post-training quantization is "
                                f"implemented; bf16 needs no calibration: ember.compile(model, "
                                f"quantize='bf16')")
    if calibrate not in METHODS:
        raise QuantizationError(f"calibrate={calibrate!r}: use one of {METHODS}")
    params = dict(params or {})
    func = mod["main"]
    layers, floats = select_layers(func, params, skip)
    if not layers:
        raise QuantizationError(
            "nothing to quantize: the model has no 2-D convolution (group 1), Gemm or MatMul "
            "with a constant weight" + (f" outside skip={list(skip)}" if skip else "") +
            (f"; these stay float32: {floats}" if floats else ""))
    names = list(dict.fromkeys([n for l in layers for n in (l.input, l.output)]))
    host = target.host() if hasattr(target, "host") else target
    ranges, n_feeds = calibrate_fn(mod, params, names, calibration, calibrate, host, progress)
    if symmetric_activations:
        act = {n: (symmetric_int8(np.array([ranges[n][0], ranges[n][1]], np.float32), None),
                   np.int8(0)) for n in names}
        act = {n: (np.float32(s.reshape(-1)[0]), z) for n, (s, z) in act.items()}
    else:
        act = {n: affine_uint8(*ranges[n]) for n in names}
    qfunc, qparams, wscales = _rewrite(func, params, layers, act, per_channel)
    before = sum(v.nbytes for v in params.values())
    after = sum(v.nbytes for v in qparams.values())
    report = {"method": calibrate, "num_feeds": n_feeds, "per_channel": per_channel,
              "layers": {l.name: {"kind": l.kind, "input": l.input, "output": l.output,
                                  "input_scale": float(act[l.input][0]),
                                  "input_zero_point": int(act[l.input][1]),
                                  "output_scale": float(act[l.output][0]),
                                  "output_zero_point": int(act[l.output][1]),
                                  "weight_scale_min": float(np.min(wscales[l.weight])),
                                  "weight_scale_max": float(np.max(wscales[l.weight]))}
                         for l in layers},
              "float_ops": floats, "weight_bytes": {"float32": before, "quantized": after},
              "plan": [asdict(l) for l in layers],
              "activation_qparams": {n: [float(s), int(z)] for n, (s, z) in act.items()},
              "weight_scales": {k: v.tolist() for k, v in wscales.items()}}
    return IRModule({**mod.functions, func.name: qfunc}), qparams, report


calibrate_fn = calibrate


def quantize(mod: IRModule, params: Mapping[str, np.ndarray], calibration: Iterable,
             dtype: str = "int8", calibrate: str = "minmax", per_channel: bool = True,
             skip: Sequence[str] = (), target="llvm", progress: bool = True,
             symmetric_activations: bool = False):
    """Post-training int8 quantization of ``mod["main"]`` into the QDQ graph form (module doc).

    Args:
        mod, params: the float model (``ember.frontend.from_onnx`` output).
        calibration: an iterable of input dicts (``{name: ndarray}``, the model's shapes and
            dtypes, finite values); 100 representative samples are typical.
        dtype: ``"int8"`` (s8 weights, u8 activations).
        calibrate: ``"minmax"``, ``"percentile"`` or ``"entropy"`` (``ember.quant.observers``).
        per_channel: one weight scale per output channel (else per tensor).
        skip: output value names of layers to keep in float32.
        symmetric_activations: int8 activations with zero point 0 (the NPU's form) instead of
            asymmetric uint8.
    Returns:
        ``(qmod, qparams)``: the QDQ module and its parameters (int8 weights, int32 biases, the
        other parameters unchanged); ``ember.build(qmod, target, qparams)`` compiles it.
    Raises:
        InputError: calibration feeds with wrong names, shapes, dtypes, or NaN/inf values.
        QuantizationError: nothing to quantize; an unknown ``dtype`` or ``calibrate``.
    """
    qmod, qparams, _ = quantize_with_report(mod, params, calibration, dtype, calibrate,
                                            per_channel, skip, target, progress,
                                            symmetric_activations)
    return qmod, qparams


def _rewrite(func: Function, params: dict, layers: list[QuantLayer], act: dict,
             per_channel: bool):
    """The QDQ function, its parameters, and the weight scales (module doc, step 3)."""
    fb = FunctionBuilder(func.name)
    new: dict[int, object] = {}
    qparams: dict[str, np.ndarray] = {}
    wscales: dict[str, np.ndarray] = {}
    wlayer = {l.weight: l for l in layers}
    blayer = {l.bias: l for l in layers if l.bias}

    def qdq(v, name):
        s, z = act[name]
        q = fb.call("qnn.quantize", [v, Constant(s), Constant(z)],
                    {"axis": 1, "out_dtype": str(np.asarray(z).dtype)}, names=[f"{name}_q"])
        return fb.call("qnn.dequantize", [q, Constant(s), Constant(z)], {"axis": 1},
                       names=[f"{name}_dq"])

    for p in func.params:
        if p.name in wlayer:
            l = wlayer[p.name]
            w = np.asarray(params[p.name], np.float32)
            ax = l.weight_axis if per_channel else None
            s = symmetric_int8(w, ax)
            wscales[p.name] = s
            wq = quantize_weight(w, s, ax)
            qparams[p.name] = wq
            from ..graph.ir import TensorType
            pv = fb.param(p.name, TensorType(wq.shape, "int8"))
            new[id(p)] = fb.call("qnn.dequantize", [pv, Constant(s), Constant(np.zeros_like(
                s, np.int8))], {"axis": l.weight_axis}, names=[f"{p.name}_dq"])
        elif p.name in blayer:
            continue  # after the weights: its scale needs theirs
        else:
            new[id(p)] = fb.param(p.name, p.type)
            if p.name in params:
                qparams[p.name] = params[p.name]
    for p in func.params:
        if p.name in blayer:
            l = blayer[p.name]
            sx = np.float64(act[l.input][0])
            sb = (sx * wscales[l.weight].astype(np.float64)).astype(np.float32)
            b = np.asarray(params[p.name], np.float64)
            bq = np.rint(b / sb.astype(np.float64)).astype(np.int64)
            if np.any(np.abs(bq) >= 2**31):
                bq = np.clip(bq, -2**31 + 1, 2**31 - 1)
            bq = bq.astype(np.int32)
            qparams[p.name] = bq
            from ..graph.ir import TensorType
            pv = fb.param(p.name, TensorType(bq.shape, "int32"))
            new[id(p)] = fb.call("qnn.dequantize", [pv, Constant(sb), Constant(
                np.zeros(sb.shape, np.int32))], {"axis": 0}, names=[f"{p.name}_dq"])
    # the order of the parameters: inputs first as in func (FunctionBuilder kept the order)
    for p in func.params:
        if p.name in act and id(p) in new:
            new[id(p)] = qdq(new[id(p)], p.name)
    for b in func.bindings:
        args = [new.get(id(a), a) for a in b.call.args]
        outs = fb.call(b.call.op, args, dict(b.call.attrs), names=[o.name for o in b.outputs])
        outs = outs if isinstance(outs, tuple) else (outs,)
        for o, n in zip(b.outputs, outs):
            new[id(o)] = qdq(n, o.name) if o.name in act else n
    qf = fb.finish([new.get(id(o), o) for o in func.outputs])
    qf.attrs.update({k: v for k, v in func.attrs.items() if k != "primitive"})
    return qf, qparams, wscales
