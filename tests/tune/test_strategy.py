"""Algorithm choice as a tuned decision (``ember.tune.strategy``): ``conv_algo`` tasks are
extracted for Winograd-eligible convolutions, their candidates (direct, F(2x2), F(4x4)) are
measured as whole programs checked against the convolution's NumPy reference, and
``apply_history_best`` makes the ``WinogradConv`` pass follow a recorded choice; without a
record the heuristic decides as before. Compiled models are checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import tune
from ember.frontend.onnx import from_onnx
from ember.graph.passes.winograd import choose_tile
from ember.tune import MeasureInput, MeasureResult, load_records, save_records
from ember.tune.measure import LocalBuilder, LocalRunner, MeasureErrorNo, create_measure_batch
from ember.tune.measure import measure_option
from ember.tune.space import ConfigEntity
from ember.tune.task import Task

TARGET = ember.Target("llvm -num-threads=2")


def _conv_model(c=16, k=16, size=16) -> onnx.ModelProto:
    """x (1, c, size, size) -> 3x3 pad-1 conv (k outputs) + bias -> ReLU."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c))
                                .astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(k).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, size, size])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _algo_task(model=None):
    mod, params = from_onnx(model or _conv_model())
    tasks = tune.extract_tasks(mod, params, TARGET)
    algos = [t for t in tasks if t.op == "conv_algo"]
    assert len(algos) == 1 and algos[0] is tasks[-1]  # listed after the kernel tasks
    return algos[0]


def _tile_of(entity) -> int:
    return entity.values()["tile"]


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_extracted_task_lists_the_algorithms_heuristic_first():
    info = _algo_task()
    space = info.task.config_space
    # c = k = 16, 16x16 output: the heuristic's F(2x2) (F(4x4) from 28x28 up)
    assert choose_tile(16, 16, 16, 16) == 2
    assert [_tile_of(space.get(i)) for i in range(len(space))] == [2, -1, 4]
    assert info.count == 1 and info.func is None
    assert info.flops == 2 * 16 * 16 * 16 * 16 * 9  # the direct convolution's
    # a 7x7 image has too few tiles: direct first
    wl = list(info.task.args)
    wl[2] = [[[1, 7, 7, 512], "float32"], [[512, 512, 3, 3], "float32"]]
    wl[3] = [[[1, 7, 7, 512], "float32"]]
    assert [_tile_of(c) for c in Task("conv_algo", wl, TARGET).config_space] == [-1, 2, 4]


def _stated(task, tile, default_cost=1e-3, cost=0.5e-3, group=""):
    """Records stating that ``tile`` took ``cost`` and the default ``default_cost``."""
    space = task.config_space
    pick = next(c for c in space if _tile_of(c) == tile)
    pairs = [(MeasureInput(task.target, task, space.get(0)),
              MeasureResult([default_cost], 0, group=group))]
    if pick.index != 0:
        pairs.append((MeasureInput(task.target, task, pick), MeasureResult([cost], 0, group=group)))
    return pairs


@pytest.mark.parametrize("tile", [-1, 4, 2])
def test_recorded_choice_is_followed(tmp_path, tile):
    model = _conv_model()
    task = _algo_task(model).task
    log = tmp_path / "algo.jsonl"
    save_records(log, _stated(task, tile))
    x = np.random.default_rng(1).standard_normal((1, 16, 16, 16)).astype("float32")
    with tune.apply_history_best(log) as ctx:
        m = ember.compile(model, target=TARGET)
    assert ctx.algorithms_applied == (1 if tile != 2 else 0)
    if tile < 0:
        assert "winograd" not in m.graph_text
    else:
        assert "nn.winograd_input" in m.graph_text and f"tile={tile}," in m.graph_text
    np.testing.assert_allclose(m.run({"x": x})[0], _ort(model, x), rtol=1e-4, atol=1e-4)


def test_without_records_the_default_is_unchanged(tmp_path):
    model = _conv_model()
    base = ember.compile(model, target=TARGET)
    assert "tile=2" in base.graph_text  # the heuristic's F(2x2)
    with tune.apply_history_best([]) as ctx:
        same = ember.compile(model, target=TARGET)
    assert same.graph_text == base.graph_text and ctx.algorithms_applied == 0
    # a choice that is not measurably faster than the default (margin), or recorded for
    # another target, is not followed
    task = _algo_task(model).task
    log = tmp_path / "a.jsonl"
    save_records(log, _stated(task, -1, default_cost=1e-3, cost=0.99e-3))
    other = Task("conv_algo", task.args, "llvm -num-threads=1")
    save_records(log, _stated(other, 4))
    with tune.apply_history_best(log) as ctx:
        again = ember.compile(model, target=TARGET)
    assert again.graph_text == base.graph_text and ctx.algorithms_applied == 0
    # an explicit winograd.tile config overrides the records
    save_records(log, _stated(task, 4, cost=0.1e-3))
    with tune.apply_history_best(log), ember.PassContext(config={"winograd.tile": -1}):
        forced = ember.compile(model, target=TARGET)
    assert "winograd" not in forced.graph_text


