"""One ``ember.compile(model, dynamic=...)``, many input sizes (issue 18): a transformer-shaped
ONNX model with symbolic batch and sequence axes runs at five shapes against onnxruntime
without compiling again; inputs that contradict a symbol or its bounds are refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.errors import InputError, ShapeMismatchError

from test_dynamic_shapes import _attention_like_model

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")


def _two_input_model():
    """``softmax((a + b) @ W)`` with ``a``, ``b`` both ``(batch, seq, 8)``."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "w")
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("MatMul", ["s", "w"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"], axis=-1)]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", 8])
           for n in ("a", "b")]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 6])
    return helper.make_model(helper.make_graph(nodes, "two", ins, [out], [w]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_one_compile_runs_five_shapes_like_onnxruntime():
    m = _attention_like_model()
    model = ember.compile(m, dynamic={"seq": (1, 32)})
    assert model.info["compile_count"] == 1
    assert model.info["symbols"] == {"batch": [0, None], "seq": [1, 32]}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for b, s in [(1, 1), (2, 5), (3, 16), (1, 32), (4, 9)]:
        x = rng.standard_normal((b, s, 16)).astype(np.float32)
        got = model.run({"x": x})[0]
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    # a repeated shape reuses its memory layout; nothing was compiled after the first
    model.run({"x": rng.standard_normal((2, 5, 16)).astype(np.float32)})
    assert model.info["compile_count"] == 1
    assert model._executor.symbolic.layouts_planned == 5


def test_symbol_contradictions_and_bounds_are_shape_mismatch_errors():
    m = _two_input_model()
    model = ember.compile(m, dynamic={"seq": (1, 16)})
    a = np.ones((2, 5, 8), np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(model.run({"a": a, "b": 2 * a})[0],
                               sess.run(None, {"a": a, "b": 2 * a})[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeMismatchError, match=r"symbol 'seq': input 'a' axis 1 gives 5 but "
                                                 r"input 'b' axis 1 gives 6"):
        model.run({"a": a, "b": np.ones((2, 6, 8), np.float32)})
    with pytest.raises(ShapeMismatchError, match=r"'seq' = 17.*bounds \[1, 16\]"):
        big = np.ones((1, 17, 8), np.float32)
        model.run({"a": big, "b": big})
    with pytest.raises(ShapeMismatchError, match="axis 2 must be 8"):
        bad = np.ones((1, 4, 7), np.float32)
        model.run({"a": bad, "b": bad})
    with pytest.raises(InputError, match="dtype"):
        model.run({"a": a.astype(np.float64), "b": a})


def test_shapes_naming_symbols_compile_dynamically():
    model = ember.compile(_two_input_model(), shapes={"a": ("n", 3, 8), "b": ("n", 3, 8)})
    assert model.info["compile_count"] == 1 and set(model.info["symbols"]) == {"n"}
    for n in (1, 4):
        a = np.full((n, 3, 8), 0.5, np.float32)
        assert model.run({"a": a, "b": a})[0].shape == (n, 3, 6)


def test_symbolic_model_saves_and_loads(tmp_path):
    m = _two_input_model()
    model = ember.compile(m, dynamic={"seq": (1, 16)})
    path = tmp_path / "dyn.ember"
    model.save(path)
    back = ember.load(path)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    for s in (3, 9):
        a = rng.standard_normal((2, s, 8)).astype(np.float32)
        np.testing.assert_allclose(back.run({"a": a, "b": a})[0],
                                   sess.run(None, {"a": a, "b": a})[0], rtol=1e-4, atol=1e-5)
    big = np.ones((1, 20, 8), np.float32)
    with pytest.raises(ShapeMismatchError, match=r"'seq' = 20.*\[1, 16\]"):
        back.run({"a": big, "b": big})
