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
    assert format_results(results).startswith(f"in-model check: {int(r.kept)} of 1 tasks")
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


def _two_conv_model():
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype("float32") * 0.2, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 16, 1, 1)).astype("float32") * 0.2,
                                 "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["y"])]
    graph = helper.make_graph(
        nodes, "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_each_task_gets_its_own_in_model_evidence(tmp_path):
    from ember.tune.records import paired_speedups
    model = _two_conv_model()
    mod, params = from_onnx(model)
    tasks = [t.task for t in tune.extract_tasks(mod, params, TARGET, algorithms=False)
             if t.task is not None and t.task.name == "rule"]
    assert len(tasks) == 2
    log = tmp_path / "r.jsonl"
    picks = {}
    for k, task in enumerate(tasks):
        default = task.config_space.get(0).values()
        picks[task.key] = [c for c in task.config_space if c.values() != default][:2]
        for i, pick in enumerate(picks[task.key]):  # both candidates look faster alone
            save_records(log, _evidence(task, pick, 1.5 - 0.1 * i, f"g{k}{i}"))
    results = check_in_model(mod, params, TARGET, str(log), rounds=3, repeat=2, top=2)
    assert sorted(r.task_key for r in results) == sorted(picks)
    assert all(r.candidates == 2 for r in results)
    evidence = paired_speedups(list(load_records(log)), in_model=True)
    for task in tasks:  # every task's candidates were timed against its own default
        per = evidence[(task.key, str(TARGET))]
        assert sorted(per) == sorted(c.index for c in picks[task.key])
        assert all(len(v) == 3 and min(v) > 0 for v in per.values())
    x = np.random.default_rng(4).standard_normal((1, 8, 16, 16)).astype("float32")
    base = ember.compile(model, target=TARGET).run([x])[0]
    with tune.apply_history_best(log) as ctx:
        tuned = ember.compile(model, target=TARGET)
    assert ctx.applied == sum(r.kept for r in results)
    np.testing.assert_allclose(tuned.run([x])[0], base, rtol=1e-4, atol=1e-4)


def test_a_recorded_algorithm_choice_does_not_skip_the_check(tmp_path, monkeypatch):
    """An algorithm record (``conv_algo``) changes the graph the tuned kernels run in: the
    default model of the check must be built under it too, or no kernel lines up. (The
    algorithm's own in-model check, which could revert it on this machine's timings, is
    left out here: test_algorithm_choices_are_checked_in_the_model covers it.)"""
    from ember.tune import model_check
    from .test_strategy import _stated
    monkeypatch.setattr(model_check, "check_algorithms", lambda *a, **k: [])
    model = _two_conv_model()
    mod, params = from_onnx(model)
    algo = next(t.task for t in tune.extract_tasks(mod, params, TARGET) if t.op == "conv_algo")
    log = tmp_path / "r.jsonl"
    other = algo.config_space.get(1).values()["tile"]  # not the heuristic's algorithm
    save_records(log, _stated(algo, other))
    with tune.apply_history_best(log) as ctx:
        tasks = [t.task for t in tune.extract_tasks(mod, params, TARGET, algorithms=False)
                 if t.task is not None and t.task.name == "rule"]
        ember.compile(model, target=TARGET)
    assert ctx.algorithms_applied == 1 and tasks
    task = tasks[0]
    default = task.config_space.get(0).values()
    pick = next(c for c in task.config_space if c.values() != default)
    save_records(log, _evidence(task, pick, 1.5, "g1"))
    results = check_in_model(mod, params, TARGET, str(log), rounds=2, repeat=1)
    assert [r.task_key for r in results] == [task.key]
    assert any(is_in_model(x) for x in load_records(log))
    x = np.random.default_rng(6).standard_normal((1, 8, 16, 16)).astype("float32")
    base = ember.compile(model, target=TARGET).run([x])[0]
    with tune.apply_history_best(log):
        tuned = ember.compile(model, target=TARGET)
    np.testing.assert_allclose(tuned.run([x])[0], base, rtol=1e-4, atol=1e-4)


def test_the_summary_table_counts_a_task_the_check_rejected_as_untuned():
    from ember.tune.model import TaskSummary, TuneSummary
    from ember.tune.model_check import InModelResult
    a = TaskSummary("conv:a", "conv", 2, 0.1, 10, 0, untuned_s=2e-3, best_s=1e-3)
    b = TaskSummary("gemm:b", "gemm", 1, 0.1, 10, 0, untuned_s=4e-3, best_s=2e-3)
    s = TuneSummary([a, b])
    alone = s.table().splitlines()[-1].split()
    assert alone[-1] == f"{(2 * 2 + 4) / (2 * 1 + 2):.2f}x"  # both tuned, timed alone
    s.in_model = [InModelResult("rule-a", "conv", 2, 1.0, 1.1, 0.91, False, 1, "conv:a"),
                  InModelResult("rule-b", "gemm", 1, 1.0, 0.8, 1.25, True, 1, "gemm:b")]
    rows = s.table().splitlines()
    assert rows[2].rstrip().endswith("(in the model 0.91x: default kept)")
    assert rows[3].rstrip().endswith("(in the model 1.25x: tuned)")
    assert rows[-1].split()[-1] == f"{(2 * 2 + 4) / (2 * 2 + 2):.2f}x"  # a: its default


def test_kept_says_what_a_build_applies_when_one_round_is_not_evidence(tmp_path, monkeypatch):
    """One round in the model is below ``apply_history_best``'s ``min_evidence`` (2): the
    build follows the evidence timed alone, and the result must say so."""
    from ember.runtime.executor import GraphExecutor
    mod, params, task, pick = _task_and_pick()
    log = tmp_path / "r.jsonl"
    save_records(log, _evidence(task, pick, 1.01, "g1"))  # alone: below the 2 % margin
    orig, calls = GraphExecutor.time_steps, []

    def time_steps(self, inputs, repeat=10):  # the default model first, then the tuned one
        calls.append(self)
        return [dict(s, ms=1.0 if len(calls) == 1 else 0.5) for s in orig(self, inputs, 1)]
    monkeypatch.setattr(GraphExecutor, "time_steps", time_steps)
    results = check_in_model(mod, params, TARGET, str(log), rounds=1, repeat=1)
    assert len(calls) == 2 and len(results) == 1 and results[0].speedup == 2.0
    with tune.apply_history_best(log) as ctx:
        ember.compile(_small_model(), target=TARGET)
    assert ctx.applied == 0 and not results[0].kept
    save_records(log, _evidence(task, pick, 1.5, MODEL_GROUP + "y"))  # now 2+ rounds: decisive
    with tune.apply_history_best(log) as ctx:
        ember.compile(_small_model(), target=TARGET)
    assert ctx.applied == 1


def test_bad_round_counts_are_refused_before_any_tuning(tmp_path):
    from ember.errors import TuningError
    from ember.tune.model import tune_model
    mod, params, task, pick = _task_and_pick()
    log = tmp_path / "r.jsonl"
    with pytest.raises(TuningError, match="model_check"):
        tune_model((mod, params), TARGET, trials=4, records=str(log), progress=False,
                   log=None, model_check=-1)
    with pytest.raises(TuningError, match="check_top"):
        tune_model((mod, params), TARGET, trials=4, records=str(log), progress=False,
                   log=None, model_check=2, check_top=0)
    assert not log.exists()  # nothing was measured
    save_records(log, _evidence(task, pick, 1.5, "g1"))
    with pytest.raises(TuningError, match="rounds >= 1"):
        check_in_model(mod, params, TARGET, str(log), rounds=0)
    assert not any(is_in_model(x) for x in load_records(log))


def test_tune_model_checks_with_the_margin_it_is_given(tmp_path, monkeypatch):
    from ember.tune import model_check
    from ember.tune.model import tune_model
    seen = []
    monkeypatch.setattr(model_check, "check_in_model",
                        lambda *a, **kw: seen.append(kw.get("margin")) or [])
    mod, params, task, pick = _task_and_pick()
    tune_model((mod, params), TARGET, trials=2, tuner="grid", records=str(tmp_path / "r.jsonl"),
               progress=False, log=None, max_tasks=1, margin=0.1)
    assert seen == [0.1]


def _count_time_steps(monkeypatch):
    from ember.runtime.executor import GraphExecutor
    orig, calls = GraphExecutor.time_steps, []

    def time_steps(self, inputs, repeat=10):
        calls.append(self)
        return orig(self, inputs, 1)
    monkeypatch.setattr(GraphExecutor, "time_steps", time_steps)
    return calls


def test_a_resumed_run_reuses_the_in_model_check(tmp_path, monkeypatch):
    # (was: every resume of a finished run timed the model again from scratch)
    from ember.tune.model import tune_model
    from ember.tune.model_check import load_outcome, outcome_path
    mod, params, task, pick = _task_and_pick()
    log = tmp_path / "r.jsonl"
    save_records(log, _evidence(task, pick, 1.5, "g1"))  # a tuned task for the check to time
    calls = _count_time_steps(monkeypatch)
    kw = dict(trials=0, tuner="grid", records=str(log), progress=False, log=None, max_tasks=1,
              algorithms=False, model_check=2, measure_threads=1)
    s1 = tune_model((mod, params), TARGET, **kw)
    n_timed, n_recs = len(calls), len(list(load_records(log)))
    assert len(s1.in_model) == 1 and n_timed == 2 * 2  # 2 rounds x (default + 1 variant)
    s2 = tune_model((mod, params), TARGET, **kw)  # nothing new to measure: reused
    assert len(calls) == n_timed and len(list(load_records(log))) == n_recs
    assert s2.in_model == s1.in_model
    # another check setting, new records, or another thread count: timed again
    tune_model((mod, params), TARGET, **dict(kw, model_check=3))
    assert len(calls) == n_timed + 2 * 3
    save_records(log, _evidence(task, pick, 1.4, "g2"))
    tune_model((mod, params), TARGET, **dict(kw, model_check=3))
    assert len(calls) == n_timed + 2 * 3 * 2
    # the outcome is keyed by the target (its thread count) too
    settings = {"rounds": 3, "repeat": 5, "margin": 0.02, "seed": 0, "top": 12}
    assert load_outcome(mod, params, TARGET, str(log), settings) is not None
    assert load_outcome(mod, params, ember.Target("llvm -num-threads=1"), str(log),
                        settings) is None
    # an unreadable side file only costs a check
    n = len(calls)
    with open(outcome_path(str(log)), "w") as f:
        f.write("{not json")
    tune_model((mod, params), TARGET, **dict(kw, model_check=3))
    assert len(calls) == n + 2 * 3


@pytest.mark.parametrize("direct_in_model_ms, kept", [(50.0, False), (0.5, True)])
def test_algorithm_choices_are_checked_in_the_model(tmp_path, monkeypatch, direct_in_model_ms,
                                                    kept):
    """A conv_algo choice that won timed alone (direct convolution, 1.5x faster than the
    heuristic's F(2x2) side by side) is timed in the model against the heuristic's algorithm
    (whole model: the kernels differ), and apply_history_best keeps it only where it was faster
    there. The model's step times are faked: every kernel 1 ms, except that a direct
    convolution's kernel takes ``direct_in_model_ms``."""
    from ember.runtime.executor import GraphExecutor
    from .test_strategy import _algo_task, _conv_model
    info = _algo_task()
    task = info.task
    direct = next(c for c in task.config_space if c.values()["tile"] == -1)
    log = tmp_path / "r.jsonl"
    save_records(log, _evidence(task, direct, 1.5, "g1"))
    with tune.apply_history_best(log):
        assert not any(s["op"].startswith("nn.winograd") for s in
                       ember.compile(_conv_model(), target=TARGET).plan["steps"])
    orig = GraphExecutor.time_steps

    def time_steps(self, inputs, repeat=10):
        steps = orig(self, inputs, 1)
        return [dict(s, ms=direct_in_model_ms if "conv" in s["op"] and "winograd" not in s["op"]
                     and not s["op"].startswith("matmul") else 1.0) for s in steps]
    monkeypatch.setattr(GraphExecutor, "time_steps", time_steps)
    mod, params = from_onnx(_conv_model())
    results = check_in_model(mod, params, TARGET, str(log), rounds=3, repeat=1)
    algo = [r for r in results if r.op == "conv_algo"]
    assert len(algo) == 1 and algo[0].task_key == task.key and algo[0].kept == kept
    assert (algo[0].speedup > 1.0) == kept
    assert "conv_algo (whole model)" in format_results(results)
    with tune.apply_history_best(log) as ctx:
        ops = [s["op"] for s in ember.compile(_conv_model(), target=TARGET).plan["steps"]]
    assert any(o.startswith("nn.winograd") for o in ops) == (not kept)
    assert ctx.algorithms_applied == int(kept)
