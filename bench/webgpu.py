"""WebGPU latency of small models through the public door: ``ember.compile(m, target="webgpu")
.run(feeds)`` against the same model on the CPU (``llvm``), interleaved (webgpu, llvm, webgpu,
llvm...) so a busy host shifts both alike. On lavapipe (Mesa's CPU Vulkan driver) this measures
the WebGPU path's overhead and its schedules, not a GPU; on a machine with a GPU's Vulkan
driver the same script times the GPU.

Usage::

    python bench/webgpu.py               # writes bench/results/gpu_<adapter>.json
    python bench/webgpu.py --repeat 5 --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ember  # noqa: E402
from ember.runtime.webgpu import adapter_info  # noqa: E402
from ember.testing import models as M  # noqa: E402

MODELS = {
    "bert_1x64_seq16": lambda: M.bert_encoder(num_layers=1, hidden=64, heads=2, seq=16),
    "mobilenet_v2_32px": lambda: M.mobilenet_v2(image_size=32, num_classes=10),
}


def _feeds(name, model, compiled):
    return M.bert_inputs(model) if name.startswith("bert") else compiled.random_inputs()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10, help="interleaved rounds per model")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    info = adapter_info()
    out = {"adapter": info.get("device"), "adapter_type": info.get("adapter_type"),
           "backend": info.get("backend_type"), "repeat": args.repeat, "models": {}}
    for name, make in MODELS.items():
        model = make()
        t0 = time.perf_counter()
        gpu = ember.compile(model, target="webgpu")
        compile_s = time.perf_counter() - t0
        cpu = ember.compile(model, target="llvm")
        feeds = _feeds(name, model, gpu)
        for m in (gpu, cpu):  # warm-up
            m.run(feeds)
        ts = {"webgpu": [], "llvm": []}
        for _ in range(args.repeat):
            for key, m in (("webgpu", gpu), ("llvm", cpu)):
                t = time.perf_counter()
                m.run(feeds)
                ts[key].append((time.perf_counter() - t) * 1e3)
        med = {k: float(np.median(v)) for k, v in ts.items()}
        out["models"][name] = {"webgpu_median_ms": med["webgpu"], "llvm_median_ms": med["llvm"],
                               "webgpu/llvm": med["webgpu"] / med["llvm"],
                               "webgpu_compile_s": compile_s,
                               "dispatches": gpu.info["num_dispatches"]}
        print(f"{name}: webgpu {med['webgpu']:.2f} ms, llvm {med['llvm']:.2f} ms "
              f"(ratio {med['webgpu'] / med['llvm']:.1f}), {gpu.info['num_dispatches']} "
              f"dispatches, webgpu compile {compile_s:.1f} s", flush=True)
    if not args.no_write:
        tag = re.sub(r"[^a-z0-9]+", "_", str(out["adapter"]).lower()).strip("_")[:40]
        path = os.path.join(os.path.dirname(__file__), "results", f"gpu_{tag}.json")
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
        print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
