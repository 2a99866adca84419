"""bf16 compute in ember (``ember.compile(model, quantize="bf16")``: ``vdpbf16ps`` micro-kernels)
against ember float32 and OpenVINO (``INFERENCE_PRECISION_HINT`` bf16 and f32), ResNet-50 and
BERT-base, 2 threads, batch 1, timed interleaved (one run of each engine per round, so machine
noise hits all alike), plus the bf16 outputs' agreement with float32.

Usage: ``python bench/bf16_speed.py [--models resnet50,bert_base] [--threads 2] [--rounds 10]``;
writes ``bench/results/bf16_speed.json``. ResNet-50 is ember.zoo's light model with seeded random
weights; BERT-base is ``ember.testing.models.bert_base`` (12 layers, hidden 768, sequence 128).
OpenVINO rows are left out when ``openvino`` is not installed (``pip install openvino``, the
``bench`` extra).
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
from quant_common import interleaved_times, write_result  # noqa: E402


def build(name: str):
    """``(onnx model, feeds)`` of benchmark model ``name``."""
    if name == "resnet50":
        from ember.zoo import default_model_input, randomized_light_model
        m = randomized_light_model("resnet50", seed=0)
        return m, default_model_input(m)
    if name == "bert_base":
        from ember.testing.models import bert_base, bert_inputs
        m = bert_base(seq=128)
        return m, bert_inputs(m)
    raise SystemExit(f"unknown model {name!r}: resnet50 or bert_base")


def openvino_runners(path: str, feeds: dict, threads: int) -> dict:
    """OpenVINO CPU runs of ``path`` with bf16 and f32 inference precision (empty without
    openvino)."""
    try:
        import openvino as ov
    except ImportError:
        return {}
    core = ov.Core()
    out = {}
    for prec in ("bf16", "f32"):
        cm = core.compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": prec,
                                              "INFERENCE_NUM_THREADS": str(threads),
                                              "NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY"})
        req = cm.create_infer_request()
        out[f"openvino_{prec}"] = (lambda r=req: r.infer(feeds))
    out["_version"] = ov.__version__
    return out


def bench(name: str, threads: int, rounds: int) -> dict:
    import onnx
    import ember
    model, feeds = build(name)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, f"{name}.onnx")
    onnx.save(model, path)
    target = f"llvm -num-threads={threads}"
    t0 = time.perf_counter()
    fp32 = ember.compile(path, target=target)
    t1 = time.perf_counter()
    bf16 = ember.compile(path, target=target, quantize="bf16")
    t2 = time.perf_counter()
    yf, yb = fp32.run(feeds)[0], bf16.run(feeds)[0]
    flat_f, flat_b = yf.reshape(yf.shape[0], -1), yb.reshape(yb.shape[0], -1)
    acc = {"max_abs_diff": float(np.abs(yb - yf).max()),
           "fp32_max_abs": float(np.abs(yf).max()),
           "rel_max_diff": float(np.abs(yb - yf).max() / np.abs(yf).max())}
    if name == "resnet50":
        acc["top1_equal"] = bool((flat_f.argmax(-1) == flat_b.argmax(-1)).all())
        acc["top5_overlap"] = float(len(set(np.argsort(-flat_f[0])[:5]) &
                                        set(np.argsort(-flat_b[0])[:5])) / 5)
    runs = {"ember_fp32": lambda: fp32.run(feeds), "ember_bf16": lambda: bf16.run(feeds)}
    ov = openvino_runners(path, feeds, threads)
    ov_version = ov.pop("_version", None)
    runs.update(ov)
    times = interleaved_times(runs, rounds)
    med = {k: float(np.median(v) * 1e3) for k, v in times.items()}
    pairs = [b / a for a, b in zip(times["ember_fp32"], times["ember_bf16"])]
    res = {"model": name, "median_ms": med,
           "ember_bf16_over_ember_fp32_median_of_pairs": float(np.median(pairs)),
           "ember_bf16_over_ember_fp32_pairs": [round(p, 3) for p in pairs],
           "accuracy_vs_ember_fp32": acc, "quantization_info": bf16.info["quantization"],
           "compile_s": {"fp32": t1 - t0, "bf16": t2 - t1}}
    if "openvino_bf16" in times:
        res["ember_bf16_over_openvino_bf16_median_of_pairs"] = float(np.median(
            [b / o for b, o in zip(times["ember_bf16"], times["openvino_bf16"])]))
        res["openvino"] = ov_version
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "bf16_speed.json"))
    args = ap.parse_args(argv)
    rows = [bench(m, args.threads, args.rounds) for m in args.models.split(",")]
    load = os.getloadavg()
    write_result({"threads": args.threads, "batch": 1, "rounds": args.rounds, "rows": rows,
                  "host": f"{os.cpu_count()} cores shared by several engineers; load average "
                          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end",
                  "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
