"""Template-free search: sketch rules, sampled programs are correct, traces round-trip,
evolution proposes new programs, the task scheduler follows expected gain, the cost model ranks,
and tune_model(tuner="search") records traces that apply_history_best replays."""

import random
import time

import numpy as np
import pytest

import ember
from ember import tune
from ember.tune import MeasureResult, load_records
from ember.tune.cost_model import XGBoostCostModel, pairwise_accuracy, top_k_recall
from ember.tune.search import (SearchPolicy, SearchTask, TaskScheduler, Trace, crossover,
                               generate_sketches, mutate, sample)
from ember.tune.templates import workload_func

from .synthetic import SyntheticBuilder
from .test_model import _small_model

CONV = ("nn.conv", {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1},
        [[[1, 4, 8, 8], "float32"], [[8, 4, 3, 3], "float32"]], [[[1, 8, 8, 8], "float32"]])


def _conv():
    return workload_func(*CONV)


def test_sketch_rules_by_kernel_kind():
    conv = [s.name for s in generate_sketches(_conv())]
    assert conv == ["multi_level_tiling", "spatial_tiling", "annotate"]
    relu = workload_func("nn.relu", {}, [[[4, 64], "float32"]], [[[4, 64], "float32"]])
    sk = generate_sketches(relu)
    assert [s.name for s in sk] == ["annotate"]
    assert ("vectorize", 0) in sk[0].choices


def test_sampled_mutated_and_crossed_programs_compute_the_reference():
    func = _conv()
    task = SearchTask(func)
    rng = random.Random(0)
    traces = []
    for sk in task.sketches:
        a, b = sample(sk, rng), sample(sk, rng)
        traces += [a, mutate(a, sk, rng), crossover(a, b, sk, rng)]
    for t in traces:
        assert Trace.from_json(t.to_json()) == t
    runner = tune.LocalRunner(repeat=1, timeout=10)
    try:
        inputs = [tune.MeasureInput(task.target, task, t) for t in traces]
        results = runner.run(inputs, tune.LocalBuilder().build(inputs))
    finally:
        runner.close()
    assert all(r.ok for r in results), [r.error_msg for r in results if not r.ok]


def test_policy_proposes_unmeasured_programs_and_learns():
    task = SearchTask(_conv())
    pol = SearchPolicy(task, seed=0, population=16, generations=1)
    first = pol.propose(8)
    assert len({t.key() for t in first}) == 8
    # a fake measurement: cost grows with the number of inner tile elements
    def fake(t):
        block = np.prod([s.value for s in t if s.kind == "tile"] or [1])
        return MeasureResult([1e-3 * (1 + abs(np.log2(block) - 3))], 0)
    pol.update(first, [fake(t) for t in first])
    assert pol.model.trained
    nxt = pol.propose(8)
    assert nxt and not {t.key() for t in nxt} & {t.key() for t in first}


class _CostRunner:
    """Synthetic runner: a task's cost is fixed by its workload (known weights)."""

    def __init__(self, costs):
        self.costs = costs

    def run(self, inputs, builds):
        return [MeasureResult([self.costs[i.task.workload_key]], 0, "", 0, time.time())
                for i in inputs]


def _two_task_scheduler(**kw):
    """A heavy convolution task (3 occurrences) and a light pooling one, measured by a runner
    that gives every program of a task the same cost (1 ms, 10 us): ``(policies, sched)``."""
    heavy = SearchTask(_conv())
    light = SearchTask(workload_func("nn.max_pool", {"kernel_shape": [2, 2], "strides": [2, 2]},
                                     [[[1, 4, 8, 8], "float32"]], [[[1, 4, 4, 4], "float32"]]))
    pols = [SearchPolicy(heavy, seed=0, population=8, generations=1),
            SearchPolicy(light, seed=1, population=8, generations=1)]
    runner = _CostRunner({heavy.workload_key: 1e-3, light.workload_key: 1e-5})
    return pols, TaskScheduler(pols, [3, 1], tune.measure_option(SyntheticBuilder(), runner),
                               round_size=4, **kw)


def test_task_scheduler_spends_budget_by_expected_gain():
    pols, sched = _two_task_scheduler()
    sched.tune(40)
    assert sched.order[:2] == [0, 1]                 # warm-up: one round each
    assert sched.rounds[0] >= 3 * sched.rounds[1]    # the heavy task gets the budget
    assert sum(p.trials for p in pols) <= 40


