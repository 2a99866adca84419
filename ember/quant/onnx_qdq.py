"""The quantized model as a QDQ ONNX file (what ``ember quantize`` writes), calibration sets from
files, and ``ember.compile(..., quantize="int8")``.

``write_qdq_onnx(proto, report)`` applies ``ember.quantize``'s decisions (its report: the
layers, the activations' uint8 scale/zero point, the weights' scales) to the original ONNX
graph: every calibrated tensor ``t`` gets ``QuantizeLinear -> DequantizeLinear`` (its producer
now writes ``t_fp``; the consumers and graph outputs read the dequantized ``t``), every
quantized weight ``w`` becomes an int8 initializer ``w_quantized`` read through
``DequantizeLinear(axis)`` (the same for an int32 bias), in the QDQ format onnxruntime's
``quantize_static`` writes (opset >= 13 for per-axis scales), so onnxruntime and ember both run
it. Graph value names are ember's value names (the importer keeps ONNX names).
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np

from ..errors import InputError, ModelLoadError, QuantizationError


def write_qdq_onnx(proto, report: dict):
    """A copy of ONNX ``proto`` in QDQ form following ``report`` (``quantize_with_report``).

    Raises:
        QuantizationError: the model's opset is below 13, or a quantized tensor has no ONNX
            name in the graph."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 13:
        raise QuantizationError(f"the model has opset {opset}; the QDQ form with per-channel "
                                f"scales needs opset >= 13 (convert it with "
                                f"onnx.version_converter first)")
    inits = {i.name: i for i in g.initializer}
    produced = {o: n for n in g.node for o in n.output}
    graph_inputs = {i.name for i in g.input} - set(inits)
    new_inits, head, after = [], [], {}

    def const(name, arr):
        new_inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    for name, (s, z) in report["activation_qparams"].items():
        sn, zn = const(f"{name}_scale", np.float32(s)), const(f"{name}_zero_point", np.uint8(z))
        if name in graph_inputs:
            q = [helper.make_node("QuantizeLinear", [name, sn, zn], [f"{name}_q"]),
                 helper.make_node("DequantizeLinear", [f"{name}_q", sn, zn], [f"{name}_dq"])]
            for n in g.node:
                for k, i in enumerate(n.input):
                    if i == name:
                        n.input[k] = f"{name}_dq"
            head += q
        elif name in produced:
            p = produced[name]
            p.output[list(p.output).index(name)] = f"{name}_fp"
            after.setdefault(id(p), []).extend([
                helper.make_node("QuantizeLinear", [f"{name}_fp", sn, zn], [f"{name}_q"]),
                helper.make_node("DequantizeLinear", [f"{name}_q", sn, zn], [name])])
        else:
            raise QuantizationError(f"tensor {name!r} has no ONNX name in the graph: cannot "
                                    f"write its QDQ pair")
    for l in report["plan"]:
        for pname, dt in ((l["weight"], "int8"), (l["bias"], "int32")):
            if pname is None:
                continue
            if pname not in inits:
                raise QuantizationError(f"parameter {pname!r} is not an initializer of the "
                                        f"ONNX graph")
            if any(n.name == f"{pname}_quantized" for n in new_inits):
                continue
            w = numpy_helper.to_array(inits[pname]).astype(np.float64)
            ws = np.asarray(report["weight_scales"][l["weight"]], np.float32)
            if dt == "int8":
                axis, s = l["weight_axis"], ws
                shape = [1] * w.ndim
                shape[axis] = -1
                sb = s.reshape(shape) if s.ndim else s
                q = np.clip(np.rint(w / sb), -127, 127).astype(np.int8)
            else:
                sx = np.float64(report["activation_qparams"][l["input"]][0])
                s = (sx * ws.astype(np.float64)).astype(np.float32)
                axis = 0
                q = np.clip(np.rint(w / s.astype(np.float64)), -2**31 + 1,
                            2**31 - 1).astype(np.int32)
            g.initializer.remove(inits[pname])
            const(f"{pname}_quantized", q)
            sn = const(f"{pname}_scale", s)
            zn = const(f"{pname}_zero_point", np.zeros(s.shape, dt))
            head.append(helper.make_node("DequantizeLinear", [f"{pname}_quantized", sn, zn],
                                         [pname], axis=axis))
    nodes = list(head)
    for n in g.node:
        nodes.append(n)
        nodes += after.get(id(n), [])
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    for i in [i for i in g.input if i.name in {p for l in report["plan"]
                                                for p in (l["weight"], l["bias"]) if p}]:
        g.input.remove(i)
    return m


