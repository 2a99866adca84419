"""The in-model check (``ember.tune.model_check``): tuned kernels timed inside the running
model against the defaults. Its evidence must override the evidence of candidates timed alone
in both directions, it must be recorded as interleaved groups that ``apply_history_best``
reads, and a model built from the checked records must compute what the untuned model does."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import tune
from ember.frontend.onnx import from_onnx
from ember.tune import MeasureInput, MeasureResult, load_records, save_records
from ember.tune.model_check import check_in_model, format_results
from ember.tune.records import MODEL_GROUP, best_records, is_in_model

from .test_rule_template import TARGET, _small_model


def _task_and_pick():
    mod, params = from_onnx(_small_model())
    task = tune.extract_tasks(mod, params, TARGET, algorithms=False)[0].task
    default = task.config_space.get(0).values()
    pick = next(c for c in task.config_space
                if c.values()["tile"] != default["tile"] and c.values()["kblock"] == 0
                and c.values()["order"] == default["order"])
    return mod, params, task, pick


def _evidence(task, pick, speedup, group):
    """Two interleaved repeats in one group: the default at 1 ms, ``pick`` ``speedup`` faster."""
    return [(MeasureInput(TARGET, task, task.config_space.get(0)),
             MeasureResult([1e-3, 1.3e-3], 0, group=group)),
            (MeasureInput(TARGET, task, pick),
             MeasureResult([1e-3 / speedup, 1.3e-3 / speedup], 0, group=group))]


@pytest.mark.parametrize("alone, in_model, applied", [(1.20, 0.95, 0), (1.01, 1.10, 1),
                                                       (1.20, 1.10, 1)])
def test_in_model_evidence_overrides_candidates_timed_alone(tmp_path, alone, in_model, applied):
    mod, params, task, pick = _task_and_pick()
    log = tmp_path / "r.jsonl"
    save_records(log, _evidence(task, pick, alone, "g1")
                 + _evidence(task, pick, in_model, MODEL_GROUP + "x"))
    with tune.apply_history_best(log, margin=0.02) as ctx:
        ember.compile(_small_model(), target=TARGET)
    assert ctx.applied == applied
    # in-model sums are not comparable with kernels timed alone: never the "best" record
    recs = list(load_records(log))
    assert not any(is_in_model(r) for r in best_records(recs).values())


def test_check_in_model_times_the_applied_task_and_records_it(tmp_path):
    mod, params, task, pick = _task_and_pick()
    log = tmp_path / "r.jsonl"
    save_records(log, _evidence(task, pick, 1.5, "g1"))  # alone: clearly faster -> applied
    results = check_in_model(mod, params, TARGET, str(log), rounds=3, repeat=2)
    assert len(results) == 1
    r = results[0]
    assert r.task_key == task.key and r.kernels >= 1
    assert r.default_ms > 0 and r.tuned_ms > 0 and r.speedup > 0
    assert r.kept == (r.speedup >= 1.02)
    model_recs = [x for x in load_records(log) if is_in_model(x)]
    assert sorted(x.config["index"] for x in model_recs) == [0, pick.index]
    assert len({x.result.group for x in model_recs}) == 1
    assert all(len(x.result.costs) == 3 and min(x.result.costs) > 0 for x in model_recs)
    assert format_results(results).startswith(f"in-model check: {int(r.kept)} of 1")
    # the in-model verdict decides what a build applies, and the result is the untuned one's
    x = np.random.default_rng(3).standard_normal((1, 16, 12, 12)).astype("float32")
    base = ember.compile(_small_model(), target=TARGET).run([x])[0]
    with tune.apply_history_best(log) as ctx:
        tuned = ember.compile(_small_model(), target=TARGET)
    assert ctx.applied == int(r.kept)
    np.testing.assert_allclose(tuned.run([x])[0], base, rtol=1e-4, atol=1e-4)


def test_nothing_to_check_without_applied_records(tmp_path):
    mod, params, task, pick = _task_and_pick()
    log = tmp_path / "r.jsonl"
    save_records(log, _evidence(task, pick, 0.8, "g1"))  # alone: slower -> default kept
    assert check_in_model(mod, params, TARGET, str(log), rounds=2, repeat=1) == []
    assert not any(is_in_model(x) for x in load_records(log))
