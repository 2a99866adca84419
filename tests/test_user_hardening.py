"""Defects found by trying ember as a new user: concurrent runs, unsafe saves, bad shape
overrides, out-of-range constant gather indices, bad command-line values."""

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ember
from ember.cli import main
from ember.errors import (ArtifactError, InputError, ModelLoadError, ShapeMismatchError,
                          TargetError)


def _model(batch="N", opset=13):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4],
                           np.arange(16, dtype=np.float32) / 16)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                           helper.make_node("Relu", ["m"], ["y"])], "g", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_concurrent_runs_give_each_caller_its_own_result():
    m = ember.compile(_model(batch=8))
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(50):
            x = rng.standard_normal((8, 4)).astype(np.float32)
            (y,) = m.run({"x": x})
            if not np.allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6):
                errors.append(seed)
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("how", ["cm.profile", "profiler.profile"])
def test_profiling_waits_for_a_run_in_progress_and_runs_stay_right(how):
    """``CompiledModel.profile`` and ``ember.runtime.profiler.profile`` call the kernels on the
    model's own arena, as ``run`` does: from another thread they wait for a run in progress
    (the executor's run lock) instead of overwriting its intermediates (a concurrent
    ``cm.profile`` gave ~1 wrong output in 150 runs), and runs beside them match NumPy."""
    from ember.runtime.profiler import profile
    m = ember.compile(_model(batch=8), target="llvm -num-threads=1")
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((8, 4)).astype(np.float32)}

    def prof():
        if how == "cm.profile":
            m.profile(feeds, repeat=2)
        else:
            profile(m, feeds, repeat=2, warmup=0, hot=False)
    lock = m._executor._run_lock
    with lock:  # a run in progress
        t = threading.Thread(target=prof)
        t.start()
        t.join(0.5)
        assert t.is_alive(), "profiling ran the kernels during a run"
    t.join()
    x = rng.standard_normal((8, 4)).astype(np.float32)
    want = np.maximum(x @ w, 0)
    done, wrong = [], []

    def profiling():
        while not done:
            prof()
    t = threading.Thread(target=profiling)
    t.start()
    try:
        for _ in range(150):
            if not np.allclose(m.run({"x": x})[0], want, rtol=1e-5, atol=1e-6):
                wrong.append(1)
    finally:
        done.append(1)
        t.join()
    assert not wrong, f"{len(wrong)} of 150 runs beside {how} were wrong"


def test_save_refuses_the_source_model_and_non_regular_files(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(_model(batch=2), src)
    before = src.read_bytes()
    m = ember.compile(str(src))
    with pytest.raises(ArtifactError, match="source model"):
        m.save(src)
    assert src.read_bytes() == before
    with pytest.raises(ArtifactError, match="not a regular file"):
        m.save(tmp_path)
    assert main(["compile", str(src), "-o", str(src)]) == 2
    assert src.read_bytes() == before


def test_saved_artifact_is_readable_by_others(tmp_path):
    m = ember.compile(_model(batch=2))
    m.save(tmp_path / "m.ember")
    assert (tmp_path / "m.ember").stat().st_mode & 0o044  # group/other read unless umask says no


@pytest.mark.parametrize("shapes, match", [
    ({"x": (-1, 4)}, "non-negative ints"),
    ({"x": (2.5, 4)}, "non-negative ints"),
    ({"x": "2,4"}, "non-negative ints"),
    ({"x": (2, 5)}, "fixes at 4"),
    ({"q": (2, 4)}, "not inputs of the model"),
])
def test_bad_shape_overrides_are_typed_errors(shapes, match):
    with pytest.raises(ShapeMismatchError, match=match):
        ember.compile(_model(), shapes=shapes)


def test_symbolic_dim_error_mentions_the_command_line_form():
    with pytest.raises(ShapeMismatchError, match="--shape x="):
        ember.compile(_model(), executor="static")
    # the default executor runs the model staged; its reason keeps the command-line fix
    assert "--shape x=" in ember.compile(_model()).info["staged_reason"]


def test_constant_gather_index_out_of_range_is_an_error():
    data = helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 2])
    out = helper.make_tensor_value_info("o", TensorProto.FLOAT, [1, 2])
    idx = helper.make_tensor("i", TensorProto.INT64, [1], [7])
    g = helper.make_graph([helper.make_node("Gather", ["d", "i"], ["o"])], "g", [data], [out],
                          [idx])
    with pytest.raises(ShapeMismatchError, match="out of range"):
        ember.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def test_not_a_model_object_is_a_model_load_error():
    with pytest.raises(ModelLoadError, match="got int"):
        ember.compile(42)