@pytest.mark.parametrize("speedup, followed", [(1.10, True), (1.01, False)])
def test_side_by_side_evidence_decides_the_algorithm(tmp_path, speedup, followed):
    model = _conv_model()
    task = _algo_task(model).task
    log = tmp_path / "g.jsonl"
    pairs = []
    for g, load in (("g1", 1.0), ("g2", 1.6)):
        pairs += _stated(task, -1, 1e-3 * load, 1e-3 * load / speedup, group=g)
    # a lone measurement of F(4x4) that looks much faster is not side-by-side evidence
    pairs.append((MeasureInput(task.target, task, next(c for c in task.config_space
                                                       if _tile_of(c) == 4)),
                  MeasureResult([1e-5], 0)))
    save_records(log, pairs)
    with tune.apply_history_best(log) as ctx:
        m = ember.compile(model, target=TARGET)
    assert ctx.algorithms_applied == int(followed)
    assert ("winograd" not in m.graph_text) == followed


def test_records_round_trip(tmp_path):
    task = _algo_task().task
    log = tmp_path / "rt.jsonl"
    save_records(log, _stated(task, 4))
    recs = list(load_records(log))
    assert [r.task_name for r in recs] == ["conv_algo", "conv_algo"]
    for r in recs:
        again = Task(r.task_name, r.task_args, r.target)
        assert again.key == r.task_key == task.key
        ent = ConfigEntity.from_json(r.config, again.config_space)
        assert ent.index == r.config["index"]
    assert _tile_of(ConfigEntity.from_json(recs[1].config, task.config_space)) == 4


def test_measured_candidates_are_checked_and_a_wrong_one_never_wins(monkeypatch, tmp_path):
    # a distinct workload (this process keeps built candidates by workload)
    model = _conv_model(c=16, k=24, size=12)
    task = _algo_task(model).task
    import ember.graph.passes.winograd as wpass
    real = wpass.weight_transform

    def broken(w, m):
        if m == 4:
            raise RuntimeError("F(4x4) weight transform crashed")
        return real(w, m) * 1.5  # F(2x2) computes a wrong convolution
    monkeypatch.setattr(wpass, "weight_transform", broken)
    option = measure_option(LocalBuilder(n_parallel=1),
                            LocalRunner(number=2, repeat=2, per_call=True, interleave=True,
                                        num_threads=1))
    try:
        inputs = [MeasureInput(TARGET, task, c) for c in task.config_space]
        results = create_measure_batch(option)(inputs)
    finally:
        option["runner"].close()
    by_tile = {_tile_of(i.config): r for i, r in zip(inputs, results)}
    assert by_tile[-1].ok and all(c > 0 for c in by_tile[-1].costs)
    assert by_tile[2].error_no == MeasureErrorNo.WRONG_ANSWER
    assert by_tile[4].error_no in (MeasureErrorNo.INSTANTIATION_ERROR,
                                   MeasureErrorNo.COMPILE_HOST)
    log = tmp_path / "w.jsonl"
    save_records(log, list(zip(inputs, results)))
    monkeypatch.undo()
    with tune.apply_history_best(log):
        m = ember.compile(model, target=TARGET)
    assert "winograd" not in m.graph_text  # only the direct program passed
    x = np.random.default_rng(2).standard_normal((1, 16, 12, 12)).astype("float32")
    np.testing.assert_allclose(m.run({"x": x})[0], _ort(model, x), rtol=1e-4, atol=1e-4)


def test_tune_model_tunes_the_algorithm_first(tmp_path):
    model = _conv_model()
    log = tmp_path / "t.jsonl"
    s = tune.tune_model(model, target=TARGET, trials=4, tuner="xgb", records=log,
                        progress=False, repeat=1, number=2, per_call=True, log=None,
                        measure_threads=1)
    recs = list(load_records(log))
    algo = [r for r in recs if r.task_name == "conv_algo"]
    assert algo and recs[0].task_name == "conv_algo" and algo[0].config["index"] == 0
    assert {r.config["index"] for r in algo} == {0, 1, 2} and all(r.ok for r in algo)
    assert s.tasks[-1].op == "conv_algo" and s.tasks[-1].trials == 3
    assert sum(t.trials for t in s.tasks[:-1]) == 4  # the kernels' budget is unchanged
    x = np.random.default_rng(3).standard_normal((1, 16, 16, 16)).astype("float32")
    with tune.apply_history_best(log):
        m = ember.compile(model, target=TARGET)
    np.testing.assert_allclose(m.run({"x": x})[0], _ort(model, x), rtol=1e-4, atol=1e-4)


