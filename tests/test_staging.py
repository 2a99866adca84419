"""The staged executor (ember.frontend.staging) and the ONNX backend API over it: run-time
shape-like inputs specialize compiled segments, data-dependent ops and control flow run on the
host, the report says which nodes did, and unsupported operators fail with typed errors."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ember.errors import UnsupportedOpError
from ember.frontend import backend


def _model(nodes, inputs, outputs, opset=18, **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, **kw)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_reduce_axes_given_at_run_time_specialize_per_value():
    m = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
               [vi("x", TensorProto.FLOAT, [2, 3, 4]), vi("axes", TensorProto.INT64, [1])],
               [vi("y", TensorProto.FLOAT, None)])
    rep = backend.prepare(m)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    for ax in (0, 2, -2):
        y, = rep.run([x, np.array([ax], np.int64)])
        np.testing.assert_allclose(y, x.sum(axis=ax), rtol=1e-5)
    segs = rep.staged.report()["segments"]
    assert len(segs) == 1 and segs[0]["specialized_on"] == ["axes"]
    assert segs[0]["specializations"] == 3


def test_shape_computed_from_data_cuts_the_segment():
    # k = max(v) is only known after the first segment ran: TopK's segment starts there
    nodes = [helper.make_node("ReduceMax", ["v"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["k0"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["k0", "one"], ["k"]),
             helper.make_node("TopK", ["x", "k"], ["vals", "idx"])]
    m = _model(nodes, [vi("x", TensorProto.FLOAT, [6]), vi("v", TensorProto.FLOAT, [3])],
               [vi("vals", TensorProto.FLOAT, None), vi("idx", TensorProto.INT64, None)],
               initializer=[helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    rep = backend.prepare(m)
    x = np.array([3, 1, 4, 1, 5, 9], np.float32)
    vals, idx = rep.run([x, np.array([1, 3, 2], np.float32)])
    np.testing.assert_array_equal(vals, [9, 5, 4])
    np.testing.assert_array_equal(idx, [5, 4, 2])
    assert len(rep.staged.report()["segments"]) == 2


def test_nonzero_runs_on_the_host_and_feeds_compiled_ops():
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Mul", ["nz", "two"], ["y"])]
    m = _model(nodes, [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.INT64, None)],
               initializer=[helper.make_tensor("two", TensorProto.INT64, [], [2])])
    rep = backend.prepare(m)
    x = np.array([[0, 1, 0], [2, 0, 3]], np.float32)
    y, = rep.run([x])
    np.testing.assert_array_equal(y, np.array(np.nonzero(x)) * 2)
    rpt = rep.staged.report()
    assert [h["op"] for h in rpt["host_nodes"]] == ["NonZero"]
    assert rpt["segments"][0]["ops"] == ["Mul"]


def test_if_with_run_time_condition_runs_compiled_branches():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                               [vi("t", TensorProto.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [vi("e", TensorProto.FLOAT, [3])])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
               [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [3])],
               [vi("y", TensorProto.FLOAT, [3])])
    rep = backend.prepare(m)
    x = np.array([1, -2, 3], np.float32)
    np.testing.assert_array_equal(rep.run([np.array(True), x])[0], 2 * x)
    np.testing.assert_array_equal(rep.run([np.array(False), x])[0], -x)


def test_loop_carries_values_and_stacks_scan_outputs():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])], "body",
        [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []),
         vi("acc", TensorProto.FLOAT, [2])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", TensorProto.FLOAT, [2]),
         vi("scan", TensorProto.FLOAT, [2])])
    m = _model([helper.make_node("Loop", ["n", "", "a0"], ["acc", "all"], body=body)],
               [vi("n", TensorProto.INT64, []), vi("a0", TensorProto.FLOAT, [2]),
                vi("x", TensorProto.FLOAT, [2])],
               [vi("acc", TensorProto.FLOAT, [2]), vi("all", TensorProto.FLOAT, None)])
    rep = backend.prepare(m)
    x = np.array([1, 2], np.float32)
    acc, allv = rep.run([np.array(3, np.int64), np.zeros(2, np.float32), x])
    np.testing.assert_array_equal(acc, 3 * x)
    np.testing.assert_array_equal(allv, np.stack([x, 2 * x, 3 * x]))


def test_function_op_is_expanded_into_its_body():
    # MeanVarianceNormalization has no ember converter: its ONNX function body runs
    m = _model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2])],
               [vi("x", TensorProto.FLOAT, [2, 3, 4])], [vi("y", TensorProto.FLOAT, None)])
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    y, = backend.prepare(m).run([x])
    mean = x.mean(axis=(0, 2), keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=(0, 2), keepdims=True))
    np.testing.assert_allclose(y, (x - mean) / (std + 1e-9), rtol=1e-4, atol=1e-5)


def test_unsupported_operator_is_a_typed_error_naming_op_and_node():
    n = helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery", domain="custom.domain")
    g = helper.make_graph([n], "g", [vi("x", TensorProto.FLOAT, [2])],
                          [vi("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid("custom.domain", 1)])
    with pytest.raises(UnsupportedOpError) as e:
        backend.prepare(m).run([np.zeros(2, np.float32)])
    assert e.value.op == "NoSuchOp" and "mystery" in str(e.value)


def test_backend_api_run_node_and_devices():
    node = helper.make_node("Relu", ["x"], ["y"])
    x = np.array([-1.0, 0.5], np.float32)
    y, = backend.run_node(node, [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")


def test_onnx_backend_test_drives_ember():
    """onnx's own BackendTest harness runs ember through the Backend API."""
    import onnx.backend.test
    bt = onnx.backend.test.BackendTest(backend, __name__)
    bt.include(r"^test_(relu|add_bcast|gather_0|sequence_model1|if)_cpu$")
    suite = bt.test_cases
    import unittest
    loader = unittest.TestLoader()
    tests = unittest.TestSuite(loader.loadTestsFromTestCase(c) for c in suite.values())
    result = unittest.TextTestRunner(verbosity=0).run(tests)
    assert result.testsRun >= 5 and result.wasSuccessful(), result.failures + result.errors


