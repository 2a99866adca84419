"""Each tuner finds the known best configuration of a synthetic space within a stated budget;
early stopping, callbacks, records and resuming."""

import pytest

from ember import tune
from ember.tune import load_records

from .synthetic import SyntheticBuilder, SyntheticRunner, synthetic_cost


@pytest.fixture(scope="module")
def task():
    return tune.create_task("test.synthetic", [64, 8])


def _best_index(task):
    return min(task.config_space, key=synthetic_cost).index


def _tune(tuner, n_trial, **kw):
    runner = SyntheticRunner()
    tuner.tune(n_trial, tune.measure_option(SyntheticBuilder(), runner), **kw)
    return runner.measured


# budgets: the space has 1008 points; each seeded tuner must reach the unique best within
@pytest.mark.parametrize("make, budget", [
    (lambda t: tune.GridSearchTuner(t), 1008),
    (lambda t: tune.RandomTuner(t, seed=0), 1008),
    (lambda t: tune.GATuner(t, seed=0), 300),
    (lambda t: tune.XGBTuner(t, seed=0, plan_size=16), 64),
], ids=["grid", "random", "ga", "xgb"])
def test_tuner_finds_known_best(task, make, budget):
    tuner = make(task)
    measured = _tune(tuner, budget)
    assert len(measured) == len(set(measured)), "a configuration was measured twice"
    assert tuner.best_config.index == _best_index(task)
    assert tuner.best_cost == pytest.approx(1e-3)
    assert tuner.best_flops == pytest.approx(1e6 / 1e-3)


def test_xgb_beats_random_on_equal_budget(task):
    xgb = tune.XGBTuner(task, seed=1, plan_size=16)
    rnd = tune.RandomTuner(task, seed=1)
    _tune(xgb, 48)
    _tune(rnd, 48)
    assert xgb.best_cost <= rnd.best_cost


def test_early_stopping_stops(task):
    tuner = tune.GridSearchTuner(task)
    measured = _tune(tuner, 1008, early_stopping=20, batch_size=4)
    assert len(measured) <= tuner.best_iter + 20 + 4
    assert len(measured) < 1008


def test_records_round_trip_and_resume_skips_measured(task, tmp_path):
    log = tmp_path / "syn.jsonl"
    first = tune.RandomTuner(task, seed=3)
    measured1 = _tune(first, 40, callbacks=[tune.log_to_file(log)])
    recs = list(load_records(log))
    assert len(recs) == 40
    assert [r.config["index"] for r in recs] == measured1
    assert all(r.task_key == task.key and r.ok for r in recs)
    assert [r.cost for r in recs] == pytest.approx([synthetic_cost(task.config_space.get(i))
                                                    for i in measured1])
    # resume: a new tuner seeded from the records never re-measures them
    second = tune.RandomTuner(task, seed=3)
    assert second.load_history(load_records(log)) == 40
    measured2 = _tune(second, 60, callbacks=[tune.log_to_file(log)])
    assert not set(measured1) & set(measured2)
    assert len(list(load_records(log))) == 100
    best = tune.best_records(load_records(log))[(task.key, str(task.target))]
    assert best.cost == pytest.approx(min(second.best_cost, first.best_cost))


def test_progress_bar_reports_trials(task):
    import io
    out = io.StringIO()
    tuner = tune.RandomTuner(task, seed=0)
    _tune(tuner, 12, callbacks=[tune.progress_bar(file=out)], batch_size=4)
    text = out.getvalue()
    assert "12/12" in text and "GFLOP/s" in text and "errors 0" in text
