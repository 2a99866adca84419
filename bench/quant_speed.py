"""int8 ResNet-50 / BERT in ember: onnxruntime's ``quantize_static`` QDQ model (per-channel, QInt8
weights, QUInt8 activations) run by ember's int8 kernels, against onnxruntime's own int8 run
(agreement in output quantization steps) and timed interleaved (2 threads, batch 1): ember
int8 vs ember fp32 vs onnxruntime int8 vs OpenVINO int8 on the same QDQ model (when the
``openvino`` package is installed; the ``bench`` extra) (vs onnxruntime fp32 for reference).

Usage: ``python bench/quant_speed.py [--model resnet50|bert] [--layers 12] [--threads 2]
[--rounds 15] [--calibration 8]``; writes ``bench/results/quant_speed.json`` (ResNet-50) or
``bench/results/quant_speed_bert.json``. ResNet-50 is ember.zoo's light ResNet-50 with seeded
random weights, calibrated on seeded random images; ``bert`` is
``ember.testing.models.bert_encoder`` BERT-base shaped (hidden 768, 12 heads, sequence 128,
``--layers`` encoder layers), calibrated on seeded random token ids.

Agreement is measured per graph output in steps of the scale of the ``DequantizeLinear``
that makes it (through Identity; ``pooler_output`` is ``Tanh`` of one, 1-Lipschitz, so the
same step bounds it), against onnxruntime's int8 run and against onnxruntime with its graph
optimizations off (``ORT_DISABLE_ALL``: the QDQ graph as written, Q/DQ in float -- the ONNX
semantics of the model, which ember's int8 kernels reproduce).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
from quant_common import ort_quantize_static, write_result  # noqa: E402


def modern(model):
    """``model`` as IR 7 / opset 13 (what onnxruntime's quantizer converts to; the bundled
    model's IR 3 lists only some initializers as inputs, which the converter rejects)."""
    import onnx
    from onnx import version_converter
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = 7
    inits = {i.name for i in m.graph.initializer}
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return version_converter.convert_version(m, 13)


def output_step(path: str) -> float | None:
    """Scale of the DequantizeLinear that makes the graph output, if it is one."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    out = m.graph.output[0].name
    node = next((n for n in m.graph.node if out in n.output), None)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return float(inits[node.input[1]])


def output_steps(path: str) -> list:
    """Per graph output: the scale of the ``DequantizeLinear`` that makes it, found through
    Identity / Tanh (1-Lipschitz) nodes, or None."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    prod = {o: n for n in m.graph.node for o in n.output}
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    steps = []
    for out in m.graph.output:
        n = prod.get(out.name)
        while n is not None and n.op_type in ("Identity", "Tanh"):
            n = prod.get(n.input[0])
        ok = n is not None and n.op_type == "DequantizeLinear" and n.input[1] in inits
        steps.append(float(inits[n.input[1]]) if ok and inits[n.input[1]].size == 1 else None)
    return steps


def agreement(ys: list, refs: list, steps: list) -> dict:
    """``{output index: {max_diff_in_steps, frac_within_one_step, frac_equal}}`` of ``ys``
    against ``refs`` in units of ``steps`` (see ``output_steps``)."""
    res = {}
    for i, (y, r, s) in enumerate(zip(ys, refs, steps)):
        d = np.abs(np.asarray(y, np.float64) - np.asarray(r, np.float64))
        res[i] = {"max_abs_diff": float(d.max()), "step": s,
                  "max_diff_in_steps": float(d.max() / s) if s else None,
                  "frac_within_one_step": float(np.mean(d <= s * 1.001)) if s else None,
                  "frac_equal": float(np.mean(d <= (s or 1) * 1e-3))}
    return res


def bert_case(args, tmp: str):
    """``(fp32 path, QDQ path, feeds, description)`` of the BERT-base shaped encoder with
    ``args.layers`` layers, quantized by onnxruntime (QDQ, per-channel)."""
    import onnx
    from ember.testing.models import bert_encoder, bert_inputs
    model = bert_encoder(num_layers=args.layers, hidden=768, heads=12, seq=128, vocab=30522)
    fp32_path, qdq_path = os.path.join(tmp, "bert.onnx"), os.path.join(tmp, "bert.qdq.onnx")
    onnx.save(model, fp32_path)
    cal = [bert_inputs(model, seed=s) for s in range(args.calibration)]
    ort_quantize_static(fp32_path, qdq_path, cal, per_channel=True, pre_process=True)
    desc = (f"ember.testing.models.bert_encoder BERT-base shaped ({args.layers} layers, hidden "
            f"768, 12 heads, seq 128, seeded random weights), onnxruntime quantize_static QDQ "
            f"per-channel s8 weights / u8 activations")
    return fp32_path, qdq_path, bert_inputs(model, seed=1000), desc


def engines(threads: int, fp32_path: str, qdq_path: str):
    """``(ember int8, ember fp32, onnxruntime int8, onnxruntime fp32, ember int8 compile
    seconds)`` on ``threads`` threads."""
    import onnxruntime as ort
    import ember
    target = f"llvm -num-threads={threads}"
    t0 = time.perf_counter()
    e_int8 = ember.compile(qdq_path, target=target)
    t_c8 = time.perf_counter() - t0
    e_fp32 = ember.compile(fp32_path, target=target)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    o_int8 = ort.InferenceSession(qdq_path, so, providers=["CPUExecutionProvider"])
    o_fp32 = ort.InferenceSession(fp32_path, so, providers=["CPUExecutionProvider"])
    return e_int8, e_fp32, o_int8, o_fp32, t_c8


def openvino_request(threads: int, qdq_path: str):
    """``(OpenVINO infer request on the QDQ model, version)`` (its low-precision
    transformations run it in int8), or ``(None, None)`` without the ``openvino`` package."""
    try:
        import openvino as ov
    except ImportError:
        return None, None
    core = ov.Core()
    core.set_property("CPU", {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
                              "PERFORMANCE_HINT": "LATENCY"})
    return core.compile_model(core.read_model(qdq_path), "CPU").create_infer_request(), \
        ov.__version__


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calibration", type=int, default=8)
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "bert"])
    ap.add_argument("--layers", type=int, default=12, help="BERT encoder layers")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.out is None:
        name = "quant_speed.json" if args.model == "resnet50" else "quant_speed_bert.json"
        args.out = os.path.join(ROOT, "bench", "results", name)
    if args.model == "bert":
        return run_bert(args)

    import onnx
    import onnxruntime as ort
    from ember.zoo import default_model_input, randomized_light_model

    model = modern(randomized_light_model("resnet50", seed=0))
    x = default_model_input(model)
    name = next(iter(x))
    rng = np.random.default_rng(1)
    cal = [{name: rng.uniform(0, 1, x[name].shape).astype(np.float32)}
           for _ in range(args.calibration)]
    tmp = tempfile.mkdtemp()
    fp32_path, qdq_path = os.path.join(tmp, "r50.onnx"), os.path.join(tmp, "r50.qdq.onnx")
    onnx.save(model, fp32_path)
    t0 = time.perf_counter()
    ort_quantize_static(fp32_path, qdq_path, cal, per_channel=True, pre_process=True)
    t_q = time.perf_counter() - t0
    e_int8, e_fp32, o_int8, o_fp32, t_c8 = engines(args.threads, fp32_path, qdq_path)
    n_int8 = sum(1 for s in e_int8.plan["steps"] if s.get("op") == "qnn.conv2d")

    y8 = e_int8.run(x)[0]
    r8 = o_int8.run(None, x)[0]
    yf = o_fp32.run(None, x)[0]
    step = output_step(qdq_path)
    diff = np.abs(y8.astype(np.float64) - r8)
    agree = {"max_abs_diff": float(diff.max()), "output_step": step,
             "max_diff_in_steps": float(diff.max() / step) if step else None,
             "frac_within_one_step": float(np.mean(diff <= step * 1.001)) if step else None,
             "top1_equal_ort_int8": bool(np.argmax(y8) == np.argmax(r8)),
             "ember_int8_vs_fp32_max_abs": float(np.abs(y8 - yf).max()),
             "fp32_output_max_abs": float(np.abs(yf).max())}

    runs = {"ember_int8": lambda: e_int8.run(x), "ember_fp32": lambda: e_fp32.run(x),
            "ort_int8": lambda: o_int8.run(None, x), "ort_fp32": lambda: o_fp32.run(None, x)}
    ov_req, ov_version = openvino_request(args.threads, qdq_path)
    if ov_req is not None:
        runs["openvino_int8"] = lambda: ov_req.infer(x)
        agree["openvino_int8_max_diff_in_steps"] = float(
            np.abs(next(iter(ov_req.infer(x).values())) - r8).max() / step) if step else None
    for f in runs.values():  # warm up
        f()
        f()
    times = {k: [] for k in runs}
    for _ in range(args.rounds):  # interleaved: machine noise hits all alike
        for k, f in runs.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    med = {k: float(np.median(v) * 1e3) for k, v in times.items()}
    ratios = [a / b for a, b in zip(times["ember_int8"], times["ember_fp32"])]
    res = {"model": "ember.zoo light resnet50 (seeded random weights), onnxruntime "
                    "quantize_static QDQ per-channel s8 weights / u8 activations",
           "threads": args.threads, "batch": 1, "rounds": args.rounds,
           "calibration_inputs": args.calibration, "int8_kernels": n_int8,
           "median_ms": med,
           "ember_int8_over_ember_fp32_median_of_pairs": float(np.median(ratios)),
           "ember_int8_over_ort_int8": med["ember_int8"] / med["ort_int8"],
           "ember_int8_over_best_peer_int8": med["ember_int8"] / min(
               med[k] for k in ("ort_int8", "openvino_int8") if k in med),
           "openvino": ov_version,
           "agreement_with_ort_int8": agree, "ort_quantize_s": t_q,
           "ember_int8_compile_s": t_c8, "onnxruntime": ort.__version__,
           "load_average_1_5_15min": os.getloadavg(),
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    write_result(res, args.out)
    return 0


def run_bert(args) -> int:
    """The BERT case: agreement with onnxruntime int8 / its QDQ reference, int8 kernel count,
    interleaved timing; writes ``args.out``."""
    import onnxruntime as ort
    from quant_common import interleaved_times
    tmp = tempfile.mkdtemp()
    t0 = time.perf_counter()
    fp32_path, qdq_path, x, desc = bert_case(args, tmp)
    t_q = time.perf_counter() - t0
    e_int8, e_fp32, o_int8, o_fp32, t_c8 = engines(args.threads, fp32_path, qdq_path)
    so0 = ort.SessionOptions()
    so0.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    o_ref = ort.InferenceSession(qdq_path, so0, providers=["CPUExecutionProvider"])
    ops = [s.get("op") for s in e_int8.plan["steps"]]
    dense = 6 * args.layers + 1  # Q, K, V, output, FFN in/out per layer, and the pooler
    ys, r8, r0, yf = e_int8.run(x), o_int8.run(None, x), o_ref.run(None, x), e_fp32.run(x)
    steps = output_steps(qdq_path)
    agree = {"vs_ort_int8": agreement(ys, r8, steps),
             "vs_ort_qdq_reference": agreement(ys, r0, steps),
             "ort_int8_vs_ort_qdq_reference": agreement(r8, r0, steps),
             "ember_int8_vs_ember_fp32_max_abs": [float(np.abs(a - b).max())
                                                  for a, b in zip(ys, yf)]}
    runs = {"ember_int8": lambda: e_int8.run(x), "ember_fp32": lambda: e_fp32.run(x),
            "ort_int8": lambda: o_int8.run(None, x), "ort_fp32": lambda: o_fp32.run(None, x)}
    ov_req, ov_version = openvino_request(args.threads, qdq_path)
    if ov_req is not None:
        runs["openvino_int8"] = lambda: ov_req.infer(x)
    times = interleaved_times(runs, args.rounds)
    med = {k: float(np.median(v) * 1e3) for k, v in times.items()}
    ratios = [a / b for a, b in zip(times["ember_int8"], times["ember_fp32"])]
    res = {"model": desc, "threads": args.threads, "batch": 1, "rounds": args.rounds,
           "calibration_inputs": args.calibration,
           "int8_kernels": ops.count("qnn.conv2d"), "dense_layers": dense,
           "kernel_ops": {o: ops.count(o) for o in sorted(set(ops), key=str)
                          if not str(o).startswith("@")},
           "fused_kernels": sum(1 for o in ops if str(o).startswith("@")),
           "median_ms": med,
           "ember_int8_over_ember_fp32_median_of_pairs": float(np.median(ratios)),
           "ember_int8_over_best_peer_int8": med["ember_int8"] / min(
               med[k] for k in ("ort_int8", "openvino_int8") if k in med),
           "openvino": ov_version, "agreement": agree, "ort_quantize_s": t_q,
           "ember_int8_compile_s": t_c8, "onnxruntime": ort.__version__,
           "load_average_1_5_15min": os.getloadavg(),
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    write_result(res, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
