"""ElementwiseThroughConcat: ``f(concatenate(xs)) => concatenate(f(x) for x in xs)``, checked as
IR text (with NumPy-reference values) and, on a ShuffleNet-style stride-2 unit, against
onnxruntime with the concatenation written in place."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.benchmark import outputs_agree
from ember.graph import IRModule, structural_equal
from ember.graph.passes import ElementwiseThroughConcat

from pass_helpers import check_pass_text, shuffle_unit_body

BEFORE = """
def @main(%x: Tensor[(1, 4, 5, 6), float32], %y: Tensor[(1, 4, 5, 3), float32]) {
  %0 = nn.relu(%x) : Tensor[(1, 4, 5, 6), float32]
  %1 = sigmoid(%y) : Tensor[(1, 4, 5, 3), float32]
  %2 = concatenate(%0, %1, axis=3) : Tensor[(1, 4, 5, 9), float32]
  %3 = clip(%2, min=0.25, max=0.75) : Tensor[(1, 4, 5, 9), float32]
  return %3
}"""

AFTER = """
def @main(%x: Tensor[(1, 4, 5, 6), float32], %y: Tensor[(1, 4, 5, 3), float32]) {
  %0 = nn.relu(%x) : Tensor[(1, 4, 5, 6), float32]
  %1 = sigmoid(%y) : Tensor[(1, 4, 5, 3), float32]
  %2 = clip(%0, min=0.25, max=0.75) : Tensor[(1, 4, 5, 6), float32]
  %3 = clip(%1, min=0.25, max=0.75) : Tensor[(1, 4, 5, 3), float32]
  %4 = concatenate(%2, %3, axis=3) : Tensor[(1, 4, 5, 9), float32]
  return %4
}"""


def test_clip_moves_onto_each_input():
    check_pass_text(ElementwiseThroughConcat(), BEFORE, AFTER)


def test_declines_a_second_reader_a_parameter_input_or_a_binary_op():
    # the concatenation is also an output: f would have to be computed twice
    two = BEFORE.replace("return %3", "return %3, %2")
    for text in (two,
                 BEFORE.replace("concatenate(%0, %1", "concatenate(%x, %1").replace(
                     "%0 = nn.relu(%x) : Tensor[(1, 4, 5, 6), float32]\n", ""),
                 BEFORE.replace("clip(%2, min=0.25, max=0.75)", "add(%2, %2)")):
        mod = IRModule.from_text(text)
        assert structural_equal(ElementwiseThroughConcat()(mod), mod)


def _shuffle_unit(c_in=20, c_mid=12, groups=4, hw=9, seed=0):
    """A ShuffleNet stride-2 unit on an odd image: grouped 1x1 conv + BN + ReLU, channel
    shuffle, depthwise 3x3 stride 2 + BN, grouped 1x1 conv + BN, beside a 3x3 stride-2 average
    pool of the input; concatenation + ReLU, read by a 1x1 convolution."""
    nodes, inits, w = shuffle_unit_body(c_in, c_mid, c_mid, groups, groups, groups, hw, 2,
                                        seed)
    nodes.append(helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Concat", ["b2", "p"], ["cat"], axis=1))
    nodes.append(helper.make_node("Relu", ["cat"], ["r"]))
    # the next unit's first convolution reads the concatenation (channels last)
    nodes.append(helper.make_node("Conv", ["r", w("w3", (c_mid, c_mid + c_in, 1, 1))], ["y"]))
    g = helper.make_graph(nodes, "unit",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, c_in, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_shufflenet_stride2_unit_matches_onnxruntime_with_the_concat_in_place():
    m = _shuffle_unit()
    cm = ember.compile(m)
    assert "concatenate" not in " ".join(s["op"] for s in cm.plan["steps"])
    x = np.random.default_rng(3).standard_normal((1, 20, 9, 9)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = cm.run({"x": x})[0]
    assert got.shape == want.shape == (1, 12, 5, 5)
    assert outputs_agree(got, want)


def test_declines_a_random_op():
    # a random op draws element i of its tensor from counter i (ember.ops.random): moved onto
    # each input, every part would restart at counter 0 and repeat the first part's draws
    text = BEFORE.replace("clip(%2, min=0.25, max=0.75)", "random.bernoulli(%2, key=7)")
    mod = IRModule.from_text(text)
    assert structural_equal(ElementwiseThroughConcat()(mod), mod)


def test_bernoulli_of_a_concat_draws_each_element_once():
    # Bernoulli(concat(p, p)) of two equal halves: the halves are independent draws (the
    # generator's counters run over the whole tensor), so they are not the same
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])
    nodes = [helper.make_node("Mul", ["x", "zero"], ["z"]),
             helper.make_node("Sigmoid", ["z"], ["p1"]), helper.make_node("Sigmoid", ["z"], ["p2"]),
             helper.make_node("Concat", ["p1", "p2"], ["cat"], axis=1),
             helper.make_node("Bernoulli", ["cat"], ["y"], seed=3.0)]
    g = helper.make_graph(nodes, "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.zeros(1, np.float32), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    y = ember.compile(m).run({"x": np.ones((1, 8, 8, 8), np.float32)})[0]
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert not np.array_equal(y[:, :8], y[:, 8:])
