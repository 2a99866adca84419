"""The ``rule`` template: the default GEMM rule's own decisions (register tile, loop order,
K-blocking, parallel fusion) as tuning knobs. Every configuration must compute the operator's
NumPy reference; configuration 0 must be the untuned schedule; records of a tuned
configuration must round-trip and be replayed by ``apply_history_best``."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
from ember import tune
from ember.codegen.c import emit_c_function
from ember.errors import TuningError
from ember.runtime.kernel import compile_prim_func
from ember.tir.schedule.rules import gemm_knobs, rule_knobs, schedule_default
from ember.tune import MeasureInput, MeasureResult, load_records, save_records
from ember.tune.extract import register_workload
from ember.tune.measure import LocalBuilder, LocalRunner, MeasureErrorNo, measure_option
from ember.tune.task import Task
from test_default_schedules import RELU, _packed
from test_default_schedules import _op_kernel as _base_op_kernel

TARGET = ember.Target("llvm -num-threads=2")
RNG = np.random.default_rng(0)

CASES = [
    # 3x3 convolution, NHWC, padded, bias + ReLU epilogue
    ("nn.conv", [(1, 8, 8, 16), (32, 16, 3, 3), (32,)],
     {"pads": [1, 1, 1, 1], "data_layout": "NHWC"}),
    # long reduction on a small image: the K-blocked variant is the default
    ("nn.conv", [(1, 6, 6, 128), (32, 128, 3, 3)], {"pads": [1, 1, 1, 1],
                                                    "data_layout": "NHWC"}),
    # dense and batched matmul
    ("nn.gemm", [(6, 40), (40, 48), (48,)], {}),
    ("matmul", [(2, 12, 16), (16, 48)], {}),
]


def _op_kernel(op, shapes, attrs):
    f, xs, ref = _base_op_kernel(op, shapes, attrs, RELU, RNG)
    return f, xs, np.maximum(ref, 0)


def _run(g, xs):
    return compile_prim_func(g, TARGET).run(_packed(g, xs))[0]


def _rule_task(f):
    return Task("rule", [register_workload(f), str(TARGET)], TARGET)


@pytest.mark.parametrize("op, shapes, attrs", CASES)
def test_every_rule_config_matches_the_numpy_reference(op, shapes, attrs):
    f, xs, ref = _op_kernel(op, shapes, attrs)
    task = _rule_task(f)
    space = task.config_space
    assert len(space) > 1
    ran, redundant = 0, 0
    for cfg in space:
        try:
            g = task.instantiate(cfg)
        except TuningError as e:  # a configuration equal to another one: never measured
            assert "redundant" in str(e)
            redundant += 1
            continue
        assert g.attrs["schedule_rule"] == "gemm_rule"
        assert g.attrs["schedule_config"] == cfg.values()
        np.testing.assert_allclose(_run(g, xs), ref, rtol=1e-4, atol=1e-4,
                                   err_msg=f"config {cfg.values()}")
        ran += 1
    assert ran + redundant == len(space) and ran >= 2


@pytest.mark.parametrize("op, shapes, attrs", CASES)
def test_default_config_is_the_untuned_schedule(op, shapes, attrs):
    f, _, _ = _op_kernel(op, shapes, attrs)
    task = _rule_task(f)
    knobs = gemm_knobs(f, TARGET)
    assert task.config_space.get(0).values() == {k: v[0] for k, v in knobs.items()}
    tuned0 = task.instantiate(task.config_space.get(0))
    default = schedule_default(f, TARGET)
    assert emit_c_function(tuned0, "k", target=TARGET) == emit_c_function(default, "k",
                                                                           target=TARGET)
    # and the rule with an empty configuration is the rule without one
    assert rule_knobs(f, TARGET)[0] == "gemm_rule"


def test_k_blocking_is_a_knob_both_ways():
    f, _, _ = _op_kernel(*CASES[1])
    assert gemm_knobs(f, TARGET)["kblock"][0] > 0     # default: blocked
    f2, _, _ = _op_kernel(*CASES[0])
    assert gemm_knobs(f2, TARGET)["kblock"][0] == 0   # default: not blocked


def test_kblocked_weight_prefetch_is_a_knob():
    """K-blocked schedules prefetch the next weight slice by default (``prefetch`` 1, the
    ``pfnext`` micro-kernel); ``prefetch=0`` is the plain kernel; a small GEMM that cannot be
    K-blocked neither prefetches nor offers it."""
    from ember.errors import ScheduleError
    from ember.tir.schedule.rules import schedule_config
    f, xs, ref = _op_kernel(*CASES[1])
    assert gemm_knobs(f, TARGET)["prefetch"] == [1, 0]
    on = schedule_default(f, TARGET)
    off = schedule_config(f, TARGET, "gemm_rule", {"prefetch": 0})
    # (the name may end in a row-group suffix, ``_g2``: ember.tir.transform.row_groups)
    assert re.search(r"_pn(_g\d+)?\(", emit_c_function(on, "k", target=TARGET))
    assert not re.search(r"_pn(_g\d+)?\(", emit_c_function(off, "k", target=TARGET))
    for g in (on, off):
        np.testing.assert_allclose(_run(g, xs), ref, rtol=1e-4, atol=1e-4)
    f2, _, _ = _op_kernel(*CASES[0])
    assert gemm_knobs(f2, TARGET)["prefetch"] == [0]
    with pytest.raises(ScheduleError, match="prefetch 2 is not 0 or 1"):
        schedule_config(f, TARGET, "gemm_rule", {"prefetch": 2})


def test_illegal_tile_is_a_typed_error():
    from ember.errors import ScheduleError
    from ember.tir.schedule.rules import schedule_config
    f, _, _ = _op_kernel(*CASES[0])
    with pytest.raises(ScheduleError, match="register tile"):
        schedule_config(f, TARGET, "gemm_rule", {"tile": [5, 7]})


def test_measurement_packs_weights_and_catches_a_wrong_layout():
    f, _, _ = _op_kernel(*CASES[0])
    task = _rule_task(f)
    cfgs = [c for c in task.config_space if c.values()["tile"] != task.config_space.get(0)
            .values()["tile"]][:1] + [task.config_space.get(0)]
    option = measure_option(LocalBuilder(), LocalRunner(repeat=1, number=1, per_call=True))
    inputs = [MeasureInput(TARGET, task, c) for c in cfgs]
    try:
        builds = option["builder"].build(inputs)
        assert all(b.layouts for b in builds)  # the weights are packed by the schedule
        res = option["runner"].run(inputs, builds)
        assert all(r.ok for r in res), [r.error_msg for r in res]
        for b in builds:  # the same kernels fed unpacked weights compute something else
            b.layouts = {}
        wrong = option["runner"].run(inputs, builds)
        assert all(r.error_no == MeasureErrorNo.WRONG_ANSWER for r in wrong)
    finally:
        option["runner"].close()


def _small_model():
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype("float32") * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "small",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 16, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [1, 32, 12, 12])], [w, b])
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_records_round_trip_and_apply_history_best_replays_the_config(tmp_path):
    from ember.frontend.onnx import from_onnx
    import onnxruntime as ort
    model = _small_model()
    mod, params = from_onnx(model)
    tasks = tune.extract_tasks(mod, params, TARGET)
    task = tasks[0].task
    assert task.name == "rule"
    default = task.config_space.get(0).values()
    pick = next(c for c in task.config_space
                if c.values()["tile"] != default["tile"] and c.values()["kblock"] == 0
                and c.values()["order"] == default["order"])
    log = tmp_path / "r.jsonl"
    # measurements stated here (not timed): the picked config 2x faster than the default
    save_records(log, [(MeasureInput(TARGET, task, task.config_space.get(0)),
                        MeasureResult([2e-4], 0)),
                       (MeasureInput(TARGET, task, pick), MeasureResult([1e-4], 0)),
                       (MeasureInput(TARGET, task, None), MeasureResult([2e-4], 0))])
    recs = list(load_records(log))
    assert [r.kind for r in recs] == ["config", "config", "default"]
    assert recs[1].task_name == "rule" and recs[1].config["index"] == pick.index
    assert tune.space.ConfigEntity.from_json(recs[1].config, task.config_space).values() \
        == pick.values()
    x = np.random.default_rng(1).standard_normal((1, 16, 12, 12)).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with tune.apply_history_best(log) as ctx:
        tuned = ember.compile(model, target=TARGET)
    assert ctx.applied == 1
    mr, nr = pick.values()["tile"]
    assert f"_{mr}x{nr}_" in tuned.source  # the tuned register tile's micro-kernel
    np.testing.assert_allclose(tuned.run({"x": x})[0], want, rtol=1e-4, atol=1e-4)
    # the same config within the margin of the default: the default schedule is kept
    save_records(log, [(MeasureInput(TARGET, task, None), MeasureResult([1.005e-4], 0))])
    with tune.apply_history_best(log) as ctx:
        ember.compile(model, target=TARGET)
    assert ctx.applied == 0


def test_tune_model_rule_tasks_measure_the_default_first(tmp_path):
    log = tmp_path / "t.jsonl"
    s = tune.tune_model(_small_model(), target=TARGET, trials=6, tuner="xgb", records=log,
                        progress=False, repeat=1, number=2, per_call=True, confirm=2,
                        confirm_rounds=1, log=None, algorithms=False)
    # (algorithms=False: the convolution stays direct, so its rule task is the one tuned; the
    # algorithm tasks are tested in test_strategy.py)
    recs = [r for r in load_records(log) if r.task_name == "rule"]
    assert recs[0].kind == "config" and recs[0].config["index"] == 0
    assert all(r.ok for r in recs)  # every configuration passed the correctness check
    # every batch is timed side by side with the default (the anchor), and the confirmation
    # round re-measures the default with the best configurations: each group holds config 0
    groups: dict = {}
    for r in recs:
        if r.kind == "config":
            groups.setdefault(r.result.group, []).append(r.config["index"])
    assert "" not in groups and all(0 in g for g in groups.values())
    assert len(groups) >= 4  # 3 batches of 2 trials + 1 confirmation round
    from ember.tune.records import paired_speedups
    per = paired_speedups(recs)[(recs[0].task_key, str(TARGET))]
    assert len(per) >= 3 and all(v and all(x > 0 for x in v) for v in per.values())
    assert s.tasks[0].trials == 6


@pytest.mark.parametrize("speedup, applied", [(1.10, 1), (1.01, 0)])
def test_side_by_side_evidence_decides(tmp_path, speedup, applied):
    from ember.frontend.onnx import from_onnx
    model = _small_model()
    mod, params = from_onnx(model)
    task = tune.extract_tasks(mod, params, TARGET)[0].task
    default = task.config_space.get(0).values()
    pick = next(c for c in task.config_space
                if c.values()["tile"] != default["tile"] and c.values()["kblock"] == 0
                and c.values()["order"] == default["order"])
    log = tmp_path / "g.jsonl"
    pairs = []
    # stated measurements: two interleaved groups; a third, lone measurement of the pick
    # that looks 10x faster is not side-by-side evidence and must not decide
    for g, load in (("g1", 1.0), ("g2", 1.7)):
        pairs += [(MeasureInput(TARGET, task, task.config_space.get(0)),
                   MeasureResult([1e-3 * load], 0, group=g)),
                  (MeasureInput(TARGET, task, pick),
                   MeasureResult([1e-3 * load / speedup], 0, group=g))]
    pairs.append((MeasureInput(TARGET, task, pick), MeasureResult([1e-4], 0)))
    save_records(log, pairs)
    assert {r.result.group for r in load_records(log)} == {"g1", "g2", ""}
    with tune.apply_history_best(log, margin=0.02) as ctx:
        ember.compile(model, target=TARGET)
    assert ctx.applied == applied


@pytest.mark.parametrize("fuse", [0, 1])
def test_parallel_fusion_knob_matches_reference(fuse):
    # ``fuse`` is out of the default tuned space (TUNE_PARALLEL_FUSION) but stays a rule knob
    from ember.tir.schedule.rules import schedule_config
    for case in CASES[:2]:
        f, xs, ref = _op_kernel(*case)
        g = schedule_config(f, TARGET, "gemm_rule", {"kblock": 0, "fuse": fuse})
        np.testing.assert_allclose(_run(g, xs), ref, rtol=1e-4, atol=1e-4)


# kernels whose spaces offered configurations the rule then could not tensorize (``ScheduleError``
# at build time, a wasted trial): one-column tiles (``nr = 1``, no SIMD lane loop) where the
# output has fewer channels than lanes, and K-blocking whose whole-row register block exceeds
# the ISA's accumulators (a 14-wide row on AVX2)
UNBUILDABLE_CASES = [
    (("matmul", [(2, 7, 64), (64, 8)], {}), "avx512"),
    (("nn.conv", [(1, 6, 6, 16), (8, 16, 3, 3), (8,)],
      {"pads": [0, 1, 2, 1], "strides": [2, 2], "data_layout": "NHWC"}), "avx512"),
    (("matmul", [(1, 14, 128), (128, 128)], {}), "avx2"),
]


@pytest.mark.parametrize("case, isa", UNBUILDABLE_CASES)
def test_every_offered_config_builds_and_matches(case, isa):
    target = ember.Target(f"llvm -num-threads=2 -isa={isa}")
    if isa == "avx512" and ember.Target("llvm").isa != "avx512":
        pytest.skip("host CPU lacks AVX-512: the avx512 kernels cannot run here")
    f, xs, ref = _op_kernel(*case)
    task = Task("rule", [register_workload(f), str(target)], target)
    ran = 0
    for cfg in task.config_space:
        try:
            g = task.instantiate(cfg)
        except TuningError as e:  # redundant: never measured
            assert "redundant" in str(e), (cfg.values(), e)
            continue
        got = compile_prim_func(g, target).run(_packed(g, xs))[0]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4,
                                   err_msg=f"config {cfg.values()}")
        ran += 1
    assert ran >= 2


def test_a_row_too_wide_for_avx2_accumulators_keeps_the_gemm_micro_kernel():
    """A 13-wide image with a long reduction: the K-blocked default would take the whole row as
    the register block (13 accumulators, AVX2 has room for 12), so the rule used to fail and
    the kernel fell back to the generic loop nest. Now the blocking is not planned and the
    ordinary tiled GEMM schedule runs; it matches the NumPy reference."""
    target = ember.Target("llvm -num-threads=2 -isa=avx2")
    if "avx2" not in target.features:
        pytest.skip("this machine has no AVX2")
    f, xs, ref = _op_kernel("nn.conv", [(2, 13, 13, 128), (16, 128, 3, 3), (16,)],
                            {"pads": [1, 1, 1, 1], "data_layout": "NHWC"})
    g = schedule_default(f, target)
    src = emit_c_function(g, "k", target=target)
    assert "ember_ukr_gemm_avx2_f32_" in src
    got = compile_prim_func(g, target).run(_packed(g, xs))[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
