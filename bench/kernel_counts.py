"""Operators and kernels per model: ONNX nodes, graph bindings after import, and kernels after
the pass pipeline at opt_level 0, 2 (the default) and 3; with ``--check``, each model is also
compiled (at ``--opt-level``, default 2) with seeded random weights and compared with
onnxruntime.

Usage: ``python bench/kernel_counts.py [--check [--opt-level 3]] [MODEL ...]`` (the onnx package's light models
by default).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing ember

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def counts(model) -> dict:
    """``{"onnx_nodes", "bindings", "kernels_O0", "kernels_O2", "kernels_O3"}`` for a model."""
    import ember
    from ember.frontend import from_onnx
    from ember.graph.passes import optimize
    mod, params = from_onnx(model)
    out = {"onnx_nodes": len(model.graph.node), "bindings": len(mod.main.bindings)}
    for level in (0, 2, 3):
        with ember.PassContext(opt_level=level):
            opt, _ = optimize(mod, "llvm", params)
        out[f"kernels_O{level}"] = len(opt.main.bindings)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=LIGHT)
    ap.add_argument("--check", action="store_true", help="compile and compare with onnxruntime")
    ap.add_argument("--opt-level", type=int, default=2, help="opt_level of the --check build")
    args = ap.parse_args(argv)
    import ember
    from ember.zoo import default_model_input, randomized_light_model
    print(f"{'model':<14} {'onnx nodes':>10} {'bindings':>8} {'kernels O0':>10} "
          f"{'kernels O2':>10} {'kernels O3':>10}" + ("  max |err| vs ORT   compile s"
                                                       if args.check else ""))
    for name in args.models:
        model = randomized_light_model(name)
        c = counts(model)
        line = (f"{name:<14} {c['onnx_nodes']:>10} {c['bindings']:>8} {c['kernels_O0']:>10} "
                f"{c['kernels_O2']:>10} {c['kernels_O3']:>10}")
        if args.check:
            import onnxruntime as ort
            x = default_model_input(model)
            want = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, x)
            t = time.perf_counter()
            with ember.PassContext(opt_level=args.opt_level):
                m = ember.compile(model)
            secs = time.perf_counter() - t
            err = max(float(np.max(np.abs(g - w)) / max(1e-12, float(np.max(np.abs(w)))))
                      for g, w in zip(m.run(x), want))
            line += f"  {err:>17.2e}   {secs:>9.1f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
