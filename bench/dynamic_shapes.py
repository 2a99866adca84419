"""Dynamic shapes (issue 18): a BERT-style encoder and a GPT-2-style decoder exported from
torch with dynamic batch and sequence axes, compiled ONCE with ``ember.compile(...,
dynamic=...)``, then run at five shapes each against onnxruntime (rtol 1e-4, atol 1e-5), with
``info["compile_count"]`` checked after the runs.

Speed, through the public door: at one shape, the dynamic model against the same model
compiled statically for that shape (``shapes=``), and onnxruntime on the dynamic model as the
peer row, timed paired and interleaved (A B A B ...) on a noisy shared host; and the first run
at a new shape against the steady state at that shape.

    python bench/dynamic_shapes.py [--repeat 15] [--target "llvm -num-threads=1"]
                                   [--out bench/results/dynamic_shapes.json]

Models: one pre-LN transformer layer (d=64, 4 heads, FFN 256, vocabulary 100, 128
positions), token ids in, hidden states out; the decoder adds GPT-2's causal mask (a
``tril`` buffer sliced to ``seq x seq``, ``masked_fill``) and a tied LM head.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

SHAPES = [(1, 1), (1, 16), (2, 37), (4, 64), (8, 128)]
SPEED_SHAPE = (4, 64)
NEW_SHAPE = (3, 100)


def _models(tmp: str) -> dict:
    import torch
    import torch.nn as nn

    class Layer(nn.Module):
        def __init__(self, causal: bool, d=64, h=4, vocab=100, npos=128):
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(npos, d)
            self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.h, self.causal = h, causal
            self.register_buffer("bias", torch.tril(torch.ones(npos, npos)).view(1, 1, npos, npos))

        def forward(self, ids):
            B, T = ids.shape
            x = self.emb(ids) + self.pos.weight[:T]
            q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
            hd = x.shape[-1] // self.h
            q, k, v = (t.view(B, T, self.h, hd).transpose(1, 2) for t in (q, k, v))
            a = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            if self.causal:  # GPT-2: the tril buffer cut to the sequence
                a = a.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            z = (a.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
            x = x + self.o(z)
            x = x + self.f2(torch.nn.functional.gelu(self.f1(self.ln2(x))))
            if self.causal:  # tied LM head
                return self.lnf(x) @ self.emb.weight.t()
            return x

    out = {}
    for name, causal in (("bert_style_encoder", False), ("gpt2_style_decoder", True)):
        torch.manual_seed(0)
        m = Layer(causal).eval()
        path = os.path.join(tmp, f"{name}.onnx")
        torch.onnx.export(m, (torch.randint(0, 100, (2, 7)),), path, input_names=["ids"],
                          output_names=["y"], opset_version=17, dynamo=False,
                          dynamic_axes={"ids": {0: "batch", 1: "seq"},
                                        "y": {0: "batch", 1: "seq"}})
        out[name] = path
    return out


def _paired(fns: dict, inputs, repeat: int) -> dict:
    """Median ms of each callable, timed interleaved (one round runs each once)."""
    times = {k: [] for k in fns}
    for f in fns.values():
        f(inputs)  # warm
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f(inputs)
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--target", default="llvm -num-threads=1",
                    help="ember target of both compiles (one thread: steadier on a shared host)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "dynamic_shapes.json"))
    args = ap.parse_args(argv)
    import onnxruntime as ort

    import ember
    rng = np.random.default_rng(0)
    results = {"host": platform.node(), "cpus": os.cpu_count(), "target": args.target,
               "repeat": args.repeat, "models": {}}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in _models(tmp).items():
            t0 = time.perf_counter()
            dyn = ember.compile(path, args.target, dynamic={"batch": (1, 8), "seq": (1, 128)})
            compile_s = time.perf_counter() - t0
            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = 1 if "threads=1" in args.target \
                else 0
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            rows = []
            for b, s in SHAPES:
                ids = rng.integers(0, 100, (b, s)).astype(np.int64)
                got = dyn.run({"ids": ids})[0]
                want = sess.run(None, {"ids": ids})[0]
                close = bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))
                ok &= close
                rows.append({"shape": [b, s], "max_abs_err": float(np.abs(got - want).max()),
                             "allclose_rtol1e-4_atol1e-5": close})
            r = {"compile_s": round(compile_s, 2), "shapes": rows,
                 "compile_count_after_runs": dyn.info["compile_count"]}
            ok &= dyn.info["compile_count"] == 1
            # speed at one shape: dynamic vs a static compile for that shape vs onnxruntime
            b, s = SPEED_SHAPE
            static = ember.compile(path, args.target, shapes={"ids": (b, s)})
            ids = rng.integers(0, 100, (b, s)).astype(np.int64)
            med = _paired({"ember_dynamic": dyn.run, "ember_static": static.run,
                           "onnxruntime": lambda x: sess.run(None, x)}, {"ids": ids},
                          args.repeat)
            r["speed_shape"] = [b, s]
            r["median_ms"] = {k: round(v, 3) for k, v in med.items()}
            r["dynamic_over_static"] = round(med["ember_dynamic"] / med["ember_static"], 3)
            # first run at a shape never run before vs the steady state at that shape
            ids = rng.integers(0, 100, NEW_SHAPE).astype(np.int64)
            t0 = time.perf_counter()
            dyn.run({"ids": ids})
            first = (time.perf_counter() - t0) * 1e3
            steady = _paired({"steady": dyn.run}, {"ids": ids}, args.repeat)["steady"]
            r["new_shape"] = list(NEW_SHAPE)
            r["first_run_ms"] = round(first, 3)
            r["steady_ms"] = round(steady, 3)
            r["first_over_steady"] = round(first / steady, 3)
            r["compile_count_final"] = dyn.info["compile_count"]
            results["models"][name] = r
            print(name, json.dumps(r))
    results["all_close_and_one_compile"] = bool(ok)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