def load_calibration(path: str) -> list[dict]:
    """Calibration feeds from ``path``: an ``.npz`` file whose arrays are named by the model's
    inputs, each with a leading axis over the samples (``x[k]`` is sample ``k``'s input), or a
    directory of ``.npz`` files, one feed (input name -> array) each, in name order.

    Raises:
        InputError: no such file, an empty directory, arrays with different sample counts."""
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.endswith(".npz"))
        if not files:
            raise InputError(f"calibration directory {path!r} holds no .npz files")
        out = []
        for f in files:
            with np.load(os.path.join(path, f)) as z:
                out.append({k: z[k] for k in z.files})
        return out
    if not os.path.exists(path):
        raise InputError(f"calibration file {path!r} does not exist (give an .npz file or a "
                         f"directory of .npz files)")
    try:
        z = np.load(path)
    except (OSError, ValueError) as e:
        raise InputError(f"calibration file {path!r} is not an .npz file: {e}") from None
    with z:
        arrs = {k: z[k] for k in z.files}
    counts = {k: a.shape[0] if a.ndim else 0 for k, a in arrs.items()}
    if not arrs or len(set(counts.values())) != 1 or 0 in counts.values():
        raise InputError(f"calibration file {path!r}: every array needs the same leading "
                         f"number of samples (got {counts})")
    n = next(iter(counts.values()))
    return [{k: a[i] for k, a in arrs.items()} for i in range(n)]


def _batched(feeds: Iterable, inputs: dict) -> Iterable:
    """Feeds whose arrays lack the model's leading batch axis of 1 get it (a per-sample
    ``.npz`` file of ``(C, H, W)`` images for a ``(1, C, H, W)`` input)."""
    for f in feeds:
        if isinstance(f, dict):
            f = {k: (v[None] if k in inputs and np.ndim(v) == len(inputs[k].shape) - 1 and
                     inputs[k].shape[0] == 1 else v) for k, v in f.items()}
        yield f


def quantize_onnx(model, calibration, calibrate: str = "minmax", per_channel: bool = True,
                  skip: Sequence[str] = (), target="llvm", progress: bool = True):
    """``(qdq ModelProto, report)``: ONNX ``model`` (path, bytes or proto) quantized with
    ``ember.quantize`` on ``calibration`` (feeds, or a path for ``load_calibration``)."""
    from ..frontend.onnx import from_onnx, load_model
    from .ptq import quantize_with_report
    proto = load_model(model, [])
    mod, params = from_onnx(proto)
    if isinstance(calibration, (str, os.PathLike)):
        calibration = load_calibration(os.fspath(calibration))
    inputs = {p.name: p.type for p in mod["main"].params if p.name not in params}
    _, _, report = quantize_with_report(mod, params, _batched(calibration, inputs), "int8",
                                        calibrate, per_channel, skip, target, progress)
    return write_qdq_onnx(proto, report), report


def compile_quantized(model, target, shapes, quantize: str, calibration, calibrate="minmax",
                      per_channel=True, skip=(), executor="static"):
    """``ember.compile(model, quantize="int8", calibration=...)``: the model quantized by
    ``ember.quantize`` (the QDQ graph form) and compiled; ``info["quantization"]`` holds the
    report (per-layer scales, the ops that stayed float32, weight bytes before/after) and the
    number of int8 kernels the CPU pipeline made (``int8_kernels``).

    Raises:
        QuantizationError: ``quantize`` is not ``"int8"``, no ``calibration`` given, nothing to
            quantize; InputError: bad calibration feeds (see ``ember.quantize``)."""
    from ..driver import build
    from ..frontend.onnx import from_onnx, load_model
    from .ptq import quantize_with_report
    if quantize != "int8":
        raise QuantizationError(f"quantize={quantize!r}: calibrated quantization is 'int8' "
                                f"only; bf16 (no calibration) is ember.compile(model, "
                                f"quantize='bf16')")
    if calibration is None:
        raise QuantizationError("quantize='int8' needs calibration= (an iterable of input "
                                "dicts, or an .npz file / directory of them)")
    if isinstance(calibration, (str, os.PathLike)):
        calibration = load_calibration(os.fspath(calibration))
    try:
        proto = load_model(model, [])
    except ModelLoadError:
        raise
    mod, params = from_onnx(proto, shapes=shapes)
    inputs = {p.name: p.type for p in mod["main"].params if p.name not in params}
    from ..target import Target
    tgt = Target(target)
    npu = tgt.is_npu  # the NPU's form: per-tensor weight scales, symmetric int8 activations
    qmod, qparams, report = quantize_with_report(mod, params, _batched(calibration, inputs),
                                                 "int8", calibrate, per_channel and not npu,
                                                 skip, tgt, symmetric_activations=npu)
    compiled = build(qmod, target, qparams, _consume_params=True)
    plan = getattr(compiled, "plan", None)
    steps = plan.get("steps", []) if isinstance(plan, dict) else []
    report = {k: v for k, v in report.items() if k not in ("plan", "weight_scales",
                                                          "activation_qparams")}
    report["int8_kernels"] = sum(1 for s in steps if s.get("op") == "qnn.conv2d")
    compiled.info["quantization"] = report
    compiled.info.setdefault("executor", "static")
    return compiled
