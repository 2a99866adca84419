"""ember vs onnxruntime (and OpenVINO / PyTorch when installed) on five models, batch 1.

For each model: median latency of every runtime over interleaved runs (``--threads`` threads),
the ratio ember / best peer, ember's agreement with onnxruntime (``ember.benchmark.
outputs_agree``: within atol 1e-5 + rtol 1e-4 of the element plus 1e-4 of the output's RMS, so
large logits that cancel to near zero are judged on their scale), ember's compile time with an empty kernel cache (cold) and a filled one (warm), and the peak RSS of a
fresh process that compiles and runs the model (with the model's weight bytes and activation
arena bytes for scale). ``--ablation MODEL`` instead prints the optimization ladder (naive ->
+ fusion -> + layout/packed weights -> + vectorized micro-kernels) for one model.

Models (seeded random weights, no downloads): resnet50 (the onnx package's light ResNet-50,
``ember.zoo.randomized_light_model``), resnet18, mobilenet_v2, bert_base (seq 128) and bert_4l256
(4 layers, hidden 256, seq 128) from ``ember.testing.models``; ``--models`` also takes any of the
onnx package's light models by name (``ember.zoo.LIGHT_MODELS``: bvlc_alexnet, shufflenet, ...).

``--set broad`` measures the broad set instead: the nine light models plus the torch-written
models of ``ember.testing.broad.BROAD_MODELS`` (ResNeXt, MobileNetV3, UNet, ViT, GPT-2,
DistilBERT, LSTM, GRU, a detection head; exported to ONNX once and cached on disk), and ends
with the geometric mean and the worst of ember / best peer.

Usage: python bench/compare.py [--models resnet50,resnet18,...] [--set five|broad]
                               [--threads 2] [--repeat 20]
                               [--no-compile-times] [--json out.json] [--ablation resnet50]
                               [--config winograd.tile=-1 ...]

Timings taken while other processes load the machine are noisy: the runs are interleaved so
that noise hits every runtime alike, and medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODELS = ["resnet50", "resnet18", "mobilenet_v2", "bert_base", "bert_4l256"]


def model_set(name: str) -> list:
    """The model names of ``--set``: ``five`` (``MODELS``) or ``broad`` (the onnx package's
    light models, then ``ember.testing.broad.BROAD_MODELS``)."""
    if name == "five":
        return list(MODELS)
    if name == "broad":
        from ember import zoo
        from ember.testing.broad import BROAD_MODELS
        return list(zoo.LIGHT_MODELS) + list(BROAD_MODELS)
    raise SystemExit(f"unknown --set {name!r}; choose five or broad")


def build_model(name: str):
    """``(onnx.ModelProto, inputs)`` of a benchmark model."""
    from ember import zoo
    from ember.testing import models as tm
    if name == "resnet50":
        m = zoo.randomized_light_model("resnet50", seed=0)
        return m, zoo.default_model_input(m)
    if name == "resnet18":
        m = tm.resnet18(seed=0)
        return m, zoo.default_model_input(m)
    if name == "mobilenet_v2":
        m = tm.mobilenet_v2(seed=0)
        return m, zoo.default_model_input(m)
    if name == "bert_base":
        m = tm.bert_base(seq=128, seed=0)
        return m, tm.bert_inputs(m)
    if name == "bert_4l256":
        m = tm.bert_encoder(num_layers=4, hidden=256, heads=4, seq=128, seed=0)
        return m, tm.bert_inputs(m)
    if name in zoo.LIGHT_MODELS:  # the onnx package's light models, seeded random weights
        m = zoo.randomized_light_model(name, seed=0)
        return m, zoo.default_model_input(m)
    from ember.testing.broad import BROAD_MODELS, broad_model
    if name in BROAD_MODELS:  # torch-written, exported once and cached on disk
        return broad_model(name, seed=0)
    raise SystemExit(f"unknown model {name!r}; choose from {MODELS}, {zoo.LIGHT_MODELS} or "
                     f"{sorted(BROAD_MODELS)}")


_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
sys.path.insert(0, {bench!r})
from compare import build_model
import ember
m, x = build_model({name!r})
t = time.perf_counter()
cm = ember.compile(m, target="llvm -num-threads={threads}")
dt = time.perf_counter() - t
cm.run(x)
if {save!r}:
    cm.save({save!r})
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")]
rss = int(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"compile_s": dt, "peak_rss_mb": rss,
                  "arena_mb": cm.plan["arena_bytes"] / 2**20,
                  "weights_mb": sum(v.nbytes for v in cm.params.values()) / 2**20}}))
"""


