"""Tuning int8 kernels: the channels-last ``qnn.conv2d`` kernel's register block (``mr x nv``)
and pixel tile are knobs of its default rule (``qnn_rule``, ``ember.ops.qnn_conv.qgemm_knobs``)
like the float GEMM rule's. Every configuration must be bit-exact against the integer NumPy
reference; a tuned configuration must be recorded, replayed by ``apply_history_best`` (its
block shape in the built source) and give the untuned model's int8 output exactly."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import tune
from ember.graph.builder import FunctionBuilder
from ember.graph.ir import IRModule, TensorType
from ember.ops.qnn_conv import qconv_reference
from ember.tir.schedule.rules.qnn import qgemm_isa
from ember.tune import MeasureInput, MeasureResult, load_records, save_records

TARGET = ember.Target("llvm -num-threads=2")
HAS_VNNI = qgemm_isa(ember.Target("llvm")) == "avx512vnni"
pytestmark = pytest.mark.skipif(not HAS_VNNI, reason="the int8 knobs are AVX-512 VNNI's")


def _qconv_module(rng, **case):
    from test_qnn_channels_last import channels_last_case
    ins, attrs, _, _ = channels_last_case(rng, **case)
    fb = FunctionBuilder()
    names = ["x", "w", "b", "m", "s"][:len(ins)]
    vs = [fb.param(nm, TensorType(a.shape, str(a.dtype))) for nm, a in zip(names, ins)]
    mod = IRModule({"main": fb.finish([fb.call("qnn.conv2d", vs, attrs)])})
    feeds = {"x": ins[0], **({"s": ins[4]} if len(ins) > 4 else {})}
    return mod, dict(zip(["w", "b", "m"], ins[1:4])), feeds, qconv_reference(*ins, attrs)


CASES = [
    dict(n=1, c=20, h=9, w=11, cout=70, k=3, pad=1, relu=True),             # padded, tails
    dict(n=1, c=3, h=20, w=18, cout=40, k=7, stride=2, pad=3, layout="nchw_nhwc", dense=True,
         in_dtype="int8"),                                                  # the dense stem
    dict(n=1, c=32, h=7, w=7, cout=48, k=1, skip="int8"),                   # in place, residual
]


def _qnn_task(mod, params):
    tasks = [t for t in tune.extract_tasks(mod, params, TARGET, algorithms=False)
             if t.task is not None and t.op.startswith("qnn")]
    assert len(tasks) == 1
    return tasks[0].task


@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_int8_config_is_bit_exact(case):
    rng = np.random.default_rng(300 + case)
    mod, params, feeds, want = _qconv_module(rng, **CASES[case])
    task = _qnn_task(mod, params)
    assert task.name == "rule"
    space = task.config_space
    knobs = space.get(0).values()
    assert set(knobs) == {"tile", "pixels"} and knobs["tile"] == [6, 4]
    assert len(space) > 4
    from ember.runtime.kernel import compile_prim_func
    shapes = set()
    # the default, every block shape at the default tile and every tile at the default block
    cfgs = [c for c in space if c.values()["tile"] == knobs["tile"] or
            c.values()["pixels"] == knobs["pixels"]]
    for cfg in cfgs:
        g = task.instantiate(cfg)
        assert g.attrs["schedule_rule"] == "qnn_rule"
        assert g.attrs["schedule_config"] == cfg.values()
        x = [feeds["x"], params["w"], params["b"], params["m"]] + \
            ([feeds["s"]] if "s" in feeds else [])
        got = compile_prim_func(g, TARGET).run(x)[0]
        np.testing.assert_array_equal(got, want, err_msg=f"config {cfg.values()}")
        mr, nv = cfg.values()["tile"]
        shapes.add((mr, nv, cfg.values()["pixels"]))
    assert len(shapes) == len(cfgs) >= 4


def test_bad_int8_config_is_a_typed_error():
    from ember.errors import ScheduleError
    from ember.tir.schedule.rules import schedule_config
    mod, params, _, _ = _qconv_module(np.random.default_rng(1), **CASES[0])
    task = _qnn_task(mod, params)
    from ember.tune.templates import workload_func
    func = workload_func(task.args[0])
    with pytest.raises(ScheduleError, match="accumulators"):
        schedule_config(func, TARGET, "qnn_rule", {"tile": [8, 4], "pixels": 96})
    with pytest.raises(ScheduleError, match="pixel tile"):
        schedule_config(func, TARGET, "qnn_rule", {"tile": [6, 4], "pixels": 100000})


def test_records_replay_the_int8_knobs_bit_exact(tmp_path):
    rng = np.random.default_rng(7)
    mod, params, feeds, want = _qconv_module(rng, **CASES[0])
    task = _qnn_task(mod, params)
    default = task.config_space.get(0).values()
    pick = next(c for c in task.config_space if c.values()["tile"] != default["tile"]
                and c.values()["pixels"] != default["pixels"])
    log = tmp_path / "q.jsonl"
    save_records(log, [(MeasureInput(TARGET, task, task.config_space.get(0)),
                        MeasureResult([2e-4], 0)),
                       (MeasureInput(TARGET, task, pick), MeasureResult([1e-4], 0)),
                       (MeasureInput(TARGET, task, None), MeasureResult([2e-4], 0))])
    recs = list(load_records(log))
    assert recs[1].config["index"] == pick.index
    with tune.apply_history_best(log) as ctx:
        tuned = ember.build(mod, TARGET, params)
    assert ctx.applied == 1
    mr, nv = pick.values()["tile"]
    assert f"_b{mr}x{nv}(" in tuned.source  # the tuned register block's function
    np.testing.assert_array_equal(tuned.run(feeds)[0], want)


def _qdq_conv_model():
    """A QDQ convolution as onnxruntime's quantize_static writes it (per-channel s8 weights,
    u8 activations, int32 bias)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    cout, c = 40, 16
    wq = rng.integers(-127, 128, (cout, c, 3, 3)).astype(np.int8)
    ws = rng.uniform(0.002, 0.004, cout).astype(np.float32)
    xs, ys = np.float32(0.02), np.float32(0.05)
    bq = rng.integers(-3000, 3000, cout).astype(np.int32)
    inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(np.zeros(cout, np.int8), "wz"),
             numpy_helper.from_array(bq, "bq"), numpy_helper.from_array(ws * xs, "bs"),
             numpy_helper.from_array(np.zeros(cout, np.int32), "bz"),
             numpy_helper.from_array(np.array(xs), "xs"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             numpy_helper.from_array(np.array(ys), "ys"),
             numpy_helper.from_array(np.array(3, np.uint8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, c, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [1, cout, 14, 14])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_tuning_an_int8_conv_records_the_knobs_and_stays_bit_exact(tmp_path):
    import onnxruntime as ort
    model = _qdq_conv_model()
    log = tmp_path / "t.jsonl"
    tune.tune_model(model, target=TARGET, trials=6, tuner="random", records=log,
                    progress=False, repeat=1, number=2, per_call=True, log=None,
                    algorithms=False, model_check=0)
    recs = [r for r in load_records(log) if r.task_name == "rule" and r.kind == "config"]
    assert recs and all(r.ok for r in recs)  # each candidate passed the exact check
    from ember.tune.space import ConfigEntity
    from ember.tune.task import Task
    task = Task("rule", recs[0].task_args, TARGET)
    seen = {tuple(ConfigEntity.from_json(r.config, task.config_space).values()["tile"])
            for r in recs}
    assert len(seen) >= 2  # the block shape was searched
    x = np.random.default_rng(1).standard_normal((1, 16, 14, 14)).astype(np.float32)
    untuned = ember.compile(model, target=TARGET).run({"x": x})[0]
    with tune.apply_history_best(log):  # whichever configuration won
        np.testing.assert_array_equal(ember.compile(model, target=TARGET).run({"x": x})[0],
                                      untuned)
    # a record that makes a non-default block the fastest: replayed, still bit-exact
    default = task.config_space.get(0).values()
    pick = next(c for c in task.config_space if c.values()["tile"] != default["tile"])
    log2 = tmp_path / "t2.jsonl"
    save_records(log2, [(MeasureInput(TARGET, task, task.config_space.get(0)),
                         MeasureResult([2e-4], 0)),
                        (MeasureInput(TARGET, task, pick), MeasureResult([1e-4], 0))])
    with tune.apply_history_best(log2) as ctx:
        tuned = ember.compile(model, target=TARGET)
    assert ctx.applied == 1
    mr, nv = pick.values()["tile"]
    assert f"_b{mr}x{nv}(" in tuned.source
    np.testing.assert_array_equal(tuned.run({"x": x})[0], untuned)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(model.SerializeToString(), so,
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(untuned, ref, atol=0.05 * 1.001, rtol=0)  # within one step