def test_a_candidate_with_a_large_input_is_measured_in_the_worker():
    # a 1 MB input is allocated by mmap: the worker must keep it alive while the AOT entry
    # points at it (it once freed it and the call crashed the worker)
    task = _algo_task(_conv_model(c=64, k=16, size=64)).task
    runner = LocalRunner(number=2, repeat=1, per_call=True, num_threads=1)
    try:
        inputs = [MeasureInput(TARGET, task, task.config_space.get(0))]
        (res,) = create_measure_batch(measure_option(LocalBuilder(), runner))(inputs)
    finally:
        runner.close()
    assert res.ok, res.error_msg


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"),
                    reason="counts threads in /proc")
def test_worker_runs_a_cached_candidate_at_each_requests_thread_count():
    # the worker caches a loaded candidate by path: a second request for the same artifact
    # with another thread count ran at the first request's count
    import os
    from ember.tune import worker
    task = _algo_task(_conv_model(c=12, k=20, size=23)).task  # a library no other test starts
    art, ref = task.instantiate(task.config_space.get(0)).files(task.target)

    def run(threads):
        fn, _ = worker._prepare({"program": "model", "lib": art, "ref": ref,
                                 "num_threads": threads})
        fn()
    run(1)
    before = len(os.listdir("/proc/self/task"))
    run(3)
    assert len(os.listdir("/proc/self/task")) == before + 2, "ran at the first request's count"


def test_extracting_tasks_does_not_count_as_applying_an_algorithm(tmp_path):
    model = _conv_model()
    task = _algo_task(model).task
    log = tmp_path / "a.jsonl"
    save_records(log, _stated(task, -1))
    mod, params = from_onnx(model)
    with tune.apply_history_best(log) as ctx:
        kernels = tune.extract_tasks(mod, params, TARGET, algorithms=False)
        assert ctx.algorithms_applied == 0
        m = ember.compile(model, target=TARGET)
    assert ctx.algorithms_applied == 1  # one convolution, one build
    assert "winograd" not in m.graph_text and kernels


def test_an_algorithm_task_takes_its_share_of_the_time_budget(tmp_path, monkeypatch):
    """With ``time_budget``, a ``conv_algo`` task (3 candidates on top of the kernels' 20
    trials) may use 3/23 of the time left, not all of it."""
    import time
    from ember.tune.model import tune_model
    from ember.tune.tuner.base import Tuner
    seen = {}

    def tune(self, n_trial, option=None, early_stopping=None, callbacks=(), batch_size=None,
             deadline=None, initial=(), anchor=None):
        seen.setdefault(self.task.name, (deadline - time.monotonic(), n_trial))
        return None  # nothing measured: only the deadline each task gets is under test
    monkeypatch.setattr(Tuner, "tune", tune)
    budget = 1000.0
    tune_model(_conv_model(), TARGET, trials=20, tuner="random", time_budget=budget,
               records=str(tmp_path / "r.jsonl"), progress=False, log=None, model_check=0)
    left, n = seen["conv_algo"]
    assert n == 3 and left <= budget * 3 / 23 + 1.0, left


def test_kernel_tasks_follow_the_algorithms_chosen_at_the_run_margin(tmp_path):
    # direct measured 1.05x faster than the heuristic's Winograd, side by side: followed at the
    # default margin (0.02), not at 0.10 -- the kernels tuned must be those of the choice the
    # build makes at the run's margin
    model = _conv_model()
    task = _algo_task(model).task
    log = tmp_path / "m.jsonl"
    pairs = []
    for g, load in (("g1", 1.0), ("g2", 1.4), ("g3", 1.2)):
        pairs += _stated(task, -1, 1e-3 * load, 1e-3 * load / 1.05, group=g)
    save_records(log, pairs)
    s = tune.tune_model(model, target=TARGET, trials=2, tuner="random", records=log,
                        progress=False, repeat=1, number=1, per_call=True, log=None,
                        measure_threads=1, margin=0.10, model_check=0)
    mod, params = from_onnx(model)
    with tune.apply_history_best(log, margin=0.10):
        built = {t.key for t in tune.extract_tasks(mod, params, TARGET, algorithms=False)}
    assert {t.name for t in s.tasks if t.op != "conv_algo"} == built
