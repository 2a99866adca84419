"""torch.compile(backend="ember") vs torch.compile (Inductor) vs eager PyTorch on the CPU.

Models (plain torch, seeded random weights, ``ember.testing.torch_models``): a ResNet-50-shaped
CNN (bottleneck layers 3-4-6-3, width 64, 224x224 image) and a BERT-base-shaped encoder (12
layers, hidden 768, 12 heads, sequence 128, with an attention mask). Batch 1,
``torch.set_num_threads(threads)`` and ember's target ``-num-threads=threads``, under
``torch.no_grad()``. Each round runs every method ``--number`` times in turn (interleaved, so
machine noise hits all alike); the medians over all rounds are reported, with each compiled
output checked against eager (rtol 1e-4, atol 1e-5 scaled to the output's magnitude).

Usage: ``python bench/torch_compile.py [--threads 2] [--rounds 5] [--number 4]
[--models resnet50,bert_base] [--out bench/results/torch_compile.txt]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing ember


def _models():
    from ember.testing import torch_models as tm
    return {
        "resnet50": lambda: tm.resnet(layers=(3, 4, 6, 3), width=64, image=224, classes=1000),
        "bert_base": lambda: tm.bert(vocab=30522, ctx=512, d=768, heads=12, layers=12, seq=128),
    }


def _flat(out):
    import torch
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _close(got, want) -> bool:
    return all(np.allclose(g.numpy(), w.numpy(), rtol=1e-4,
                           atol=1e-5 * max(1.0, float(w.abs().max())))
               for g, w in zip(_flat(got), _flat(want)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=4)
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "torch_compile.txt"))
    args = ap.parse_args(argv)

    import torch
    import torch._dynamo
    from ember.frontend.torch import ember_backend

    torch.set_num_threads(args.threads)
    backend = "ember" if "ember" in torch._dynamo.list_backends() else ember_backend
    target = f"llvm -num-threads={args.threads}"
    cpu = platform.processor() or platform.machine()
    how = ('backend="ember" (entry point)' if backend == "ember" else
           "backend=ember.frontend.torch.ember_backend (no entry point installed)")
    lines = [f"# bench/torch_compile.py: torch {torch.__version__}, {cpu}, {os.cpu_count()} "
             f"CPUs visible, threads={args.threads}, batch 1, rounds={args.rounds} x "
             f"number={args.number}, interleaved, median ms; load average at start "
             f"{os.getloadavg()[0]:.1f}",
             f"# ember backend through {how}, options target={target!r}"]
    print("\n".join(lines), flush=True)
    for name in args.models.split(","):
        model, inputs = _models()[name]()
        with torch.no_grad():
            t0 = time.perf_counter()
            want = model(*inputs)
            eager_first = time.perf_counter() - t0
            torch._dynamo.reset()
            runs = {"eager": model}
            compile_s = {}
            for label, make in (("inductor", lambda: torch.compile(model)),
                                ("ember", lambda: torch.compile(model, backend=backend,
                                                                options={"target": target}))):
                fn = make()
                t0 = time.perf_counter()
                got = fn(*inputs)
                compile_s[label] = time.perf_counter() - t0
                if not _close(got, want):
                    print(f"{name}: {label} output differs from eager", flush=True)
                    compile_s[label] = float("nan")
                runs[label] = fn
            times = {k: [] for k in runs}
            for _ in range(args.rounds):
                for k, fn in runs.items():
                    for _ in range(args.number):
                        t0 = time.perf_counter()
                        fn(*inputs)
                        times[k].append((time.perf_counter() - t0) * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        line = (f"{name}: eager {med['eager']:.1f} ms, inductor {med['inductor']:.1f} ms, "
                f"ember {med['ember']:.1f} ms; ember/inductor {med['ember'] / med['inductor']:.2f}, "
                f"ember/eager {med['ember'] / med['eager']:.2f}; first call (compile) inductor "
                f"{compile_s['inductor']:.0f} s, ember {compile_s['ember']:.0f} s "
                f"(eager first call {eager_first * 1e3:.0f} ms); load average at end "
                f"{os.getloadavg()[0]:.1f}, {time.strftime('%H:%M UTC', time.gmtime())}")
        print(line, flush=True)
        lines.append(line)
        del runs, model
        torch._dynamo.reset()
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
