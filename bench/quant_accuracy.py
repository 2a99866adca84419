"""int8 post-training quantization accuracy on a real trained model: a small CNN trained (torch,
CPU, seconds) on scikit-learn's bundled ``load_digits`` (8x8 images, 10 classes), exported to
ONNX (built with ``onnx.helper`` from the trained weights), quantized by ember with 100
calibration images (``ember.compile(model, quantize="int8", calibration=..., calibrate=m)``
for each method), and by onnxruntime's ``quantize_static`` (QDQ, per-channel, the same 100
images) as a reference row. Top-1 accuracy on the held-out test split, batch 1.

Usage: ``python bench/quant_accuracy.py [--epochs 40]``; writes
``bench/results/quant_accuracy.json``. Needs the ``bench`` extra (scikit-learn, torch).
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


def data(seed: int = 0):
    """``(x_train, y_train, x_test, y_test)``: digits as float32 ``(N, 1, 8, 8)`` in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    return train_test_split(x, d.target.astype(np.int64), test_size=0.25, random_state=seed,
                            stratify=d.target)


def train(x, y, epochs: int, seed: int = 0) -> dict:
    """Train conv(1->16) relu conv(16->32, s2) relu conv(32->32) relu fc(512->10); the
    weights as NumPy arrays."""
    import torch
    from torch import nn
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Flatten(),
                        nn.Linear(512, 10))
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    sd = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    return {"w1": sd["0.weight"], "b1": sd["0.bias"], "w2": sd["2.weight"], "b2": sd["2.bias"],
            "w3": sd["4.weight"], "b3": sd["4.bias"], "wf": sd["7.weight"], "bf": sd["7.bias"]}


def to_onnx(w: dict):
    """The trained network as an ONNX model (opset 13, input ``image`` (1, 1, 8, 8))."""
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Flatten", ["r3"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1)]
    g = helper.make_graph(nodes, "digits_cnn",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def top1(run, x, y) -> float:
    hits = sum(int(np.argmax(run({"image": x[i:i + 1]})) == y[i]) for i in range(len(x)))
    return 100.0 * hits / len(x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--calibration", type=int, default=100)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  "quant_accuracy.json"))
    args = ap.parse_args(argv)
    import onnx
    import onnxruntime as ort
    import ember

    xtr, xte, ytr, yte = data()
    t0 = time.perf_counter()
    w = train(xtr, ytr, args.epochs)
    t_train = time.perf_counter() - t0
    model = to_onnx(w)
    cal = [{"image": xtr[i:i + 1]} for i in range(args.calibration)]
    rows = {}
    fp32 = ember.compile(model)
    rows["ember fp32"] = top1(lambda f: fp32.run(f)[0], xte, yte)
    info = {}
    for method in ("minmax", "percentile", "entropy"):
        q = ember.compile(model, quantize="int8", calibration=cal, calibrate=method)
        rows[f"ember int8 ({method})"] = top1(lambda f: q.run(f)[0], xte, yte)
        qi = q.info["quantization"]
        info[method] = {"int8_kernels": qi["int8_kernels"], "float_ops": qi["float_ops"],
                        "weight_bytes": qi["weight_bytes"]}
    tmp = tempfile.mkdtemp()
    src, dst = os.path.join(tmp, "digits.onnx"), os.path.join(tmp, "digits.qdq.onnx")
    onnx.save(model, src)

    ort_quantize_static(src, dst, cal, per_channel=True)
    sess_f = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    sess_q = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
    rows["onnxruntime fp32"] = top1(lambda f: sess_f.run(None, f)[0], xte, yte)
    rows["onnxruntime quantize_static int8 (QDQ, per-channel, minmax)"] = \
        top1(lambda f: sess_q.run(None, f)[0], xte, yte)
    ember_on_ort = ember.compile(dst)
    rows["ember int8 running onnxruntime's QDQ model"] = \
        top1(lambda f: ember_on_ort.run(f)[0], xte, yte)
    res = {"dataset": "sklearn load_digits, 25% stratified test split (seed 0)",
           "test_images": int(len(xte)), "calibration_images": args.calibration,
           "epochs": args.epochs, "train_s": t_train, "top1_percent": rows,
           "max_int8_drop_points": max(rows["ember fp32"] - v for k, v in rows.items()
                                       if k.startswith("ember int8")),
           "quantization": info, "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    write_result(res, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
