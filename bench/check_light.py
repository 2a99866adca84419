"""Compile the onnx package's 9 light models with ember and compare with their stored expected
outputs (``light_*_output_0.pb``; inputs are the onnx backend runner's dummy data:
``arange(n) / n``). Prints max abs/rel error, compile time and latency per model.

Usage: python bench/check_light.py [name ...] [--time]
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ember  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
NAMES = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def dummy_input(vi) -> np.ndarray:
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                  for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def check(name: str, timeit: bool = False) -> bool:
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    m = onnx.load(path)
    inits = {i.name for i in m.graph.initializer}
    feeds = {vi.name: dummy_input(vi) for vi in m.graph.input if vi.name not in inits}
    exp = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
    t0 = time.perf_counter()
    cm = ember.compile(path)
    tc = time.perf_counter() - t0
    out = cm.run(feeds)[0]
    err = np.abs(out - exp)
    ok = np.allclose(out, exp, rtol=1e-3, atol=1e-5)
    line = (f"{name:14s} {'OK ' if ok else 'BAD'} maxabs={err.max():.2e} "
            f"maxrel={(err / (np.abs(exp) + 1e-12)).max():.2e} compile={tc:.1f}s")
    if timeit:
        b = cm.benchmark(feeds, number=5, warmup=1)
        line += f" median={b['median_ms']:.1f}ms"
    print(line, flush=True)
    return ok


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    ok = all([check(n, "--time" in sys.argv) for n in (args or NAMES)])
    sys.exit(0 if ok else 1)
