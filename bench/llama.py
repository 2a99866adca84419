"""Llama-style decoder latency: ember vs onnxruntime, batch 1, 2 threads.

The model is ``ember.testing.llama.llama_decoder`` (2 layers, d=512, 8 query heads, 2 key/value
heads, FFN 1408; RMSNormalization, RotaryEmbedding, Attention-23 with a KV cache): prefill of
128 and 1024 tokens, and one decode step on a 128- and a 1024-token cache; and the causal
attention of 1024 tokens alone (``attn1024``: one Attention node, the decoder's head geometry).
Per case ember is checked against onnxruntime (rtol 1e-4 / atol 1e-5), then both are timed
interleaved by ``ember.benchmark.compare_runtimes`` (turns of runs, a settling pause between
runtimes so one's spinning pool does not take the other's cores); the medians are printed and
written to ``bench/results/llama.txt``.

Usage: ``python bench/llama.py [--threads 2] [--repeat 20] [--cases prefill128,...]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing ember

CASES = {"prefill128": (128, 0), "prefill1024": (1024, 0), "decode128": (1, 128),
         "decode1024": (1, 1024), "attn1024": None}


def _attention_only(seq: int = 1024):
    """One causal Attention-23 node, the decoder's geometry: q (1, 8, seq, 64), k/v (1, 2, seq,
    64) (the kernel alone, next to onnxruntime's Attention kernel)."""
    from onnx import TensorProto, helper
    F = TensorProto.FLOAT
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)
    g = helper.make_graph([node], "attention", [
        helper.make_tensor_value_info("q", F, [1, 8, seq, 64]),
        helper.make_tensor_value_info("k", F, [1, 2, seq, 64]),
        helper.make_tensor_value_info("v", F, [1, 2, seq, 64])],
        [helper.make_tensor_value_info("y", F, [1, 8, seq, 64])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "llama.txt"))
    args = ap.parse_args(argv)

    import onnxruntime as ort

    import ember
    from ember.benchmark import compare_runtimes
    from ember.testing.llama import llama_decoder, llama_inputs

    lines = [f"# bench/llama.py: ember vs onnxruntime {ort.__version__}, batch 1, "
             f"{args.threads} threads, {args.repeat} interleaved runs, median; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
             f"load {os.getloadavg()[0]:.1f}",
             "# compile s: ember.compile wall time with the kernel cache as found",
             f"{'case':<12} {'ember ms':>10} {'ort ms':>10} {'ember/ort':>10} {'compile s':>10}"]
    print("\n".join(lines), flush=True)
    for name in args.cases.split(","):
        if CASES[name] is None:
            model = _attention_only()
            rng = np.random.default_rng(0)
            feeds = {i.name: rng.standard_normal([d.dim_value for d in
                                                  i.type.tensor_type.shape.dim]).astype(np.float32)
                     for i in model.graph.input}
        else:
            model = llama_decoder(*CASES[name])
            feeds = llama_inputs(model)
        t0 = time.perf_counter()
        cm = ember.compile(model, target=f"llvm -num-threads={args.threads}")
        compile_s = time.perf_counter() - t0
        rows = {r.name: r for r in compare_runtimes(model, feeds, threads=args.threads,
                                                    repeat=args.repeat, ember_model=cm)}
        if not rows["ember"].matches:
            raise SystemExit(f"{name}: ember differs from onnxruntime (max abs err "
                             f"{rows['ember'].max_abs_err})")
        e, o = rows["ember"].median_ms, rows["onnxruntime"].median_ms
        line = f"{name:<12} {e:>10.2f} {o:>10.2f} {e / o:>10.2f} {compile_s:>10.1f}"
        lines.append(line)
        print(line, flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
