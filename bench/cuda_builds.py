"""Registers, spills and shared memory of every CUDA kernel of whole models, without a GPU.

    python bench/cuda_builds.py [OUT.json] [--quick]

Each model is compiled with ``ember.compile(model, target="nvidia/h200")`` in float32 and with
``quantize="fp16"`` (tensor-core GEMMs and convolutions), and its CUDA module is built by NVRTC
/ nvJitLink for sm_90 and sm_80; per model and arch the worst registers per thread, spill bytes
(ptxas; ember's limit ``MAX_SPILL_BYTES``) and static shared memory over its kernels, the kernel
count and the tensor-core kernel count are written to ``OUT.json`` (default
``bench/results/cuda_builds.json``). Models: the nine ONNX light models (randomized weights),
MobileNetV2 at 224, a BERT-base encoder layer (hidden 768, seq 128) and a GPT-2 block.
``--quick``: the small models only.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def models(quick: bool):
    from ember.testing import models as M
    from ember.zoo import LIGHT_MODELS, randomized_light_model
    from test_cuda_models import gpt2_layer
    out = [("gpt2_block_h256_s64", lambda: gpt2_layer(seq=64, hidden=256, heads=4)),
           ("bert_layer_h64_s16", lambda: M.bert_encoder(num_layers=1, hidden=64, heads=2,
                                                         seq=16))]
    if not quick:
        out += [(f"light_{n}", lambda n=n: randomized_light_model(n)) for n in LIGHT_MODELS]
        out += [("mobilenet_v2_224", lambda: M.mobilenet_v2()),
                ("bert_base_layer_h768_s128", lambda: M.bert_encoder(
                    num_layers=1, hidden=768, heads=12, seq=128))]
    return out


def main(argv=None) -> int:
    import ember
    from ember.codegen.nvrtc import MAX_SPILL_BYTES, build_cuda
    args = list(sys.argv[1:] if argv is None else argv)
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    out = Path(args[0]) if args else ROOT / "bench" / "results" / "cuda_builds.json"
    rows = []
    for name, make in models(quick):
        for q in (None, "fp16"):
            t0 = time.perf_counter()
            row = {"model": name, "precision": q or "fp32"}
            try:
                cm = ember.compile(make(), target="nvidia/h200", quantize=q)
                b = build_cuda(cm.source, ["sm_90", "sm_80"])
                row.update(num_kernels=cm.info["num_kernels"],
                           tensor_core_kernels=cm.info.get("tensor_core_kernels", 0))
                for arch, res in sorted(b.resources.items()):
                    row[arch] = {"max_registers": max(r.registers for r in res.values()),
                                 "max_spill_bytes": max(r.spill_bytes for r in res.values()),
                                 "max_shared_bytes": max(r.shared_bytes for r in res.values()),
                                 "kernels": len(res)}
                row["ok"] = all(row[a]["max_spill_bytes"] <= MAX_SPILL_BYTES
                                for a in ("sm_80", "sm_90"))
            except Exception as e:  # noqa: BLE001 - report the model, continue
                row.update(ok=False, error=f"{type(e).__name__}: {str(e)[:500]}")
            row["s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"spill_limit_bytes": MAX_SPILL_BYTES, "models": rows},
                              indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
