"""ResNet-50 latency and compile time: ember vs onnxruntime, batch 1, 2 threads.

Prints, in one run: ember's and onnxruntime's median latency (ms) on the onnx package's light
ResNet-50 with seeded random weights, ember's cold compile time (empty kernel cache) and warm
compile time (cache filled). Usage: ``python bench/latency.py [--threads 2] [--repeat 20]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing ember


def _compile_seconds(cache_dir: str) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of ember.compile in a fresh process (so no in-process state is
    reused); ``cpu`` is the process's user+system time plus its children's (the C compiler),
    which a busy host inflates far less than the wall time."""
    code = ("import os, time, ember; from ember.zoo import randomized_light_model as r; "
            "m = r('resnet50'); c = os.times(); t = time.perf_counter(); ember.compile(m); "
            "w = time.perf_counter() - t; d = os.times(); "
            "print(w, sum(d[i] - c[i] for i in range(4)))")
    env = dict(os.environ, EMBER_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--compile-only", action="store_true",
                    help="only the cold and warm compile times")
    args = ap.parse_args(argv)

    import ember
    import onnxruntime as ort
    from ember.zoo import default_model_input, randomized_light_model

    with tempfile.TemporaryDirectory() as cache:
        cold = _compile_seconds(cache)
        warm = _compile_seconds(cache)
    if args.compile_only:
        print(f"ResNet-50 ember compile: cold {cold[0]:.2f} s, warm {warm[0]:.2f} s (wall); "
              f"cold {cold[1]:.2f} s, warm {warm[1]:.2f} s (CPU, compiler processes included); "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        return 0

    onnx_model = randomized_light_model("resnet50", seed=0)
    x = default_model_input(onnx_model)
    model = ember.compile(onnx_model, target=f"llvm -num-threads={args.threads}")
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    y = model.run(x)[0]
    ref = sess.run(None, x)[0]
    ok = np.allclose(y, ref, rtol=1e-4, atol=1e-5)

    # interleave the two runtimes so machine noise hits both alike
    te, to = [], []
    model.run(x), sess.run(None, x)
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        model.run(x)
        te.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        sess.run(None, x)
        to.append((time.perf_counter() - t0) * 1e3)
    me, mo = float(np.median(te)), float(np.median(to))
    print(f"ResNet-50, batch 1, {args.threads} threads, {args.repeat} interleaved runs")
    print(f"  ember        median {me:9.2f} ms")
    print(f"  onnxruntime  median {mo:9.2f} ms  ({ort.__version__})")
    print(f"  ratio ember/onnxruntime: {me / mo:.2f}x")
    print(f"  ember compile: cold {cold[0]:.2f} s, warm {warm[0]:.2f} s (wall); "
          f"cold {cold[1]:.2f} s, warm {warm[1]:.2f} s (CPU, compiler processes included); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"  outputs match onnxruntime (rtol 1e-4, atol 1e-5): {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
