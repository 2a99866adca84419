"""One prepared run on a machine with an NVIDIA GPU: ember's CUDA target checked and timed.

    python bench/gpu.py OUT_DIR [--sections ops,models,latency,torch] [--quick]
    python bench/gpu.py OUT_DIR --dry-run [--quick]    # any machine: compile only, no GPU

Each section runs in its own process with a time limit, so one failing or hanging section
does not lose the others' results; each writes ``OUT_DIR/<section>.json`` and the run writes
``OUT_DIR/summary.json`` (per section: ok / failed / timed out, seconds, the tail of its log).

- ``ops``: every registered operator's randomized CPU cases (``tests/op_cases.py``, 2 examples
  each) compiled for the GPU's tag and run on it against the NumPy reference.
- ``models``: whole models on CUDA against onnxruntime CPU (float32: rtol 1e-3, atol 1e-4): a
  BERT layer, a GPT-2 layer, MobileNetV2 and ResNet-18 at 224, the nine ONNX light models; the
  BERT and GPT-2 layers also in float16 (``quantize="fp16"``: tensor-core GEMMs; rtol / atol
  5e-2 against float32 onnxruntime) and their relative error reported.
- ``latency``: batch-1 latency (median of ``run``, inputs and outputs copied each run, through
  ``CUDAModel.benchmark``; plus the per-kernel CUDA-event profile's top kernels) of ResNet-50,
  BERT-base (seq 128) and a 6-camera ResNet-18 backbone (6x3x256x704), float32 and float16
  (``quantize="fp16"``: GEMMs and convolutions on tensor cores, convolutions through im2col).
- ``tune``: every configuration of the tensor-core rule's tuning space for three float16
  workloads (a BERT-base FFN GEMM, ResNet 3x3 and 1x1 convolutions) built through NVRTC and
  measured with CUDA events, each checked against the CPU reference; records in
  ``OUT_DIR/tune.jsonl``.
- ``torch``: the same three in torch eager (cuDNN) and ``torch.compile(mode="max-autotune")``
  (torchvision / torch.nn equivalents: same architecture, random weights), fp32 and fp16,
  when torch with CUDA is importable (else the section fails, the others stand).
- ``nccl``: ember.distributed's NCCL communicator on one rank (a single GPU cannot run two
  NCCL ranks of one communicator): all-reduce, all-gather, reduce-scatter, broadcast and a
  barrier on GPU 0 checked against NumPy, all-reduce latency of 4 KiB and 16 MiB (host-staged),
  and a 1-rank ``DeviceCluster(["gpu:0"])`` running a tensor-parallel GPT-2 layer built for the
  GPU's target against the single-device CPU model (needs ``pip install 'ember[nccl]'``).

On this workplace's H200 machine (15 minutes of device time a session, everything included):
its image has cuda-bindings, NVRTC, nvJitLink, the CUDA runtime headers and the toolkit's
``crt/mma.h`` (found through ``/usr/local/cuda``), onnx, onnxruntime, ml-dtypes, hypothesis and
CUDA torch; run ``PYTHONPATH=$PWD python3 bench/gpu.py $OUT --quick --sections
models,tune,latency`` first (compiles dominate: a few minutes), then ``ops`` and ``torch``.

The target is the tag matching the GPU (``nvidia/h200`` for compute capability 9.0,
``nvidia/a100`` for 8.0, else ``cuda -arch=sm_XX``).

``--dry-run`` (no GPU needed; ``--target`` default ``nvidia/h200``): every section compiles what
it would run (operators, models, the latency models in float32 and float16) to PTX and cubins,
records compile times, kernel counts, tensor-core kernels and the worst registers / spills per
model, and runs nothing on a GPU; the torch section only checks that torch imports. It shows the
script works before a GPU machine is spent on it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

SECTIONS = {"ops": 300, "models": 420, "tune": 240, "latency": 480, "torch": 900,
            "nccl": 300}  # time limits (s)


def gpu_target() -> str:
    """The ember target of device 0 (raises ``DeviceError`` without a GPU)."""
    from ember.runtime.cuda import _driver, _ok
    cu = _driver()
    dev = _ok(cu, cu.cuDeviceGet(0), "cuDeviceGet")
    A = cu.CUdevice_attribute
    major = _ok(cu, cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                "attribute")
    minor = _ok(cu, cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                "attribute")
    return {(9, 0): "nvidia/h200", (8, 0): "nvidia/a100", (7, 5): "nvidia/nvidia-t4"}.get(
        (major, minor), f"cuda -arch=sm_{major}{minor}")


PARTIAL: list = []  # the section's partial-results file (one JSON line per case)
DRY: list = []      # [True] under --dry-run: compile only


def _build_info(cm) -> dict:
    """Compile-side facts of a CUDA model: kernels, tensor-core kernels, worst registers and
    spills over its kernels (ptxas, per arch)."""
    out = {"num_kernels": cm.info.get("num_kernels"),
           "tensor_core_kernels": cm.info.get("tensor_core_kernels"),
           "compile_s": round(cm.info.get("compile_s", 0.0), 2)}
    for arch, res in cm.binary.resources.items():
        out[f"{arch}_max_registers"] = max((r.registers for r in res.values()), default=0)
        out[f"{arch}_max_spill_bytes"] = max((r.spill_bytes for r in res.values()), default=0)
    return out


def _record(results: list, name: str, fn) -> None:
    """Run case ``fn`` and append its result (or error) to ``results`` and the partial file,
    so a section that times out keeps what it measured."""
    t0 = time.perf_counter()
    try:
        extra = fn() or {}
        results.append({"name": name, "ok": True, "s": round(time.perf_counter() - t0, 2),
                        **extra})
    except Exception as e:  # one case failing must not stop the section
        results.append({"name": name, "ok": False, "s": round(time.perf_counter() - t0, 2),
                        "error": f"{type(e).__name__}: {str(e)[:2000]}"})
    print(json.dumps(results[-1])[:300], flush=True)
    if PARTIAL:
        with open(PARTIAL[0], "a") as f:
            f.write(json.dumps(results[-1]) + "\n")


# sections ---------------------------------------------------------------------------------------

def section_ops(target: str, quick: bool) -> dict:
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from op_cases import CASES

    from ember.testing import assert_matches_reference
    results = []
    from test_cuda_ops import CPU_ONLY as skip
    for op in sorted(set(CASES) - set(skip))[: 20 if quick else None]:
        def one(op=op):
            n = {"examples": 0}

            @settings(max_examples=2, deadline=None, database=None)
            @given(data=st.data())
            def check(data):
                case = CASES[op](data.draw)
                if DRY:
                    from ember.testing import op_module
                    ember_compile_module(op_module(op, case.inputs, case.attrs), target)
                else:
                    assert_matches_reference(op, case.inputs, case.attrs, rtol=case.rtol,
                                             atol=case.atol, target=target)
                n["examples"] += 1
            check()
            return n
        _record(results, op, one)
    return {"target": target, "results": results,
            "passed": sum(r["ok"] for r in results), "total": len(results)}


def ember_compile_module(mod, target):
    """``ember.build`` of a graph module (the ops section's dry run)."""
    import ember
    return ember.build(mod, target)


def _models(quick: bool):
    from ember.testing import models as M
    from ember.zoo import LIGHT_MODELS, default_model_input, randomized_light_model
    from test_cuda_models import gpt2_layer
    import numpy as np
    rng = np.random.default_rng(0)
    img = lambda m, s=224: {m.graph.input[0].name: rng.standard_normal(  # noqa: E731
        (1, 3, s, s)).astype(np.float32)}
    bert = (lambda: M.bert_encoder(num_layers=1, hidden=256, heads=4, seq=128),
            lambda m: M.bert_inputs(m))
    gpt2 = (lambda: gpt2_layer(seq=64, hidden=256, heads=4),
            lambda m: {"x": rng.standard_normal((1, 64, 256)).astype(np.float32)})
    out = [("bert_layer", *bert), ("gpt2_layer", *gpt2),
           ("bert_layer/fp16", *bert), ("gpt2_layer/fp16", *gpt2),
           ("mobilenet_v2", lambda: M.mobilenet_v2(), img),
           ("resnet18", lambda: M.resnet18(), img)]
    if not quick:
        out += [(f"light_{n}", lambda n=n: randomized_light_model(n),
                 lambda m: default_model_input(m)) for n in LIGHT_MODELS]
    return out


def section_models(target: str, quick: bool) -> dict:
    import numpy as np
    import onnxruntime as ort

    import ember
    results = []
    for name, make, feeds_of in _models(quick):
        def one(make=make, feeds_of=feeds_of, fp16=name.endswith("/fp16")):
            m = make()
            cm = ember.compile(m, target=target, quantize="fp16" if fp16 else None)
            info = _build_info(cm)
            if DRY:
                return info
            feeds = feeds_of(m)
            sess = ort.InferenceSession(m.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
            want = sess.run(None, feeds)
            got = cm.run(feeds)
            errs, rel = [], []
            tol = (5e-2, 5e-2) if fp16 else (1e-3, 1e-4)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=tol[0], atol=tol[1])
                d = np.abs(g.astype(np.float64) - w)
                errs.append(float(d.max()) if g.size else 0.0)
                rel.append(float(np.linalg.norm(d) / max(np.linalg.norm(w), 1e-30)))
            return {**info, "max_abs_err": errs, "rel_l2_err": rel,
                    "num_launches": cm.info.get("num_launches")}
        _record(results, name, one)
    return {"target": target, "results": results,
            "passed": sum(r["ok"] for r in results), "total": len(results)}


def _tune_kernels():
    """``(name, scheduled-kernel spy model)``: float16 GEMM and convolution workloads of the
    latency models (a BERT-base FFN GEMM, a ResNet 3x3 convolution, a 1x1 convolution)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)

    def one(op_nodes, x_shape, y_shape, inits):
        g = helper.make_graph(op_nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    w = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)  # noqa: E731
    return [
        ("bert_ffn_128x768x3072", one([helper.make_node("MatMul", ["x", "W"], ["y"])],
                                      [1, 128, 768], [1, 128, 3072], {"W": w(768, 3072)})),
        ("resnet_conv3x3_64_56", one([helper.make_node("Conv", ["x", "W"], ["y"],
                                                       pads=[1, 1, 1, 1])],
                                     [1, 64, 56, 56], [1, 64, 56, 56], {"W": w(64, 64, 3, 3)})),
        ("resnet_conv1x1_256_14", one([helper.make_node("Conv", ["x", "W"], ["y"])],
                                      [1, 1024, 14, 14], [1, 256, 14, 14],
                                      {"W": w(256, 1024, 1, 1)})),
    ]


def section_tune(target: str, quick: bool) -> dict:
    """Every configuration of the tensor-core rule's tuning space (``rule`` tasks) for a few
    float16 workloads, built with ``CUDABuilder`` and measured with ``CUDARunner`` (CUDA
    events; each output checked against the CPU reference kernel): checks every warp tile /
    warp count on the GPU and reports the best against the default (configuration 0). The
    records go to ``OUT_DIR/tune.jsonl`` (the usual format, for ``apply_history_best``)."""
    import ember
    import ember.driver as driver
    from ember.target import Target
    from ember.tune.cuda_measure import CUDABuilder, CUDARunner
    from ember.tune.extract import register_workload
    from ember.tune.measure import MeasureInput
    from ember.tune.records import encode
    from ember.tune.task import Task
    os.environ["EMBER_NO_MODEL_CACHE"] = "1"
    results = []
    rec_path = Path(PARTIAL[0]).with_name("tune.jsonl")
    for name, model in _tune_kernels()[: 1 if quick else None]:
        def one(model=model):
            seen = []
            orig = driver.schedule_kernels
            driver.schedule_kernels = lambda k, t, lv, *r: (seen.extend(k),
                                                            orig(k, t, lv, *r))[1]
            try:
                ember.compile(model, target=target, quantize="fp16")
            finally:
                driver.schedule_kernels = orig
            kern = max(seen, key=lambda k: k.attrs.get("flops", 0) or 0)
            task = Task("rule", [register_workload(kern), str(Target(target))], target)
            # every warp tile x warp count without unrolling, and the default's unrolled twin
            cfgs = [c for i, c in enumerate(task.config_space)
                    if c.values()["unroll"] == 0 or i == 0 or
                    {**c.values(), "unroll": 0} == task.config_space.get(0).values()]
            inputs = [MeasureInput(task.target, task, c) for c in cfgs]
            builds = CUDABuilder().build(inputs)
            row = {"configs": len(inputs), "built": sum(b.error_no == 0 for b in builds)}
            if DRY:
                return row
            res = CUDARunner().run(inputs, builds)
            with open(rec_path, "a") as f:
                for i, r in zip(inputs, res):
                    f.write(encode(i, r) + "\n")
            ok = [(r.mean, i.config.values()) for i, r in zip(inputs, res) if r.ok]
            bad = [(i.config.values(), r.error_msg[:200]) for i, r in zip(inputs, res)
                   if not r.ok and builds[inputs.index(i)].error_no == 0]
            default = res[0].mean if res[0].ok else None
            best = min(ok, key=lambda t: t[0]) if ok else None
            return {**row, "measured_ok": len(ok), "failed_on_gpu": bad[:10],
                    "default_us": default and default * 1e6,
                    "best_us": best and best[0] * 1e6, "best_config": best and best[1],
                    "speedup_vs_default": (default / best[0]) if default and best else None}
        _record(results, name, one)
    return {"target": target, "results": results}


def _torch_latency(make_module, shape_or_inputs, fp16: bool, mode: str, number: int) -> float:
    """Median ms of a torch module on CUDA (eager or torch.compile), synchronized."""
    import torch
    mod = make_module().cuda().eval()
    inputs = shape_or_inputs() if callable(shape_or_inputs) else \
        [torch.randn(*shape_or_inputs, device="cuda")]
    if fp16:
        mod = mod.half()
        inputs = [x.half() if x.is_floating_point() else x for x in inputs]
    if mode == "compile":
        mod = torch.compile(mod, mode="max-autotune")
    times = []
    with torch.inference_mode():
        for _ in range(5):
            mod(*inputs)
        torch.cuda.synchronize()
        for _ in range(number):
            t0 = time.perf_counter()
            mod(*inputs)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def six_camera_resnet18():
    """ResNet-18 on a batch of 6 camera images of 256x704 (its global average pool makes the
    classifier independent of the image size)."""
    from ember.testing import models as M
    m = M.resnet18(batch=6)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value, dims[3].dim_value = 256, 704
    return m


def section_latency(target: str, quick: bool) -> dict:
    import numpy as np

    import ember
    from ember.testing import models as M
    from ember.zoo import randomized_light_model
    number = 10 if quick else 50
    rng = np.random.default_rng(0)
    cases = {
        "resnet50": (lambda: randomized_light_model("resnet50"), None, (1, 3, 224, 224)),
        "bert_base_seq128": (lambda: M.bert_base(seq=128), None, None),
        "resnet18_6cam_256x704": (six_camera_resnet18, None, (6, 3, 256, 704)),
    }
    results = []
    for name, (make, shapes, shape) in cases.items():
        for fp16 in (False, True):
            def ember_row(make=make, shapes=shapes, fp16=fp16):
                m = make()
                cm = ember.compile(m, target=target, shapes=shapes,
                                   quantize="fp16" if fp16 else None)
                info = {**_build_info(cm), "dtype": "float16" if fp16 else "float32"}
                if DRY:
                    return info
                feeds = M.bert_inputs(m) if "input_ids" in cm.input_names else \
                    {n: rng.standard_normal(s).astype(np.float32)
                     for n, s in cm.input_shapes.items()}
                stats = cm.benchmark(feeds, number=number, warmup=3)
                from ember.runtime.profiler import profile
                top = profile(cm, feeds, repeat=5, warmup=1).top(5)
                return {**info, "median_ms": stats["median_ms"], "min_ms": stats["min_ms"],
                        "top_kernels": [{"name": k.name, "op": k.op, "ms": k.ms}
                                        for k in top]}
            _record(results, f"{name}/ember/{'fp16' if fp16 else 'fp32'}", ember_row)
    return {"target": target, "results": results, "device": _device_name()}


def section_torch(target: str, quick: bool) -> dict:
    """torch eager (cuDNN) and torch.compile(mode="max-autotune") on the same GPU, fp32 and fp16;
    eager rows first (torch.compile's autotuning may run into the section's time limit)."""
    import torch
    if DRY:
        return {"torch": torch.__version__, "cuda": torch.cuda.is_available(), "results": []}
    if not torch.cuda.is_available():
        raise RuntimeError("torch has no CUDA device here")
    number = 10 if quick else 50

    def bert():
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, activation="gelu",
                                                 batch_first=True)
        return torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)

    def backbone():
        import torchvision
        r = torchvision.models.resnet18()
        return torch.nn.Sequential(*list(r.children())[:-2])

    def resnet50():
        import torchvision
        return torchvision.models.resnet50()
    tcases = {"resnet50": (resnet50, (1, 3, 224, 224)),
              "bert_base_seq128": (bert, (1, 128, 768)),
              "resnet18_6cam_256x704": (backbone, (6, 3, 256, 704))}
    results = []
    for mode in ("eager", "compile"):
        for name, (mk, shape) in tcases.items():
            # --quick: torch.compile (minutes of autotuning per model) in fp16 only
            for fp16 in ((True,) if quick and mode == "compile" else (False, True)):
                def row(mk=mk, shape=shape, fp16=fp16, mode=mode):
                    return {"median_ms": _torch_latency(mk, shape, fp16, mode, number),
                            "dtype": "float16" if fp16 else "float32"}
                _record(results, f"{name}/torch-{mode}/{'fp16' if fp16 else 'fp32'}", row)
    return {"torch": torch.__version__, "results": results, "device": _device_name()}


def section_nccl(target: str, quick: bool) -> dict:
    if DRY:  # collectives on the GPU: nothing to compile
        return {"results": [], "dry_run": "skipped: NCCL collectives need the GPU"}
    import numpy as np
    from mpi4py import MPI

    from ember.distributed.comm_nccl import NCCLCommunicator, nccl_version
    results = []
    comm = NCCLCommunicator(MPI.COMM_WORLD, 0, timeout=60)
    rng = np.random.default_rng(0)

    def collectives():
        x = rng.standard_normal((3, 5, 7)).astype(np.float32)
        np.testing.assert_array_equal(comm.all_reduce(x), x)            # 1 rank: the sum is x
        np.testing.assert_array_equal(comm.all_gather(x, 1, [5]), x)
        np.testing.assert_array_equal(comm.reduce_scatter(x, 2, [7]), x)
        np.testing.assert_array_equal(comm.broadcast(x, 0), x)
        i = rng.integers(-9, 9, (4, 6)).astype(np.int64)
        np.testing.assert_array_equal(comm.all_reduce(i), i)
        comm.barrier()
        return {"nccl_version": nccl_version(), "stats": dict(comm.stats)}
    _record(results, "nccl 1-rank collectives == numpy", collectives)

    def latency():
        out = {}
        for n in (1024, 4 << 20):
            x = np.ones(n, np.float32)
            comm.all_reduce(x)
            ts = []
            for _ in range(20):
                t = time.perf_counter()
                comm.all_reduce(x)
                ts.append(time.perf_counter() - t)
            out[f"all_reduce_{n * 4}_bytes_median_us"] = round(float(np.median(ts)) * 1e6, 1)
        return out
    _record(results, "nccl all_reduce latency (host-staged, 1 rank)", latency)
    comm.close()

    def cluster_model():
        import ember
        from ember.distributed import DeviceCluster, partition_for_distributed
        from ember.frontend.onnx import from_onnx
        from ember.testing.models import gpt2_decoder
        m = gpt2_decoder(num_layers=1, hidden=64, heads=4, seq=8, vocab=96, max_position=8)
        mod, params = from_onnx(m)
        feeds = {"input_ids": rng.integers(0, 96, (1, 8)).astype(np.int64)}
        ref = ember.build(mod, "llvm", params).run(feeds)[0]
        cluster = DeviceCluster(["gpu:0"], timeout=60)
        try:
            with cluster:
                dm = ember.build(partition_for_distributed(mod, params, "tensor"), target)
            got = dm.run(feeds)[0]
        finally:
            cluster.close()
        err = float(np.max(np.abs(got - ref)))
        assert err < 1e-3, err
        return {"max_abs_err": err, "stats": dm.last_stats}
    _record(results, "DeviceCluster(['gpu:0']) tensor-parallel GPT-2 == CPU", cluster_model)
    return {"target": target, "results": results,
            "passed": sum(r["ok"] for r in results), "total": len(results)}


def _device_name() -> str:
    try:
        from ember.runtime.cuda import _driver, _ok
        cu = _driver()
        return _ok(cu, cu.cuDeviceGetName(128, _ok(cu, cu.cuDeviceGet(0), "dev")),
                   "name").decode().rstrip("\0")
    except Exception as e:
        return f"? ({e})"


# driver -----------------------------------------------------------------------------------------

def run_section(name: str, out: Path, quick: bool, target: str | None = None,
                dry: bool = False) -> None:
    PARTIAL[:] = [out / f"{name}.partial.jsonl"]
    DRY[:] = [True] if dry else []
    if dry:
        target = target or "nvidia/h200"
    fn = {"ops": section_ops, "models": section_models, "tune": section_tune,
          "latency": section_latency, "torch": section_torch, "nccl": section_nccl}[name]
    try:
        target = target or gpu_target()
        res = fn(target, quick)
    except Exception:
        res = {"target": target, "error": traceback.format_exc()}
    (out / f"{name}.json").write_text(json.dumps(res, indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="folder for the result files")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="fewer operators, models and runs")
    ap.add_argument("--target", help="ember target (default: the tag of GPU 0); with no GPU "
                                     "the compiles still run, every run fails with DeviceError")
    ap.add_argument("--dry-run", action="store_true",
                    help="compile everything (PTX, cubins) and run nothing: no GPU needed")
    ap.add_argument("--section", help=argparse.SUPPRESS)  # a child process: one section
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.section:
        run_section(args.section, out, args.quick, args.target, args.dry_run)
        return 0
    summary = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
               "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()}
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        cmd = [sys.executable, __file__, str(out), "--section", name] + \
            (["--quick"] if args.quick else []) + \
            (["--target", args.target] if args.target else []) + \
            (["--dry-run"] if args.dry_run else [])
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=SECTIONS[name] * (3 if args.dry_run else 1),
                               env=env)
            res = out / f"{name}.json"
            status = "ok" if r.returncode == 0 and res.exists() and \
                "error" not in json.loads(res.read_text()) else "failed"
            log = (r.stdout + r.stderr)[-3000:]
        except subprocess.TimeoutExpired as e:
            status = "timed out"
            log = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                   else (e.stdout or ""))[-3000:]
        summary[name] = {"status": status, "s": round(time.perf_counter() - t0, 1), "log": log}
        (out / f"{name}.log").write_text(log)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(f"{name}: {status} in {summary[name]['s']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
