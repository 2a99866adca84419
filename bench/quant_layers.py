"""Per-layer int8 vs fp32 in ember: ResNet-50's convolution shapes as one ``qnn.conv2d``
(the channels-last VNNI kernel, ``ember.codegen.microkernel_qgemm``) and as one float32
``nn.conv`` (ember's default schedule: packed GEMM / Winograd), each built with
``ember.build`` and timed interleaved on one thread. Both take and return NCHW as an imported
layer does, so the int8 times include the NHWC transposes of the input and the output. Times are the process's CPU seconds per
run (``time.process_time``), which a shared, overloaded host disturbs far less than wall time.

Usage: ``python bench/quant_layers.py [--rounds 15]``; writes ``bench/results/quant_layers.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
from quant_common import write_result  # noqa: E402

LAYERS = [dict(c=64, h=56, cout=64, k=3, pad=1), dict(c=64, h=56, cout=256, k=1),
          dict(c=256, h=56, cout=128, k=1, stride=2), dict(c=256, h=14, cout=256, k=3, pad=1),
          dict(c=512, h=7, cout=2048, k=1), dict(c=3, h=224, cout=64, k=7, stride=2, pad=3)]


def _build(call, x, consts, target):
    import ember
    from ember.graph.builder import FunctionBuilder
    from ember.graph.ir import IRModule, TensorType
    fb = FunctionBuilder()
    xv = fb.param("x", TensorType(x.shape, str(x.dtype)))
    ps = [fb.param(n, TensorType(a.shape, str(a.dtype))) for n, a in consts.items()]
    y = fb.call(call[0], [xv] + ps, call[1])
    cm = ember.build(IRModule({"main": fb.finish([y])}), target, dict(consts))
    return lambda: cm.run({"x": x})


def int8_layer(sp, rng, target):
    """A ``qnn.conv2d`` of shape ``sp`` on random uint8 data (NCHW in, as imported)."""
    from ember.ops.qnn_conv import pack_weight
    c, h, co, k = sp["c"], sp["h"], sp["cout"], sp["k"]
    s, p = sp.get("stride", 1), sp.get("pad", 0)
    x = rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)
    w = pack_weight(rng.integers(-127, 128, (co, c, k, k)).astype(np.int8))
    consts = {"w": w, "b": rng.integers(-9999, 9999, co).astype(np.int32),
              "m": np.full(co, 1e-4, np.float32)}
    attrs = {"layout": "nchw", "kernel": (k, k), "strides": (s, s), "pads": (p,) * 4,
             "dilations": (1, 1), "x_zp": 3, "y_zp": 5, "lo": -128, "hi": 255,
             "out_dtype": "uint8"}
    return _build(("qnn.conv2d", attrs), x, consts, target)


def fp32_layer(sp, rng, target):
    c, h, co, k = sp["c"], sp["h"], sp["cout"], sp["k"]
    s, p = sp.get("stride", 1), sp.get("pad", 0)
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    consts = {"w": rng.standard_normal((co, c, k, k)).astype(np.float32)}
    attrs = {"strides": [s, s], "pads": [p] * 4, "dilations": [1, 1], "group": 1}
    return _build(("nn.conv", attrs), x, consts, target)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "quant_layers.json"))
    args = ap.parse_args(argv)
    target = "llvm -num-threads=1"
    rng = np.random.default_rng(0)
    rows = []
    for sp in LAYERS:
        f8, f32 = int8_layer(sp, rng, target), fp32_layer(sp, rng, target)
        t8, t32 = [], []
        for _ in range(3):
            f8(), f32()
        for _ in range(args.rounds):
            t = time.process_time()
            f8()
            t8.append(time.process_time() - t)
            t = time.process_time()
            f32()
            t32.append(time.process_time() - t)
        s, p = sp.get("stride", 1), sp.get("pad", 0)
        oh = (sp["h"] + 2 * p - sp["k"]) // s + 1
        macs = oh * oh * sp["cout"] * sp["c"] * sp["k"] ** 2
        m8, m32 = float(np.median(t8)), float(np.median(t32))
        rows.append({"layer": sp, "int8_ms": m8 * 1e3, "fp32_ms": m32 * 1e3,
                     "int8_gops": 2 * macs / m8 / 1e9, "fp32_gflops_direct_equiv": 2 * macs / m32 / 1e9,
                     "int8_over_fp32": m8 / m32})
        print(rows[-1], flush=True)
    write_result({"threads": 1, "rounds": args.rounds, "timer": "process CPU seconds",
                  "layers": rows, "load_average": os.getloadavg(),
                  "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