_RUN_CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
import numpy as np, ember
from ember.runtime import executor  # noqa: F401 (everything a run imports, before the baseline)
rss0 = [l for l in open("/proc/self/status") if l.startswith("VmRSS")]
m = ember.load({path!r})
x = {{d["name"]: np.random.default_rng(0).standard_normal(d["shape"]).astype(d["dtype"])
     if d["dtype"].startswith("float") else np.zeros(d["shape"], d["dtype"])
     for d in m.plan["inputs"]}}
m.run(x)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")]
print(json.dumps({{"peak_rss_mb": int(hwm[0].split()[1]) / 1024,
                  "base_rss_mb": int(rss0[0].split()[1]) / 1024}}))
"""


def child_run_artifact(path: str, cache_dir: str) -> dict:
    """Peak RSS of a fresh process that loads a saved compiled model and runs it once."""
    env = dict(os.environ, EMBER_CACHE_DIR=cache_dir)
    r = subprocess.run([sys.executable, "-c", _RUN_CHILD.format(root=ROOT, path=path)],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def child_compile(name: str, threads: int, cache_dir: str, save: str = "") -> dict:
    """Compile and run ``name`` in a fresh process with ``cache_dir`` as the kernel cache."""
    code = _CHILD.format(root=ROOT, bench=os.path.join(ROOT, "bench"), name=name,
                         threads=threads, save=save)
    env = dict(os.environ, EMBER_CACHE_DIR=cache_dir)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _variants(m, threads: int, configs) -> dict:
    """``{"ember[KEY=VALUE]": model}``: ember compiled under ``PassContext(config={KEY: VALUE})``
    for each ``--config KEY=VALUE``."""
    import ember
    out = {}
    for kv in configs or ():
        key, _, val = kv.partition("=")
        try:
            val = json.loads(val)
        except ValueError:
            pass
        with ember.PassContext(config={key: val}):
            out[f"ember[{kv}]"] = ember.compile(m, target=f"llvm -num-threads={threads}",
                                                executor="static")
    return out


def bench_model(name: str, threads: int, repeat: int, compile_times: bool,
                configs=None) -> dict:
    from ember.benchmark import compare_runtimes
    m, x = build_model(name)
    row = {"model": name}
    if compile_times:
        with tempfile.TemporaryDirectory() as cache:
            art = os.path.join(cache, f"{name}.ember")
            cold = child_compile(name, threads, cache, save=art)
            warm = child_compile(name, threads, cache)
            run = child_run_artifact(art, cache)
        row.update({"compile_cold_s": cold.get("compile_s"), "compile_warm_s": warm.get("compile_s"),
                    "peak_rss_compile_mb": cold.get("peak_rss_mb"),
                    "peak_rss_mb": run.get("peak_rss_mb"), "base_rss_mb": run.get("base_rss_mb"),
                    "model_rss_mb": (run["peak_rss_mb"] - run["base_rss_mb"])
                    if "base_rss_mb" in run else None,
                    "weights_mb": cold.get("weights_mb"),
                    "arena_mb": cold.get("arena_mb"), "compile_error": cold.get("error")})
    res = compare_runtimes(m, x, threads=threads, repeat=repeat,
                           variants=_variants(m, threads, configs))
    row["runtimes"] = {r.name: r.median_ms for r in res}
    ember_r = next(r for r in res if r.name == "ember")
    row["max_abs_err"] = ember_r.max_abs_err
    row["matches_onnxruntime"] = ember_r.matches
    peers = {k: v for k, v in row["runtimes"].items() if not k.startswith("ember")}
    if peers:
        best = min(peers, key=peers.get)
        row["best_peer"] = best
        row["ratio_vs_best_peer"] = row["runtimes"]["ember"] / peers[best]
    if "onnxruntime" in peers:
        row["ratio_vs_onnxruntime"] = row["runtimes"]["ember"] / peers["onnxruntime"]
    return row


def format_rows(rows: list, threads: int, repeat: int) -> str:
    names = []
    for r in rows:
        for k in r.get("runtimes", {}):
            if k not in names:
                names.append(k)
    wid = {n: max(15, len(n) + 2) for n in names}
    head = f"{'model':14}" + "".join(f"{n:>{wid[n]}}" for n in names) + \
        f"{'ember/best':>12}{'ember/ort':>11}{'match':>7}{'cold s':>8}{'warm s':>8}{'RSS MB':>8}" \
        f"{'model':>8}{'2(W+A)':>8}"
    out = [f"median latency (ms), batch 1, {threads} threads, {repeat} interleaved runs", head,
           "-" * len(head)]
    for r in rows:
        line = f"{r['model']:14}"
        if "error" in r:
            out.append(line + f"  failed: {r['error']}")
            continue
        for n in names:
            v = r["runtimes"].get(n)
            line += f"{v:{wid[n]}.2f}" if v is not None else f"{'-':>{wid[n]}}"
        line += f"{r.get('ratio_vs_best_peer', float('nan')):12.2f}"
        line += f"{r.get('ratio_vs_onnxruntime', float('nan')):11.2f}"
        line += f"{str(r.get('matches_onnxruntime')):>7}"
        for k in ("compile_cold_s", "compile_warm_s", "peak_rss_mb", "model_rss_mb"):
            v = r.get(k)
            line += f"{v:8.1f}" if isinstance(v, (int, float)) else f"{'-':>8}"
        w, a = r.get("weights_mb"), r.get("arena_mb")
        line += f"{2 * (w + a):8.1f}" if isinstance(w, (int, float)) else f"{'-':>8}"
        out.append(line)
    ratios = [r["ratio_vs_best_peer"] for r in rows if r.get("ratio_vs_best_peer")]
    if ratios:
        worst = max(rows, key=lambda r: r.get("ratio_vs_best_peer") or 0.0)
        out.append(f"ember / best peer over {len(ratios)} models: geometric mean "
                   f"{float(np.exp(np.mean(np.log(ratios)))):.2f}, worst "
                   f"{worst['ratio_vs_best_peer']:.2f} ({worst['model']})")
    out.append("RSS: peak resident memory of a fresh process that loads the saved compiled "
               "model (ember.load) and runs it once; model: that peak minus the process's RSS "
               "after importing numpy and ember (the interpreter's own ~50-60 MB); 2(W+A): twice "
               "the weights plus the activation arena")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=None, help="comma-separated model names (default: "
                    "those of --set)")
    ap.add_argument("--set", default="five", choices=["five", "broad"],
                    help="five: the five benchmark models; broad: the onnx package's light "
                         "models and ember.testing.broad's torch-written models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-compile-times", action="store_true")
    ap.add_argument("--json", default=None, help="also write the results as JSON here")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="also time ember compiled with this PassContext config (e.g. "
                         "winograd.tile=-1, the direct convolutions) in the same interleaved "
                         "runs, as column ember[KEY=VALUE]; repeatable")
    ap.add_argument("--ablation", default=None, metavar="MODEL",
                    help="print the optimization ablation of MODEL instead")
    ap.add_argument("--records", default=None, help="with --ablation: a tuning log for a last "
                    "'+ tuning' rung (bench/tune.py or ember tune --records writes one)")
    args = ap.parse_args(argv)
    if args.ablation:
        from ember.benchmark import ablation, format_ablation
        m, x = build_model(args.ablation)
        steps = ablation(m, x, threads=args.threads, repeat=args.repeat, records=args.records)
        print(format_ablation(steps, f"ablation: {args.ablation}, batch 1, {args.threads} "
                                     f"threads, medians of interleaved runs"))
        if args.json:
            with open(args.json, "w") as f:
                json.dump([vars(s) for s in steps], f, indent=1)
        return 0
    rows = []
    names = args.models.split(",") if args.models else model_set(args.set)
    for name in names:
        try:
            rows.append(bench_model(name, args.threads, args.repeat, not args.no_compile_times,
                                    args.config))
        except Exception as e:  # noqa: BLE001 - one model that fails is reported, not fatal
            rows.append({"model": name, "error": f"{type(e).__name__}: {e}"[:300]})
        print(f"{name}: {rows[-1]}", file=sys.stderr, flush=True)
    print(format_rows(rows, args.threads, args.repeat))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r.get("matches_onnxruntime") is not False and "error" not in r
                    for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
