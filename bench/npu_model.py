"""A quantized ResNet-18 (ember.testing.models.resnet18, seeded random weights, batch 1) on
``Target("npu")``: every int8 convolution and the fc offloaded to the simulated NPU, the rest
(residual adds, pooling, the QDQ steps between them) on the host CPU; compared bit for bit with
the CPU's int8 kernels using the same integer requantization.

    python bench/npu_model.py [--image 224] [--out bench/results/npu_model.json]

Reports the NPU's total cycles, utilization, time at the config's clock and the per-layer
table (``info["npu"]``), which layers fell back, compile times, the wall time of
``model.run`` on the host (NPU layers simulated in functional mode; CPU int8 path for
comparison) and whether the two outputs are identical. Quantization: ``ember.quantize`` with
per-tensor weight scales and symmetric int8 activations on 4 random calibration feeds.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from quant_common import write_result  # noqa: E402

import ember  # noqa: E402
from ember.frontend.onnx import from_onnx  # noqa: E402
from ember.npu.offload import format_layers  # noqa: E402
from ember.testing import models as tm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--out", default="bench/results/npu_model.json")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    model = tm.resnet18(seed=0, image_size=a.image)
    rng = np.random.default_rng(0)
    feeds = [{"data": rng.standard_normal((1, 3, a.image, a.image)).astype(np.float32)}
             for _ in range(5)]
    mod, params = from_onnx(model)
    t0 = time.perf_counter()
    qmod, qparams = ember.quantize(mod, params, feeds[:4], per_channel=False,
                                   symmetric_activations=True, progress=False)
    t_q = time.perf_counter() - t0
    t0 = time.perf_counter()
    npu_m = ember.build(qmod, "npu", dict(qparams))
    t_npu = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ember.PassContext(config={"RealizeQnn.requantize": "fixed"}):
        cpu_m = ember.build(qmod, "llvm", dict(qparams))
    t_cpu = time.perf_counter() - t0
    x = feeds[4]
    walls, wall_cpu = [], []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        y_npu = npu_m.run(x)[0]
        walls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        y_cpu = cpu_m.run(x)[0]
        wall_cpu.append(time.perf_counter() - t0)
    info = npu_m.info["npu"]
    print(format_layers(info))
    res = {"model": f"resnet18 {a.image}x{a.image} batch 1, seeded random weights",
           "host": platform.processor() or platform.machine(),
           "load_avg": os.getloadavg()[0],
           "identical_to_cpu_int8": bool(np.array_equal(y_npu, y_cpu)),
           "max_abs_diff": float(np.max(np.abs(y_npu - y_cpu))),
           "npu_cycles": info["cycles"], "npu_macs": info["macs"],
           "npu_utilization": info["utilization"], "npu_time_ms_at_clock": info["time_ms"],
           "offloaded_layers": len(info["layers"]), "fallback": info["fallback"],
           "float_layers": info["float_layers"], "num_cpu_segments": npu_m.info["num_segments"],
           "quantize_s": t_q, "build_npu_s": t_npu, "build_cpu_int8_s": t_cpu,
           "run_wall_s_npu_simulated": walls, "run_wall_s_cpu_int8": wall_cpu,
           "last_run_split": npu_m.info.get("last_run"), "layers": info["layers"]}
    write_result(res, a.out)


if __name__ == "__main__":
    main()
