"""Vectorized loops whose static extent leaves a remainder of at least half the lanes run it as
narrower vector steps (16 lanes: 8, then 4) before the scalar rest (``codegen/vector.py``):
channels-last max/average pooling and convolution epilogues (bias + ReLU + residual add) with
24, 28, 30 and 44 channels, and average pooling's closed-form divisor with channel tiles that
are no multiple of the lanes (``rules/pooling``), checked against onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.benchmark import outputs_agree
from ember.target import Target


def _model(c, pool, seed=0, **pool_attrs):
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((c, 5, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b")
    w2 = numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * 0.2).astype(np.float32),
                                 "w2")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node(pool, ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1], **pool_attrs),
             helper.make_node("Conv", ["p", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "p"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 5, 11, 13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [w, b, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("c", [24, 28, 30, 44])
@pytest.mark.parametrize("pool", ["MaxPool", "AveragePool"])
def test_pool_and_epilogue_tails_match_onnxruntime(c, pool):
    m = _model(c, pool)
    cm = ember.compile(m)
    if Target("llvm").vector_lanes == 16:
        assert "ember_f32x8u" in cm.source  # the 8-lane step is exercised
    x = np.random.default_rng(1).standard_normal((1, 5, 11, 13)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = cm.run({"x": x})[0]
    assert got.shape == want.shape
    assert outputs_agree(got, want)


@pytest.mark.parametrize("c", [136, 40])
@pytest.mark.parametrize("attrs", [{}, {"count_include_pad": 1}, {"ceil_mode": 1},
                                   {"ceil_mode": 1, "count_include_pad": 1}])
def test_average_pool_divisor_and_channel_tiles_match_onnxruntime(c, attrs):
    """The closed-form divisor (pads counted or not, ceil-mode overhang never) on channel
    counts no multiple of the lanes divides (136: tiles of 68 = 64 + 4)."""
    m = _model(c, "AveragePool", **attrs)
    cm = ember.compile(m)
    x = np.random.default_rng(2).standard_normal((1, 5, 11, 13)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert outputs_agree(cm.run({"x": x})[0], want)
