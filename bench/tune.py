"""Auto-tuning benchmark: ResNet-18 and ResNet-50 tuned with a bounded budget vs untuned ember vs
onnxruntime, in one run, plus the cost model's ranking quality on held-out measured programs.

For each model (batch 1, 224x224, seeded random weights, nothing downloaded): median latency of
untuned ember, of onnxruntime and of ember built with the tuning records, all at ``--threads``
threads; the tuning wall time and trials; the five heaviest tasks untuned -> tuned (ablation);
and the agreement of the tuned model with onnxruntime. Then, per task with enough successful
measurements in the records, an xgboost cost model trained on the first 70 % of its measured
programs (in measurement order) ranks the other 30 %: pairwise accuracy and top-3 recall.

Each Winograd-eligible convolution's algorithm (direct / F(2x2) / F(4x4), ``conv_algo`` tasks,
``ember.tune.strategy``) is tuned first (``--no-algorithms``: keep the heuristic's). The tuned
kernel space (``--template rule``, the default) is the default schedule rules' own
decisions (``ember.tir.schedule.rules.rule_knobs``: the GEMM rule's register tile, loop order,
K-blocking and parallel fusion), so configuration 0 is the untuned program and is measured
first; each task's best configurations are re-measured against it (``--confirm``) and applied
only when ``--margin`` faster.

Usage::

    python bench/tune.py [--models resnet18,resnet50] [--tuner xgb] [--trials 600]
                         [--time-budget 600] [--threads 2] [--records-dir bench/records]
                         [--out bench/results/tune_rule_xgb.txt]

Tuning resumes from the records files, so a second run only re-measures the latencies. On a
machine shared with other work, timings are noisy: the script says so in its output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing ember


def _model(name: str):
    if name == "resnet18":
        from ember.testing.models import resnet18
        return resnet18(seed=0)
    if name == "resnet50":
        from ember.zoo import randomized_light_model
        return randomized_light_model("resnet50", seed=0)
    raise SystemExit(f"unknown model {name}")


def _features_of(rec, info):
    """The features the tuner's cost model sees: knob features of a template configuration
    (what ``XGBTuner`` uses by default), loop features of a template-free program."""
    from ember.tune.features import loop_features
    from ember.tune.search import SearchTask, Trace
    from ember.tune.space import ConfigEntity
    from ember.tune.tuner.xgb import knob_features
    if rec.kind == "trace":
        return loop_features(SearchTask(info.func).instantiate(Trace.from_json(rec.config)))
    return np.asarray(knob_features(ConfigEntity.from_json(rec.config, info.task.config_space)),
                      np.float32)


def ranking_quality(records: str, tasks, min_records: int = 12) -> dict:
    """Mean pairwise accuracy / top-3 recall of a cost model trained per task on the first 70 %
    of its distinct measured programs (in measurement order) and tested on the rest. The
    truth of a ``rule`` configuration is its median side-by-side speed-up over the default
    (the anchor timed with it), which cancels the machine load of its batch; other programs
    keep their fastest measurement."""
    from ember.tune import load_records
    from ember.tune.cost_model import XGBoostCostModel, pairwise_accuracy, top_k_recall
    from ember.tune.records import is_in_model, paired_speedups
    recs = [r for r in load_records(records) if not is_in_model(r)]
    paired = paired_speedups(recs)
    by_key: dict = {}
    for r in recs:
        if r.ok and r.kind != "default":
            progs = by_key.setdefault(r.task_key, {})
            ident = json.dumps(r.config, sort_keys=True)
            if ident not in progs or r.cost < progs[ident].cost:
                progs[ident] = r
    accs, recalls, n_test = [], [], 0
    for info in tasks:
        if info.task is None:
            continue
        progs = list(by_key.get(info.task.key, {}).values())
        per = paired.get((info.task.key, str(info.task.target)))
        if per:
            progs = [r for r in progs if r.config["index"] == 0 or r.config["index"] in per]
            y = np.array([1.0 if r.config["index"] == 0 else float(np.median(
                per[r.config["index"]])) for r in progs])
        else:
            y = np.array([info.flop / r.cost for r in progs])
        if len(progs) < min_records:
            continue
        X = np.stack([_features_of(r, info) for r in progs])
        cut = int(len(progs) * 0.7)
        m = XGBoostCostModel()
        m.fit(X[:cut], y[:cut])
        pred = m.predict(X[cut:])
        acc = pairwise_accuracy(pred, y[cut:])
        if acc == acc:
            accs.append(acc)
        recalls.append(top_k_recall(pred, y[cut:], 3))
        n_test += len(progs) - cut
    return {"tasks": len(accs), "held_out": n_test,
            "pairwise_accuracy": float(np.mean(accs)) if accs else float("nan"),
            "top3_recall": float(np.mean(recalls)) if recalls else float("nan")}


def kernel_best_ms(models: dict, inputs, rounds: int = 4, repeat: int = 10) -> dict:
    """Per model (same plan order): the sum over its kernels of each kernel's fastest in-model
    time (ms), profiled in interleaved rounds. Less sensitive to a loaded machine than the
    end-to-end median, and it shows what the swapped kernels do inside the model."""
    from ember.runtime.profiler import profile
    best: dict = {k: None for k in models}
    for _ in range(rounds):
        for k, m in models.items():
            p = profile(m, inputs, repeat=repeat)
            mins = [min(run[j][1] for run in p.samples) / 1e3 for j in range(len(p.samples[0]))]
            best[k] = mins if best[k] is None else [min(a, b) for a, b in zip(best[k], mins)]
    return {k: float(sum(v)) for k, v in best.items()}


def task_outcomes(ctx, summary, target: str) -> list[dict]:
    """Per task of ``summary``: the default schedule's fastest measurement (ms per run), the
    best tuned configuration's median side-by-side speed-up over it, and whether
    ``apply_history_best`` (``ctx``) applies it."""
    from ember.target import Target
    from ember.tune.task import task_key
    tgt = str(Target(target))
    out = []
    for t in summary.tasks:
        key = t.name if t.op == "conv_algo" else task_key("rule", [t.name, tgt])
        rec, s = ctx.paired.get((key, tgt), (None, float("nan")))
        cfg = rec.config.get("entity") if rec is not None else None
        out.append({"op": t.op, "count": t.count, "trials": t.trials,
                    "default_ms": t.untuned_s * 1e3, "speedup": s,
                    "best_ms": t.untuned_s * 1e3 / s if s == s else float("nan"),
                    "applied": rec is not None,
                    "config": {n: v for n, _, v in cfg} if cfg else None})
    return out


def bench_model(name: str, args) -> dict:
    import onnxruntime as ort

    import ember
    from ember import tune
    from ember.benchmark import compare_runtimes
    from ember.frontend.onnx import from_onnx
    from ember.tune.model_check import format_results

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
                              records=records, time_budget=args.time_budget, repeat=1,
                              number=args.number, per_call=True, confirm=args.confirm,
                              confirm_rounds=2, timeout=5, min_trials=args.min_trials,
                              progress=not args.quiet, log=print,
                              template=None if args.tuner == "search" else args.template,
                              measure_threads=args.measure_threads,
                              algorithms=not args.no_algorithms, model_check=args.model_check,
                              margin=args.margin, check_top=args.check_top)
    tune_s = time.perf_counter() - t0
    with tune.apply_history_best(records, margin=args.margin) as ctx:
        tuned = ember.compile(onnx_model, target=target)
    out = tuned.run(inputs)
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(out, ort_out))

    # the same interleaved turns as bench/compare.py (ember.benchmark.compare_runtimes: a pause
    # before each turn, so a runtime's still-spinning pool does not take a core from the next,
    # then one untimed run): medians over rounds x repeat runs of each
    del sess  # compare_runtimes opens its own session (its pool must not spin beside ours)
    res = compare_runtimes(onnx_model, inputs, threads=args.threads,
                           repeat=args.rounds * args.repeat, ember_model=untuned,
                           variants={"ember tuned": tuned})
    lat = {("ember untuned" if r.name == "ember" else r.name): r.median_ms for r in res}

    kernels = kernel_best_ms({"ember untuned": untuned, "ember tuned": tuned}, inputs)
    mod, params = from_onnx(onnx_model)
    with ctx:  # the chosen algorithms' kernels (extracting adds to none of ctx's counts)
        tasks = tune.extract_tasks(mod, params, target, include_all=args.tuner == "search",
                                   template=args.template)
    outcomes = task_outcomes(ctx, summary, target)
    heavy = sorted(outcomes, key=lambda t: -t["default_ms"] * t["count"])[:5]
    return {"model": name, "latency_ms": lat, "tune_s": tune_s, "trials": sum(
        t.trials for t in summary.tasks), "errors": sum(t.errors for t in summary.tasks),
        "tasks": len(summary.tasks), "kernels_tuned": ctx.applied,
        "algorithms_changed": ctx.algorithms_applied,
        "algorithms": [t for t in outcomes if t["op"] == "conv_algo"], "kernel_sum_ms": kernels, "max_abs_diff_vs_ort": err,
        "tasks_applied": sum(t["applied"] for t in outcomes), "ablation": heavy,
        "table": summary.table(), "ranking": ranking_quality(records, tasks),
        "in_model": format_results(summary.in_model) if args.model_check else ""}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--tuner", default="xgb", choices=["xgb", "ga", "random", "grid", "search"])
    ap.add_argument("--trials", type=int, default=600, help="trial budget per model")
    ap.add_argument("--time-budget", type=float, default=600, help="tuning seconds per model")
    ap.add_argument("--min-trials", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10, help="latency runs per round")
    ap.add_argument("--rounds", type=int, default=3,
                    help="latency rounds: each runtime's median is over rounds x repeat runs, "
                         "interleaved in turns of 3 as bench/compare.py times them")
    ap.add_argument("--number", type=int, default=10,
                    help="calls per candidate measurement (the fastest counts)")
    ap.add_argument("--confirm", type=int, default=3,
                    help="re-measure each task's K best configs against its default")
    ap.add_argument("--margin", type=float, default=0.02,
                    help="apply a tuned kernel only when this much faster than the default")
    ap.add_argument("--template", default="rule", choices=["rule", "tile"])
    ap.add_argument("--measure-threads", type=int, default=1,
                    help="threads candidates are timed with (1: robust on a shared machine)")
    ap.add_argument("--no-algorithms", action="store_true",
                    help="keep the Winograd heuristic (no conv_algo tasks: direct / F2 / F4)")
    ap.add_argument("--model-check", type=int, default=8,
                    help="rounds of the in-model check of the tuned kernels (0: off)")
    ap.add_argument("--check-top", type=int, default=12,
                    help="candidate configurations per task the in-model check times")
    ap.add_argument("--wide-space", action="store_true",
                    help="a wider GEMM-rule space: 12 register tiles, K-blocks up to 256 and the "
                         "parallel-fusion knob (an experiment; the default space is the rule's)")
    ap.add_argument("--out", help="also write the report (and a JSON of it) to this path")
    ap.add_argument("--records-dir", default=os.path.join("bench", "records"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.wide_space:
        from ember.tir.schedule.rules import gemm
        gemm.MAX_TILE_KNOBS, gemm.KBLOCK_KNOBS = 12, (32, 64, 128, 256)
        gemm.TUNE_PARALLEL_FUSION = True
    rows = [bench_model(m, args) for m in args.models.split(",")]
    lines = report(rows, args)
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


def report(rows, args) -> list[str]:
    L = [f"# python bench/tune.py --models {args.models} --tuner {args.tuner} --template "
         f"{args.template} --trials {args.trials} --time-budget {args.time_budget:g}"
         f" --measure-threads {args.measure_threads} --rounds {args.rounds} --repeat "
         f"{args.repeat} --model-check {args.model_check}"
         + (f" --check-top {args.check_top}" if args.check_top != 4 else "")
         + (" --wide-space" if args.wide_space else "")
         + (" --no-algorithms" if args.no_algorithms else ""),
         f"# tuning benchmark ({args.threads} threads, batch 1); timings taken on a machine "
         f"shared with other work (load average now {os.getloadavg()[0]:.1f}): noisy", "",
         f"{'model':10} {'untuned ms':>11} {'tuned ms':>9} {'ORT ms':>8} {'untuned/ORT':>11} "
         f"{'tuned/ORT':>9} {'speed-up':>8} {'trials':>6} {'tune s':>7} {'applied':>7} "
         f"{'|diff| vs ORT':>13}"]
    for r in rows:
        lat = r["latency_ms"]
        L.append(f"{r['model']:10} {lat['ember untuned']:11.2f} {lat['ember tuned']:9.2f} "
                 f"{lat['onnxruntime']:8.2f} {lat['ember untuned'] / lat['onnxruntime']:11.2f} "
                 f"{lat['ember tuned'] / lat['onnxruntime']:9.2f} "
                 f"{lat['ember untuned'] / lat['ember tuned']:7.2f}x {r['trials']:6d} "
                 f"{r['tune_s']:7.0f} {r['tasks_applied']:3d}/{r['tasks']:<3d} "
                 f"{r['max_abs_diff_vs_ort']:13.2e}")
    L.append("\nsum of each kernel's fastest in-model time (ms; interleaved profiles, less "
             "sensitive to the machine's load than end-to-end medians):")
    for r in rows:
        k = r["kernel_sum_ms"]
        L.append(f"  {r['model']:10} untuned {k['ember untuned']:.2f}  tuned {k['ember tuned']:.2f}"
                 f"  ({k['ember untuned'] / k['ember tuned']:.3f}x; {r['kernels_tuned']} kernel "
                 f"launches use a tuned schedule; {r['algorithms_changed']} convolutions a "
                 f"tuned algorithm)")
    for r in rows:
        L.append(f"\n## {r['model']}: five heaviest tasks, default schedule -> best tuned "
                 f"(ms per run at {args.measure_threads} thread(s); speed-up: median "
                 f"side-by-side, in the model where the in-model check timed it; applied "
                 f"when >= {1 + args.margin:.2f}x)")
        for t in r["ablation"]:
            L.append(f"  {t['op'][:32]:32} x{t['count']}  trials {t['trials']:3d}  "
                     f"{t['default_ms']:7.3f} -> {t['best_ms']:7.3f} ({t['speedup']:.2f}x) "
                     f"{'applied' if t['applied'] else 'kept default'}"
                     f"{'  ' + str(t['config']) if t['config'] else ''}")
        if r["algorithms"]:
            L.append("  algorithm tasks (conv_algo: tile -1 = direct, m = Winograd F(m x m); "
                     "default = the heuristic's):")
        for t in r["algorithms"]:
            L.append(f"    x{t['count']}  default {t['default_ms']:7.3f} ms -> best "
                     f"{t['best_ms']:7.3f} ({t['speedup']:.2f}x) "
                     f"{'applied ' + str(t['config']) if t['applied'] else 'kept default'}")
        if r["in_model"]:
            L.append("  " + r["in_model"].replace("\n", "\n  "))
        q = r["ranking"]
        L.append(f"  cost model (xgboost, knob features) on held-out measured programs: pairwise "
                 f"accuracy {q['pairwise_accuracy']:.3f}, top-3 recall {q['top3_recall']:.3f} "
                 f"({q['tasks']} tasks, {q['held_out']} held-out programs)")
        L.append(f"\n(tune_model's table; kernel times at {args.measure_threads} thread(s); "
                 f"tuned = best median side-by-side speed-up for rule tasks)\n" + r["table"])
    return L


if __name__ == "__main__":
    raise SystemExit(main())