__all__ = ["onnx"]


# ember.compile(executor=...) -------------------------------------------------------------------

def _nonzero_model():
    return _model([helper.make_node("NonZero", ["x"], ["y"])],
                  [vi("x", TensorProto.FLOAT, [5])], [vi("y", TensorProto.INT64, None)])


def _runtime_axes_model():
    return _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                  [vi("x", TensorProto.FLOAT, [2, 3, 4]), vi("axes", TensorProto.INT64, [1])],
                  [vi("y", TensorProto.FLOAT, None)])


def test_compile_falls_back_to_the_staged_executor_for_data_dependent_shapes():
    import ember
    from ember.frontend.staging import StagedModel
    m = ember.compile(_nonzero_model())
    assert isinstance(m, StagedModel) and m.info["executor"] == "staged"
    assert "NonZero" in m.info["staged_reason"]
    x = np.array([0, 1.5, 0, -2, 0], np.float32)
    y, = m.run({"x": x})
    np.testing.assert_array_equal(y, np.stack(np.nonzero(x)))


def test_compile_falls_back_for_run_time_shape_values():
    import ember
    m = ember.compile(_runtime_axes_model())
    assert m.info["executor"] == "staged"
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    y, = m.run({"x": x, "axes": np.array([1], np.int64)})
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-5)


def test_static_executor_refuses_run_time_shapes_with_a_typed_error():
    import ember
    from ember.errors import RuntimeValueError
    with pytest.raises(RuntimeValueError, match="run time"):
        ember.compile(_runtime_axes_model(), executor="static")
    with pytest.raises(UnsupportedOpError, match="NonZero"):
        ember.compile(_nonzero_model(), executor="static")
    with pytest.raises(ValueError, match="executor"):
        ember.compile(_nonzero_model(), executor="vm")


def test_static_model_reports_its_executor():
    import ember
    m = ember.compile(_model([helper.make_node("Relu", ["x"], ["y"])],
                             [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])]))
    assert m.info["executor"] == "static"


def test_staged_model_cannot_be_saved(tmp_path):
    import ember
    from ember.errors import ArtifactError
    m = ember.compile(_nonzero_model())
    with pytest.raises(ArtifactError, match="staged executor"):
        m.save(tmp_path / "m.ember")
    assert not (tmp_path / "m.ember").exists()


def test_cli_runs_a_data_dependent_model(tmp_path, capsys):
    from ember.cli import main
    onnx.save(_nonzero_model(), tmp_path / "nz.onnx")
    assert main(["run", str(tmp_path / "nz.onnx"), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "int64" in out and "latency" in out
    # compiling to an artifact needs static shapes: a typed error, no file written
    assert main(["compile", str(tmp_path / "nz.onnx"), "-o", str(tmp_path / "nz.ember")]) == 2
    assert not (tmp_path / "nz.ember").exists()
