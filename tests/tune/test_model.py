"""Task extraction, tune_model (with resume) and apply_history_best on a small ONNX model."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import tune
from ember.tune import load_records
from ember.tune.records import is_in_model


def _small_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype("float32") * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype("float32"), "b")
    fc = numpy_helper.from_array(rng.standard_normal((16, 10)).astype("float32"), "fc")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "small",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [w, b, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_extract_tasks_weights():
    from ember.frontend.onnx import from_onnx
    mod, params = from_onnx(_small_model())
    # NCHW: the tile template covers single-stage kernels; ConvertLayout's NHWC convolution
    # materializes its padding as a second stage (scheduled by the default GEMM rule)
    with ember.PassContext(disabled_pass=["ConvertLayout"]):
        tasks = tune.extract_tasks(mod, params, "llvm")
    conv = tasks[0]
    assert "conv" in conv.op and conv.count == 1
    # multiply-add per output point and reduction step: 2 * (16*16*16 outputs) * (8*3*3)
    assert conv.flops == 2 * 16 * 16 * 16 * 8 * 9
    assert [t.flops for t in tasks] == sorted((t.flops for t in tasks), reverse=True)
    assert len({t.task.key for t in tasks}) == len(tasks)
    assert any(t.op in ("matmul", "nn.gemm") for t in tasks)
    assert any(t.op == "nn.global_avg_pool" for t in tasks)


def test_tune_model_resume_and_apply_history_best(tmp_path):
    model = _small_model()
    log = tmp_path / "small.jsonl"
    lines = []
    s1 = tune.tune_model(model, trials=10, tuner="random", records=log, progress=False,
                         repeat=1, min_trials=2, log=lines.append)
    # (in-model check records, ``model_check``, are evidence about configurations already
    # measured, not trials)
    recs = [r for r in load_records(log) if not is_in_model(r)]
    n1 = sum(r.kind == "config" and r.result.error_no != 1 for r in recs)
    # the convolution's algorithm task (direct / F(2x2) / F(4x4)) measures its 3 candidates
    # on top of the kernels' 10 trials
    kernels = [t for t in s1.tasks if t.op != "conv_algo"]
    assert [t.trials for t in s1.tasks if t.op == "conv_algo"] == [3]
    assert n1 == sum(t.trials for t in s1.tasks) == 13
    assert sum(t.trials for t in kernels) == 10
    # the untuned kernel of each kernel task is recorded for comparison (an algorithm task's
    # configuration 0 is its default)
    assert sum(r.kind == "default" for r in recs) == len(kernels)
    table = [ln for ln in lines if "all kernel tasks" in ln]
    assert len(table) == 1 and "speed-up" in table[0]
    assert any(ln.startswith("in-model check") for ln in lines)
    # resume with the same budget: nothing left to measure
    s2 = tune.tune_model(model, trials=10, tuner="random", records=log, progress=False,
                         repeat=1, min_trials=2, log=None)
    assert sum(r.kind == "config" and r.result.error_no != 1 for r in load_records(log)
               if not is_in_model(r)) == n1
    assert sum(t.trials for t in s2.tasks) == 13

    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype("float32")
    base = ember.compile(model).run({"x": x})[0]
    # whether a tuned program beats the untuned kernel is timing; without the "default"
    # records every task with a successful measurement is replaced
    tuned_only = [r for r in load_records(log) if r.kind != "default" and not is_in_model(r)]
    with tune.apply_history_best(tuned_only) as ctx:
        tuned = ember.compile(model)
    assert ctx.applied >= 1
    # (the tuned program may coincide with the default schedule of these tiny kernels, so the
    # sources are not compared; applied >= 1 shows the records were used)
    np.testing.assert_allclose(tuned.run({"x": x})[0], base, rtol=1e-4, atol=1e-4)


def test_records_for_another_target_are_not_applied(tmp_path):
    model = _small_model()
    log = tmp_path / "r.jsonl"
    tune.tune_model(model, target="llvm -num-threads=1", trials=4, tuner="grid", records=log,
                    progress=False, repeat=1, min_trials=1, log=None)
    with tune.apply_history_best(log) as ctx:
        ember.compile(model, target="llvm")
    assert ctx.applied == 0


def test_unknown_tuner_is_a_typed_error():
    with pytest.raises(ember.errors.TuningError, match="unknown tuner"):
        tune.tune_model(_small_model(), tuner="nope", log=None)


def test_a_record_slower_than_the_default_kernel_is_not_applied(tmp_path):
    from ember.frontend.onnx import from_onnx
    from ember.tune import MeasureInput, MeasureResult, save_records
    mod, params = from_onnx(_small_model())
    task = tune.extract_tasks(mod, params, "llvm")[0].task
    log = tmp_path / "slow.jsonl"
    save_records(log, [(MeasureInput(task.target, task, task.config_space.get(1)),
                        MeasureResult([2e-3], 0)),
                       (MeasureInput(task.target, task, None), MeasureResult([1e-3], 0))])
    assert [r.kind for r in load_records(log)] == ["config", "default"]
    with tune.apply_history_best(log) as ctx:
        ember.build(mod, "llvm", params)
    assert ctx.applied == 0
    save_records(log, [(MeasureInput(task.target, task, task.config_space.get(2)),
                        MeasureResult([0.5e-3], 0))])
    with tune.apply_history_best(log) as ctx:
        ember.build(mod, "llvm", params)
    assert ctx.applied == 1


def test_tune_cli_functions(tmp_path, capsys):
    import argparse
    from ember.tune.cli import add_tune_arguments, records_context, run_tune
    path = tmp_path / "small.onnx"
    onnx.save(_small_model(), path)
    p = argparse.ArgumentParser()
    add_tune_arguments(p)
    args = p.parse_args([str(path), "--trials", "4", "--tuner", "grid", "--max-tasks", "1",
                         "--records", str(tmp_path / "r.jsonl"), "--no-progress"])
    assert run_tune(args) == 0
    out = capsys.readouterr().out
    assert "speed-up" in out and "tuned in" in out
    with records_context(str(tmp_path / "r.jsonl")) as ctx:
        ember.compile(str(path))
    assert ctx.best
    with records_context(None):
        pass
    # the convolution's algorithm is tuned unless --no-algorithms
    assert any(r.task_name == "conv_algo" for r in load_records(tmp_path / "r.jsonl"))
    args = p.parse_args([str(path), "--trials", "2", "--tuner", "grid", "--max-tasks", "1",
                         "--records", str(tmp_path / "n.jsonl"), "--no-progress",
                         "--no-algorithms"])
    assert run_tune(args) == 0
    assert not any(r.task_name == "conv_algo" for r in load_records(tmp_path / "n.jsonl"))


def test_allocate_trials_spends_what_a_small_space_cannot_take():
    from types import SimpleNamespace
    from ember.tune.model import allocate_trials

    def task(size, flops):
        return SimpleNamespace(task=SimpleNamespace(config_space=range(size)), flops=flops)

    # the heaviest task has only 5 configurations: its share goes to the others, by FLOPs
    tasks = [task(5, 8e9), task(1000, 1e9), task(1000, 1e9), task(40, 2e9)]
    alloc = allocate_trials(tasks, 400, min_trials=8)
    assert sum(alloc) == 400 and alloc[0] == 5 and alloc[3] == 40
    assert alloc[1] + alloc[2] == 355 and abs(alloc[1] - alloc[2]) <= 1
    # every space exhausted: each task gets its whole space and no more
    alloc = allocate_trials([task(3, 1.0), task(7, 5.0)], 100)
    assert alloc == [3, 7]
    # a budget below min_trials per task is split evenly, as before
    assert allocate_trials([task(50, 1.0)] * 4, 8, min_trials=8) == [2, 2, 2, 2]
    # no FLOPs counted: the rounding leftover goes to the first task
    assert allocate_trials([task(50, 0.0), task(50, 0.0)], 5) == [3, 2]


def test_bad_records_files_are_typed_errors(tmp_path):
    from ember.errors import TuningError
    model = _small_model()
    # a mistyped path must not build the untuned model silently
    with pytest.raises(TuningError, match="does not exist"):
        tune.apply_history_best(tmp_path / "typo.jsonl")
    with pytest.raises(TuningError, match="is a directory"):
        tune.apply_history_best(tmp_path)
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\x00\xff\xfe not text")
    with pytest.raises(TuningError, match="not UTF-8"):
        list(load_records(binary))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"garbage\n{}\n')
    with pytest.raises(TuningError, match="bad.jsonl:1: .*delete or repair"):
        tune.apply_history_best(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with tune.apply_history_best(empty) as ctx:
        ember.compile(model)
    assert ctx.applied == 0


def test_resumed_run_measures_nothing_again(tmp_path):
    # as `ember tune` runs it: side by side (per_call) with the confirmation of rule tasks
    model = _small_model()
    log = tmp_path / "resume.jsonl"
    kw = dict(trials=6, tuner="random", records=log, progress=False, repeat=1, min_trials=2,
              per_call=True, confirm=3, model_check=0, log=None)
    tune.tune_model(model, **kw)
    n = len(list(load_records(log)))
    s2 = tune.tune_model(model, **kw)
    # neither the trials, nor the untuned kernels, nor the confirmation rounds are re-measured
    assert len(list(load_records(log))) == n
    assert all(t.untuned_s < float("inf") for t in s2.tasks if t.op != "conv_algo")
    # a larger budget measures only the new trials (plus their confirmation)
    s3 = tune.tune_model(model, **dict(kw, trials=8))
    assert sum(t.trials for t in s3.tasks) > sum(t.trials for t in s2.tasks)
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype("float32")
    base = ember.compile(model).run({"x": x})[0]
    with tune.apply_history_best(log):
        tuned = ember.compile(model)
    np.testing.assert_allclose(tuned.run({"x": x})[0], base, rtol=1e-4, atol=1e-5)


def test_appending_after_an_interrupted_write_keeps_the_file_readable(tmp_path):
    from ember.frontend.onnx import from_onnx
    from ember.tune import MeasureInput, MeasureResult, save_records
    from ember.tune.callbacks import log_to_file
    mod, params = from_onnx(_small_model())
    task = tune.extract_tasks(mod, params, "llvm")[0].task
    pair = [(MeasureInput(task.target, task, task.config_space.get(1)), MeasureResult([1e-3], 0))]
    log = tmp_path / "cut.jsonl"
    save_records(log, pair * 2)
    log.write_bytes(log.read_bytes()[:-40])  # the run was killed while writing line 2
    assert len(list(load_records(log))) == 1  # the fragment is skipped on reading
    save_records(log, pair)  # a resumed run appends: the fragment is dropped first
    log_to_file(log)(None, *zip(*pair))  # the tuners' callback appends the same way
    assert len(list(load_records(log))) == 3
    # a last record that is whole but lacks its newline is kept
    log.write_bytes(log.read_bytes()[:-1])
    save_records(log, pair)
    assert len(list(load_records(log))) == 4


@pytest.mark.parametrize("bad", [{"trials": -5}, {"max_tasks": 0}, {"max_tasks": -1},
                                 {"confirm": -1}, {"measure_threads": 0},
                                 {"time_budget": 0.0}, {"time_budget": -1.0},
                                 {"early_stopping": 0}])
def test_out_of_range_counts_are_refused_before_tuning(bad, tmp_path):
    # (were: --max-tasks 0 tuned every task, -1 all but the last, --time-budget 0 had no
    # limit, --trials -5 / --time-budget -1 measured nothing, --measure-threads 0 the default)
    (name, value), = bad.items()
    log = tmp_path / "r.jsonl"
    with pytest.raises(ember.errors.TuningError, match=rf"{name} \(--{name.replace('_', '-')}\)"):
        tune.tune_model(_small_model(), **{"trials": 2, "records": log, "progress": False,
                                           "log": None, "model_check": 0, **bad})
    assert not log.exists()


@pytest.mark.parametrize("change,message", [
    ({"costs": "abc"}, "costs must be a list"),
    ({"costs": [-1.0]}, "non-negative seconds"),
    ({"costs": [float("nan")]}, "non-negative seconds"),
    ({"version": 99}, "newer than this ember"),
])
def test_records_with_impossible_values_are_typed_errors(tmp_path, change, message):
    # (were: a raw TypeError while applying, or a negative / NaN cost chosen as the best)
    import json
    from ember.frontend.onnx import from_onnx
    from ember.tune import MeasureInput, MeasureResult, save_records
    mod, params = from_onnx(_small_model())
    task = tune.extract_tasks(mod, params, "llvm")[0].task
    log = tmp_path / "r.jsonl"
    save_records(log, [(MeasureInput(task.target, task, task.config_space.get(1)),
                        MeasureResult([1e-3], 0))])
    d = json.loads(log.read_text())
    d.update(change)
    log.write_text(json.dumps(d) + "\n")
    with pytest.raises(ember.errors.TuningError, match=f"r.jsonl:1: .*{message}"):
        tune.apply_history_best(log)


def test_a_resume_with_other_measure_threads_measures_the_untuned_kernels_again(tmp_path):
    # (was: the untuned times recorded with --measure-threads 1 were the baseline of a resume
    # with --measure-threads 2)
    import json
    model = _small_model()
    log = tmp_path / "threads.jsonl"
    kw = dict(trials=0, tuner="random", records=log, progress=False, repeat=1, max_tasks=1,
              algorithms=False, model_check=0, log=None)

    def defaults():
        return [r.result.threads for r in load_records(log) if r.kind == "default"]

    tune.tune_model(model, measure_threads=1, **kw)
    assert defaults() == [1]
    tune.tune_model(model, measure_threads=1, **kw)  # same threads: reused
    assert defaults() == [1]
    tune.tune_model(model, measure_threads=2, **kw)  # other threads: measured again
    assert defaults() == [1, 2]
    tune.tune_model(model, measure_threads=2, **kw)
    assert defaults() == [1, 2]
    # a records file of an older ember (no thread count) stays readable; its untuned times
    # are of an unknown thread count and are measured again
    lines = [json.loads(ln) for ln in log.read_text().splitlines()]
    for d in lines:
        d.pop("threads", None)
    log.write_text("".join(json.dumps(d) + "\n" for d in lines))
    assert defaults() == [None, None]
    tune.tune_model(model, measure_threads=2, **kw)
    assert defaults() == [None, None, 2]
