"""Auto-tuning: template search (AutoTVM-style) and template-free search (Ansor-style).

Template tuning::

    from ember import tune
    task = tune.create_task("tile", args, target="llvm")
    tuner = tune.XGBTuner(task)
    tuner.tune(n_trial=200, measure_option=tune.measure_option(),
               callbacks=[tune.progress_bar(), tune.log_to_file("resnet.jsonl")])
    with tune.apply_history_best("resnet.jsonl"):
        model = ember.build(mod, target="llvm", params=params)

Model level: ``tune.extract_tasks(mod, params, target)`` lists the tunable workloads with their
weights; ``tune.tune_model(...)`` tunes them all (the ``ember tune`` command).
"""

from .callbacks import log_to_file, progress_bar  # noqa: F401
from .measure import (LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput,  # noqa: F401
                      MeasureResult, measure_option)
from .records import Record, best_records, load_records, save_records  # noqa: F401
from .space import ConfigEntity, ConfigSpace  # noqa: F401
from .task import Task, create_task, register_template  # noqa: F401
from .tuner import GATuner, GridSearchTuner, RandomTuner, Tuner, XGBTuner  # noqa: F401


def __getattr__(name):
    # heavier or optional pieces load on first use
    if name == "DaskRunner":
        from .dask_runner import DaskRunner
        return DaskRunner
    if name in ("apply_history_best", "ApplyHistoryBest"):
        from . import dispatch
        return getattr(dispatch, name)
    if name in ("extract_tasks", "TaskInfo"):
        from . import extract
        return getattr(extract, name)
    if name == "tune_model":
        from .model import tune_model
        return tune_model
    raise AttributeError(f"module 'ember.tune' has no attribute {name!r}")
