"""Auto-tuning benchmark: ResNet-18 and ResNet-50 tuned with a bounded budget vs untuned ember vs
onnxruntime, in one run, plus the cost model's ranking quality on held-out measured programs.

For each model (batch 1, 224x224, seeded random weights, nothing downloaded): median latency of
untuned ember, of onnxruntime and of ember built with the tuning records, all at ``--threads``
threads; the tuning wall time and trials; the five heaviest tasks untuned -> tuned (ablation);
and the agreement of the tuned model with onnxruntime. Then, per task with enough successful
measurements in the records, an xgboost cost model trained on the first 70 % of its measured
programs (in measurement order) ranks the other 30 %: pairwise accuracy and top-5 recall.

Usage::

    python bench/tune.py [--models resnet18,resnet50] [--tuner xgb] [--trials 600]
                         [--time-budget 600] [--threads 2] [--records-dir bench/records]

Tuning resumes from the records files, so a second run only re-measures the latencies. On a
machine shared with other work, timings are noisy: the script says so in its output.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def _median_ms(fn, repeat: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def _model(name: str):
    if name == "resnet18":
        from ember.testing.models import resnet18
        return resnet18(seed=0)
    if name == "resnet50":
        from ember.zoo import randomized_light_model
        return randomized_light_model("resnet50", seed=0)
    raise SystemExit(f"unknown model {name}")


def _features_of(rec, info):
    from ember.tune.features import loop_features
    from ember.tune.search import SearchTask, Trace
    from ember.tune.space import ConfigEntity
    if rec.kind == "trace":
        func = SearchTask(info.func).instantiate(Trace.from_json(rec.config))
    else:
        func = info.task.instantiate(ConfigEntity.from_json(rec.config, info.task.config_space))
    return loop_features(func)


def ranking_quality(records: str, tasks, min_records: int = 24) -> dict:
    """Mean pairwise accuracy / top-5 recall of a cost model trained per task on the first 70 %
    of its successful records and tested on the rest."""
    from ember.tune import load_records
    from ember.tune.cost_model import XGBoostCostModel, pairwise_accuracy, top_k_recall
    by_key = {}
    for r in load_records(records):
        if r.ok and r.kind != "default":
            by_key.setdefault(r.task_args[0], []).append(r)
    accs, recalls, n_test = [], [], 0
    for info in tasks:
        recs = by_key.get(info.key, [])
        if len(recs) < min_records:
            continue
        X = np.stack([_features_of(r, info) for r in recs])
        y = np.array([info.flop / r.cost for r in recs])
        cut = int(len(recs) * 0.7)
        m = XGBoostCostModel()
        m.fit(X[:cut], y[:cut])
        pred = m.predict(X[cut:])
        accs.append(pairwise_accuracy(pred, y[cut:]))
        recalls.append(top_k_recall(pred, y[cut:], 5))
        n_test += len(recs) - cut
    return {"tasks": len(accs), "held_out": n_test,
            "pairwise_accuracy": float(np.mean(accs)) if accs else float("nan"),
            "top5_recall": float(np.mean(recalls)) if recalls else float("nan")}


def bench_model(name: str, args) -> dict:
    import onnxruntime as ort

    import ember
    from ember import tune
    from ember.frontend.onnx import from_onnx

    onnx_model = _model(name)
    target = f"llvm -num-threads={args.threads}"
    untuned = ember.compile(onnx_model, target=target)
    inputs = untuned.random_inputs(seed=0)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    ort_out = sess.run(None, inputs)

    records = os.path.join(args.records_dir, f"{name}.{args.tuner}.jsonl")
    os.makedirs(args.records_dir, exist_ok=True)
    t0 = time.perf_counter()
    summary = tune.tune_model(onnx_model, target=target, trials=args.trials, tuner=args.tuner,
                              records=records, time_budget=args.time_budget, repeat=2, number=1,
                              timeout=5, min_trials=args.min_trials, progress=not args.quiet,
                              log=print)
    tune_s = time.perf_counter() - t0
    with tune.apply_history_best(records) as ctx:
        tuned = ember.compile(onnx_model, target=target)
    out = tuned.run(inputs)
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(out, ort_out))

    lat = {"ember untuned": [], "ember tuned": [], "onnxruntime": []}
    for _ in range(3):  # interleaved, so background load hits all three alike
        lat["ember untuned"].append(_median_ms(lambda: untuned.run(inputs), args.repeat))
        lat["onnxruntime"].append(_median_ms(lambda: sess.run(None, inputs), args.repeat))
        lat["ember tuned"].append(_median_ms(lambda: tuned.run(inputs), args.repeat))
    lat = {k: min(v) for k, v in lat.items()}

    mod, params = from_onnx(onnx_model)
    tasks = tune.extract_tasks(mod, params, target, include_all=args.tuner == "search")
    heavy = sorted(summary.tasks, key=lambda t: -t.untuned_s * t.count)[:5]
    return {"model": name, "latency_ms": lat, "tune_s": tune_s, "trials": sum(
        t.trials for t in summary.tasks), "errors": sum(t.errors for t in summary.tasks),
        "tasks": len(summary.tasks), "kernels_tuned": ctx.applied, "max_abs_diff_vs_ort": err,
        "ablation": [(t.op, t.count, t.untuned_s * 1e3, t.best_s * 1e3) for t in heavy],
        "ranking": ranking_quality(records, tasks)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--tuner", default="xgb", choices=["xgb", "ga", "random", "grid", "search"])
    ap.add_argument("--trials", type=int, default=600, help="trial budget per model")
    ap.add_argument("--time-budget", type=float, default=600, help="tuning seconds per model")
    ap.add_argument("--min-trials", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--records-dir", default=os.path.join("bench", "records"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    rows = [bench_model(m, args) for m in args.models.split(",")]
    print()
    print(f"# tuning benchmark ({args.tuner}, {args.threads} threads, batch 1); timings taken on "
          f"a machine shared with other work (load average {os.getloadavg()[0]:.1f}): noisy")
    print(f"{'model':10} {'untuned ms':>11} {'tuned ms':>9} {'ORT ms':>8} {'tuned/ORT':>9} "
          f"{'speed-up':>8} {'trials':>6} {'tune s':>7} {'kernels':>7} {'|diff| vs ORT':>13}")
    for r in rows:
        lat = r["latency_ms"]
        print(f"{r['model']:10} {lat['ember untuned']:11.2f} {lat['ember tuned']:9.2f} "
              f"{lat['onnxruntime']:8.2f} {lat['ember tuned'] / lat['onnxruntime']:9.2f} "
              f"{lat['ember untuned'] / lat['ember tuned']:7.2f}x {r['trials']:6d} "
              f"{r['tune_s']:7.0f} {r['kernels_tuned']:7d} {r['max_abs_diff_vs_ort']:13.2e}")
    for r in rows:
        print(f"\n## {r['model']}: five heaviest tasks (untuned -> tuned, ms per run, x count)")
        for op, count, u, b in r["ablation"]:
            tuned = f"{b:.3f}" if b < float("inf") else "untuned"
            print(f"  {op[:40]:40} x{count}  {u:9.3f} -> {tuned}")
        q = r["ranking"]
        print(f"  cost model on held-out programs: pairwise accuracy {q['pairwise_accuracy']:.3f}, "
              f"top-5 recall {q['top5_recall']:.3f} ({q['tasks']} tasks, {q['held_out']} "
              f"held-out programs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
