"""PadConvChannels: a classifier head's convolution padded to full-lane output channels, the
padding sliced off after the global pool; values checked against the NumPy references and, end
to end, against onnxruntime."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.graph import IRModule
from ember.graph.interpreter import run_reference
from ember.graph.passes import PadConvChannels
from ember.graph.passes.bind_params import bind_params

HEAD = """
def @main(%x: Tensor[(1, 5, 7, 24), float32], %w: Tensor[(500, 24, 1, 1), float32], %b: Tensor[(500,), float32]) {
  %0 = nn.conv(%x, %w, %b, strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=1, data_layout="NHWC", out_layout=null) : Tensor[(1, 5, 7, 500), float32]
  %1 = nn.relu(%0) : Tensor[(1, 5, 7, 500), float32]
  %2 = nn.global_avg_pool(%1, data_layout="NHWC") : Tensor[(1, 1, 1, 500), float32]
  %3 = POSTOP : Tensor[(1, 1, 1, 500), float32]
  return %3
}"""


def _head(post="sigmoid(%2)"):
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((500, 24, 1, 1)).astype(np.float32),
              "b": rng.standard_normal(500).astype(np.float32)}
    return bind_params(IRModule.from_text(HEAD.replace("POSTOP", post)), params)


def _ops(mod):
    return [(b.call.op, tuple(b.outputs[0].type.shape)) for b in mod.main.bindings]


def test_head_is_padded_to_512_and_sliced_after_the_pool():
    mod = _head()
    got = PadConvChannels()(mod)
    assert _ops(got) == [("nn.conv", (1, 5, 7, 512)), ("nn.relu", (1, 5, 7, 512)),
                         ("nn.global_avg_pool", (1, 1, 1, 512)),
                         ("strided_slice", (1, 1, 1, 500)), ("sigmoid", (1, 1, 1, 500))]
    conv = got.main.bindings[0].call
    assert not conv.args[1].data[500:].any() and not conv.args[2].data[500:].any()
    x = {"x": np.random.default_rng(1).standard_normal((1, 5, 7, 24)).astype(np.float32)}
    np.testing.assert_allclose(run_reference(got, x)[0], run_reference(mod, x)[0],
                               rtol=1e-5, atol=1e-6)


def test_no_pool_or_a_second_reader_is_not_padded():
    text = HEAD.replace("%2 = nn.global_avg_pool(%1, data_layout=\"NHWC\")",
                        "%2 = nn.relu(%1)").replace("(1, 1, 1, 500)", "(1, 5, 7, 500)")
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((500, 24, 1, 1)).astype(np.float32),
              "b": rng.standard_normal(500).astype(np.float32)}
    mod = bind_params(IRModule.from_text(text.replace("POSTOP", "sigmoid(%2)")), params)
    assert _ops(PadConvChannels()(mod)) == _ops(mod)
    # the activation is read by the pool and by the add
    mod2 = bind_params(IRModule.from_text(HEAD.replace("POSTOP", "add(%2, %1)").replace(
        "%3 = add(%2, %1) : Tensor[(1, 1, 1, 500)", "%3 = add(%2, %1) : Tensor[(1, 5, 7, 500)")),
        params)
    assert _ops(PadConvChannels()(mod2)) == _ops(mod2)


def test_squeezenet_style_head_matches_onnxruntime():
    """Conv 1x1 (24 -> 1000) + ReLU + GlobalAveragePool + Flatten on a 5x7 image."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((1000, 24, 1, 1)) * 0.2).astype(np.float32),
                                "w")
    b = numpy_helper.from_array(rng.standard_normal(1000).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    g = helper.make_graph(nodes, "head",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = ember.compile(m)
    assert "Tensor[(1, 5, 7, 1024), float32]" in cm.graph_text
    x = rng.standard_normal((1, 24, 5, 7)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = cm.run({"x": x})[0]
    assert got.shape == (1, 1000)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