def test_cost_model_ranks_held_out_programs():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 6)).astype("float32")
    y = np.exp(X[:, 0] - 0.5 * X[:, 1] ** 2 + 0.3 * X[:, 2])   # throughput, a known function
    m = XGBoostCostModel()
    m.fit(X[:200], y[:200])
    pred = m.predict(X[200:])
    assert pairwise_accuracy(pred, y[200:]) > 0.75
    assert top_k_recall(pred, y[200:], 10) >= 0.3
    assert pairwise_accuracy([1, 2, 3], [1, 2, 3]) == 1.0
    assert pairwise_accuracy([3, 2, 1], [1, 2, 3]) == 0.0
    assert top_k_recall([0.1, 0.9, 0.5], [1, 3, 2], 1) == 1.0


def test_tune_model_with_search_records_traces(tmp_path):
    model = _small_model()
    log = tmp_path / "search.jsonl"
    s = tune.tune_model(model, trials=12, tuner="search", records=log, progress=False,
                        repeat=1, log=None)
    recs = [r for r in load_records(log) if r.kind != "default"]
    assert len(recs) == 12 and all(r.kind == "trace" for r in recs)
    assert sum(t.trials for t in s.tasks) == 12
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype("float32")
    base = ember.compile(model).run({"x": x})[0]
    # whether a tuned program beats the untuned kernel is timing; without the "default"
    # records every task with a successful measurement is replaced
    tuned_only = [r for r in load_records(log) if r.kind != "default"]
    with tune.apply_history_best(tuned_only) as ctx:
        tuned = ember.compile(model)
    assert ctx.applied >= 1
    np.testing.assert_allclose(tuned.run({"x": x})[0], base, rtol=1e-4, atol=1e-4)
    # resume: the budget is spent already
    s2 = tune.tune_model(model, trials=12, tuner="search", records=log, progress=False,
                         repeat=1, log=None)
    assert sum(r.kind == "trace" for r in load_records(log)) == 12


@pytest.mark.parametrize("trace", [[], [["nope", 1, 2]], ["abc"], {"x": 1}])
def test_a_trace_record_that_cannot_replay_keeps_the_default(trace, caplog):
    # (were: an empty trace raised a raw IndexError and a malformed one aborted the build)
    from ember.frontend.onnx import from_onnx
    from ember.tune.records import Record
    with pytest.raises(ember.errors.TuningError, match="malformed search trace|unknown sketch"):
        SearchTask(_conv(), "llvm").instantiate(Trace.from_json(trace))
    model = _small_model()
    mod, params = from_onnx(model)
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype("float32")
    base = ember.compile(model).run({"x": x})[0]
    tasks = tune.extract_tasks(mod, params, "llvm", include_all=True, algorithms=False)
    recs = []
    for info in tasks:
        st = SearchTask(info.func, "llvm")
        recs.append(Record(st.name, list(st.args), st.key, str(ember.Target("llvm")), "trace",
                           trace, MeasureResult([1e-9], 0)))
    with tune.apply_history_best(recs) as ctx, caplog.at_level("WARNING", "ember.tune"):
        tuned = ember.compile(model)
    assert ctx.matched >= 1 and ctx.applied == 0
    assert "keeping its default schedule" in caplog.text
    np.testing.assert_allclose(tuned.run({"x": x})[0], base, rtol=1e-4, atol=1e-5)


def test_task_scheduler_early_stopping_drops_a_task_without_improvement():
    # (was: --tuner search ignored --early-stopping and spent the whole budget); every program
    # of a task costs the same: only a task's first measurement improves it
    pols, sched = _two_task_scheduler(early_stopping=5)
    sched.tune(40)
    # round 1: 1 improving + 3 not; round 2: 4 more not improving (7 >= 5): the task stops
    assert [p.trials for p in pols] == [8, 8]
    assert sched.done == [True, True]


def test_tune_model_search_honours_early_stopping_and_refuses_a_template(tmp_path, monkeypatch):
    import ember.tune.search as search
    from ember.errors import TuningError
    seen = {}
    monkeypatch.setattr(search, "tune_tasks_search",
                        lambda *a, **kw: seen.update(kw) or [])
    tune.tune_model(_small_model(), trials=4, tuner="search", records=tmp_path / "r.jsonl",
                    progress=False, log=None, early_stopping=3, model_check=0)
    assert seen.get("early_stopping") == 3
    for template in ("rule", "tile"):
        with pytest.raises(TuningError, match=r"--template.*--tuner xgb"):
            tune.tune_model(_small_model(), trials=4, tuner="search", template=template,
                            records=tmp_path / "r.jsonl", progress=False, log=None)