@pytest.mark.parametrize("spec", ["llvm -num-threads=abc", "llvm -num-threads=0"])
def test_bad_thread_count_is_a_target_error(spec):
    with pytest.raises(TargetError, match="positive integer"):
        ember.Target(spec)


def test_cli_rejects_bad_values(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(_model(batch=2), src)
    for argv in (["run", str(src), "--repeat", "0"], ["compile", str(src), "--opt-level", "7"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    assert main(["compile", str(src), "-o", str(tmp_path / "m.ember"), "--disable-pass",
                 "NoSuchPass"]) == 2
    assert "no such pass" in capsys.readouterr().err
    (tmp_path / "t.npy").write_text("not an array")
    assert main(["run", str(src), "--input", f"x={tmp_path / 't.npy'}"]) == 2
    assert "not a numeric .npy" in capsys.readouterr().err


def _gather_model(op, data_shape, index_shape, opset=13, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(data_shape))
    i = helper.make_tensor_value_info("i", TensorProto.INT64, list(index_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node(op, ["x", "i"], ["y"], **attrs)], "g", [x, i], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("use_aot", [True, False])
@pytest.mark.parametrize("op, attrs, good, bad, bound", [
    ("Gather", {"axis": 1}, [[2, -3]], [[0, 3]], "[-3, 2]"),
    ("GatherElements", {"axis": 0}, [[3, -4, 0], [1, 1, 1]], [[0, 0, 0], [-5, 0, 0]], "[-4, 3]"),
    ("GatherND", {}, [[3, 2], [-4, -3]], [[3, 2], [4, 0]], "(-4, 3), (-3, 2)"),
])
def test_run_time_index_out_of_range_is_a_typed_error(op, attrs, good, bad, bound, use_aot):
    """ONNX makes out-of-range gather indices an error: the kernel checks its index input and
    the run fails with an InputError naming the node, instead of a clamped (wrong) answer."""
    import onnxruntime as ort
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    good, bad = np.array(good, np.int64), np.array(bad, np.int64)
    model = _gather_model(op, x.shape, good.shape, **attrs)
    m = ember.compile(model)
    m._executor.use_aot = use_aot
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(m.run({"x": x, "i": good})[0],
                                  ref.run(None, {"x": x, "i": good})[0])
    with pytest.raises(InputError, match=r"out of range") as e:
        m.run({"x": x, "i": bad})
    assert "'y'" in str(e.value) and bound in str(e.value)
    # the model still runs correctly after a refused input
    np.testing.assert_array_equal(m.run({"x": x, "i": good})[0],
                                  ref.run(None, {"x": x, "i": good})[0])


def _scatter_model(op, data_shape, index_shape, update_shape, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(data_shape))
    i = helper.make_tensor_value_info("i", TensorProto.INT64, list(index_shape))
    u = helper.make_tensor_value_info("u", TensorProto.FLOAT, list(update_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node(op, ["x", "i", "u"], ["y"], **attrs)], "g",
                          [x, i, u], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])


@pytest.mark.parametrize("op, attrs, good, bad, bound", [
    ("ScatterElements", {"axis": 0}, [[3, -4, 0]], [[4, 0, 0]], "[-4, 3]"),
    ("ScatterND", {}, [[3, 2], [-4, -3]], [[0, 3], [1, 1]], "(-4, 3), (-3, 2)"),
])
def test_run_time_scatter_index_out_of_range_is_a_typed_error(op, attrs, good, bad, bound):
    import onnxruntime as ort
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    good, bad = np.array(good, np.int64), np.array(bad, np.int64)
    u = np.full((1, 3) if op == "ScatterElements" else (2,), -1.0, np.float32)
    model = _scatter_model(op, x.shape, good.shape, u.shape, **attrs)
    m = ember.compile(model)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(m.run({"x": x, "i": good, "u": u})[0],
                                  ref.run(None, {"x": x, "i": good, "u": u})[0])
    with pytest.raises(InputError, match=r"out of range") as e:
        m.run({"x": x, "i": bad, "u": u})
    assert "'y'" in str(e.value) and bound in str(e.value)


def test_max_unpool_index_out_of_range_is_a_typed_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [1, 1, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2],
                                            strides=[2, 2])], "g", [x, i], [y])
    m = ember.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]))
    xv = np.array([[[[1, 2], [3, 4]]]], np.float32)
    good = np.array([[[[0, 3], [9, 15]]]], np.int64)
    want = np.zeros(16, np.float32)
    want[[0, 3, 9, 15]] = [1, 2, 3, 4]
    np.testing.assert_array_equal(m.run({"x": xv, "i": good})[0].reshape(-1), want)
    with pytest.raises(InputError, match=r"MaxUnpool index must lie in \[0, 15\]"):
        m.run({"x": xv, "i": np.array([[[[0, 3], [9, 100000]]]], np.int64)})
