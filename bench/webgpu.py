"""WebGPU latency of small models through the public door: ``ember.compile(m, target="webgpu")
.run(feeds)`` against the same model on the CPU (``llvm``), interleaved (webgpu, llvm, webgpu,
llvm...) so a busy host shifts both alike. On lavapipe (Mesa's CPU Vulkan driver) this measures
the WebGPU path's overhead and its schedules, not a GPU; on a machine with a GPU's Vulkan
driver the same script times the GPU.

Usage::

    python bench/webgpu.py               # writes bench/results/gpu_<adapter>.json
    python bench/webgpu.py --repeat 5 --no-write
    python bench/webgpu.py --gemm-ab     # tiled GEMM/conv rule vs the fallback schedule:
                                         # bench/results/webgpu_gemm_ab_<adapter>.json
    nice python bench/webgpu.py --accuracy [NAME ...]   # whole models vs onnxruntime (CPU) at
        # rtol 1e-4 / atol 1e-5: bench/results/webgpu_models_<adapter>.json
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


def _write(out: dict, prefix: str) -> None:
    """``out`` as ``bench/results/<prefix>_<adapter>.json``."""
    tag = re.sub(r"[^a-z0-9]+", "_", str(out["adapter"]).lower()).strip("_")[:40]
    path = os.path.join(os.path.dirname(__file__), "results", f"{prefix}_{tag}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", path)


def _interleaved(models: dict, feeds, repeat: int) -> dict:
    """Median ms of ``m.run(feeds)`` per ``{key: model}``, the models run in turn each round."""
    ts = {k: [] for k in models}
    for _ in range(repeat):
        for key, m in models.items():
            t = time.perf_counter()
            m.run(feeds)
            ts[key].append((time.perf_counter() - t) * 1e3)
    return {k: float(np.median(v)) for k, v in ts.items()}


def _single_op(op: str):
    """A one-node ONNX model: ``MatMul`` 256x256 @ 256x256, or ``Conv`` 1x32x32x32 with a
    32x32x3x3 weight (pads 1) and a bias, then ``Relu``."""
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(0)
    if op == "matmul":
        w = numpy_helper.from_array(r.standard_normal((256, 256)).astype(np.float32), "w")
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        x, y, inits = [1, 256, 256], [1, 256, 256], [w]
    else:
        w = numpy_helper.from_array(r.standard_normal((32, 32, 3, 3)).astype(np.float32), "w")
        b = numpy_helper.from_array(r.standard_normal(32).astype(np.float32), "b")
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["y"])]
        x, y, inits = [1, 32, 32, 32], [1, 32, 32, 32], [w, b]
    g = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def gemm_ab(repeat: int, write: bool) -> int:
    """The GEMM/conv rule (``gpu_gemm_rule``) against the fallback schedule it replaces, on a
    matmul and a conv+relu, interleaved; the "fallback" build removes the rule from the webgpu
    rule list of this process only."""
    from ember.tir.schedule.rules import RULES
    os.environ["EMBER_NO_MODEL_CACHE"] = "1"
    info = adapter_info()
    out = {"adapter": info.get("device"), "repeat": repeat, "cases": {}}
    default = list(RULES["webgpu"])
    for op in ("matmul", "conv"):
        model = _single_op(op)
        tiled = ember.compile(model, target="webgpu")
        RULES["webgpu"] = [r for r in default if r.__name__ != "gpu_gemm_rule"]
        try:
            fallback = ember.compile(model, target="webgpu")
        finally:
            RULES["webgpu"] = default
        feeds = tiled.random_inputs()
        a, b = tiled.run(feeds), fallback.run(feeds)
        err = max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))
        med = _interleaved({"tiled": tiled, "fallback": fallback}, feeds, repeat)
        out["cases"][op] = {"tiled_median_ms": med["tiled"], "fallback_median_ms": med["fallback"],
                            "speedup": med["fallback"] / med["tiled"], "max_abs_diff": err}
        print(f"{op}: tiled {med['tiled']:.2f} ms, fallback {med['fallback']:.2f} ms "
              f"(x{med['fallback'] / med['tiled']:.2f}), max |diff| {err:.2e}", flush=True)
    if write:
        _write(out, "webgpu_gemm_ab")
    return 0


# the nine light models at the smallest resolution they accept (their classifiers follow a
# fixed-size flatten or a fixed 7x7 average pool, except DenseNet-121 and SqueezeNet), and
# ember's built-in transformer and image models
ACCURACY = {
    **{n: (lambda n=n: _light(n, 64 if n in ("densenet121", "squeezenet") else 224))
       for n in ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                 "shufflenet", "squeezenet", "vgg19", "zfnet512")},
    "mobilenet_v2_32px": lambda: M.mobilenet_v2(image_size=32, num_classes=10),
    "resnet18_32px": lambda: M.resnet18(image_size=32, num_classes=10),
    "bert_2x64_seq16": lambda: M.bert_encoder(num_layers=2, hidden=64, heads=2, seq=16),
    "gpt2_2x64_seq16": lambda: M.gpt2_decoder(num_layers=2, hidden=64, heads=4, seq=16),
}


def _light(name: str, size: int):
    from ember.zoo import at_resolution, randomized_light_model
    return at_resolution(randomized_light_model(name), size)


def _accuracy_feeds(name, model):
    from ember.zoo import default_model_input
    if name.startswith("bert"):
        return M.bert_inputs(model)
    if name.startswith("gpt2"):
        return {"input_ids": np.random.default_rng(0).integers(0, 256, (1, 16)).astype(np.int64)}
    return {k: np.random.default_rng(0).standard_normal(v.shape).astype(np.float32)
            for k, v in default_model_input(model).items()}


def accuracy(names, write: bool) -> int:
    """Each model compiled for webgpu, run, and compared with onnxruntime (CPU) at rtol 1e-4 /
    atol 1e-5 (``|got - want| <= atol + rtol * |want|`` everywhere)."""
    import onnxruntime as ort
    info = adapter_info()
    out = {"adapter": info.get("device"), "rtol": 1e-4, "atol": 1e-5, "models": {}}
    for name in names:
        model = ACCURACY[name]()
        feeds = _accuracy_feeds(name, model)
        rec = {"inputs": {k: list(v.shape) for k, v in feeds.items()}}
        try:
            t0 = time.perf_counter()
            cm = ember.compile(model, target="webgpu")
            rec["compile_s"] = time.perf_counter() - t0
            got = cm.run(feeds)
            t0 = time.perf_counter()
            cm.run(feeds)
            rec["run_ms"] = (time.perf_counter() - t0) * 1e3
            sess = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
            want = sess.run(None, feeds)
            rec["max_abs_err"] = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
            rec["passed"] = all(bool(np.all(np.abs(g - w) <= 1e-5 + 1e-4 * np.abs(w)))
                                for g, w in zip(got, want))
            rec["dispatches"] = cm.info["num_dispatches"]
        except Exception as e:  # noqa: BLE001 - every model gets a line
            rec["passed"], rec["error"] = False, f"{type(e).__name__}: {str(e)[:300]}"
        out["models"][name] = rec
        print(name, json.dumps(rec), flush=True)
    if write:
        _write(out, "webgpu_models")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10, help="interleaved rounds per model")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--gemm-ab", action="store_true",
                    help="time the tiled GEMM/conv rule against the fallback schedule")
    ap.add_argument("--accuracy", nargs="*", metavar="NAME", default=None,
                    help=f"whole models vs onnxruntime (default all: {', '.join(ACCURACY)})")
    args = ap.parse_args(argv)
    if args.accuracy is not None:
        return accuracy(args.accuracy or list(ACCURACY), not args.no_write)
    if args.gemm_ab:
        return gemm_ab(args.repeat, not args.no_write)
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
        med = _interleaved({"webgpu": gpu, "llvm": cpu}, feeds, args.repeat)
        out["models"][name] = {"webgpu_median_ms": med["webgpu"], "llvm_median_ms": med["llvm"],
                               "webgpu/llvm": med["webgpu"] / med["llvm"],
                               "webgpu_compile_s": compile_s,
                               "dispatches": gpu.info["num_dispatches"]}
        print(f"{name}: webgpu {med['webgpu']:.2f} ms, llvm {med['llvm']:.2f} ms "
              f"(ratio {med['webgpu'] / med['llvm']:.1f}), {gpu.info['num_dispatches']} "
              f"dispatches, webgpu compile {compile_s:.1f} s", flush=True)
    if not args.no_write:
        _write(out, "gpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
