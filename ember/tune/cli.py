"""The ``ember tune`` sub-command, as functions for ``ember.cli`` to mount.

    t = sub.add_parser("tune", help="auto-tune a model's kernels, writing tuning records")
    add_tune_arguments(t)
    t.set_defaults(fn=run_tune)

and for ``ember compile --records FILE``: ``with records_context(args.records): ...compile...``.

``ember tune MODEL --target T --trials N --tuner xgb|ga|random|grid|search --records FILE
[--dask ADDRESS] [--time-budget S] [--max-tasks K]`` shows a progress bar per task (best GFLOP/s
so far, trials, errors) and ends with the per-task summary table.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

TUNER_CHOICES = ["xgb", "ga", "random", "grid", "search"]


def add_tune_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``ember tune``'s arguments to ``p``."""
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="llvm", help="target to tune for (default llvm)")
    p.add_argument("--trials", type=int, default=200, help="total measurement budget "
                   "over all tasks (default 200; resumed records count)")
    p.add_argument("--tuner", choices=TUNER_CHOICES, default="xgb",
                   help="xgb/ga/random/grid: template tuners; search: template-free")
    p.add_argument("--records", help="JSON-lines records file to append to and resume from "
                   "(default MODEL.tune.jsonl)")
    p.add_argument("--dask", metavar="ADDRESS", help="measure on a dask distributed cluster "
                   "(scheduler address, e.g. tcp://host:8786)")
    p.add_argument("--time-budget", type=float, metavar="S", help="stop measuring after S s")
    p.add_argument("--max-tasks", type=int, metavar="K", help="tune only the K heaviest tasks")
    p.add_argument("--early-stopping", type=int, metavar="N",
                   help="stop a task after N trials without improvement (every tuner)")
    p.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic input dims")
    p.add_argument("--template", choices=["rule", "tile"], default=None,
                   help="rule: tune the default schedule rules' own knobs where they have "
                   "them (default); tile: the multi-level tiling template everywhere "
                   "(template tuners only; refused with --tuner search)")
    p.add_argument("--confirm", type=int, default=3, metavar="K",
                   help="re-measure each rule task's K best configurations and its default, "
                   "interleaved, before choosing (default 3; 0 = off)")
    p.add_argument("--measure-threads", type=int, metavar="N",
                   help="time candidates with N threads (default: the target's; 1 is robust "
                   "on a machine shared with other busy processes)")
    p.add_argument("--no-algorithms", action="store_true",
                   help="keep the Winograd heuristic's choice per 3x3 convolution instead of "
                   "tuning it (direct / F(2x2) / F(4x4) conv_algo tasks)")
    p.add_argument("--model-check", type=int, default=8, metavar="R",
                   help="time the tuned kernels inside the running model against the "
                   "defaults for R interleaved rounds and keep only the tasks that are faster "
                   "there (default 8; 0 = off)")
    p.add_argument("--check-top", type=int, default=12, metavar="N",
                   help="configurations per task the in-model check times (default 12)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run_tune(args: argparse.Namespace) -> int:
    """Run ``ember tune`` for parsed ``args``; returns the exit status (ember errors propagate
    for ``ember.cli`` to print)."""
    from ..cli import _parse_shapes  # the CLI's own --shape parser (typed InputError)
    from .model import default_records, tune_model
    try:
        summary = tune_model(args.model, target=args.target, trials=args.trials,
                             tuner=args.tuner, records=args.records, dask=args.dask,
                             shapes=_parse_shapes(args.shape),
                             early_stopping=args.early_stopping, time_budget=args.time_budget,
                             max_tasks=args.max_tasks, progress=not args.no_progress,
                             template=args.template, confirm=args.confirm, per_call=True,
                             repeat=1, number=10, measure_threads=args.measure_threads,
                             algorithms=not args.no_algorithms, model_check=args.model_check,
                             check_top=args.check_top, log=lambda s: print(s, file=sys.stdout))
    except KeyboardInterrupt:
        print(f"\ninterrupted: what was measured is kept in "
              f"{args.records or default_records(args.model)}; run the same command again to "
              f"resume (measured candidates are skipped)", file=sys.stderr)
        raise
    return 0 if summary.tasks else 1


def records_context(path: str | None):
    """``apply_history_best(path)`` when ``path`` is given, else a no-op context."""
    if not path:
        return contextlib.nullcontext()
    from .dispatch import apply_history_best
    return apply_history_best(path)
