"""2-D ConvTranspose as one convolution over its stride phases (CanonicalizeOps,
``ember.graph.passes.conv_transpose_phases``), checked against the operator's float64 NumPy
reference (``nn.conv_transpose``'s scatter-add over kernel taps) and onnxruntime, on odd
shapes: strides 1..3 (and unequal), kernels that the stride does not divide, pads,
output_padding, output_shape, groups, channel counts off the vector width, no bias."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.ops import get_op

RNG = np.random.default_rng(7)


def _model(c, h, w, m, k, group=1, bias=True, **attrs):
    wt = RNG.standard_normal((c, m // group, *k)).astype(np.float32)
    inits = [numpy_helper.from_array(wt, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "b"))
        ins.append("b")
    node = helper.make_node("ConvTranspose", ins, ["y"], kernel_shape=list(k), group=group,
                            **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, c, h, w])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((1, c, h, w)).astype(np.float32)
    return model, x, [wt] + ([numpy_helper.to_array(inits[1])] if bias else [])


def _reference(x, params, c, k, group, attrs):
    s = attrs.get("strides", [1, 1])
    a = get_op("nn.conv_transpose").normalize_attrs({
        "strides": s, "pads": attrs.get("pads", [0, 0, 0, 0]),
        "dilations": attrs.get("dilations", [1, 1]), "group": group,
        "output_padding": attrs.get("output_padding", [0, 0]),
        "output_shape": attrs.get("output_shape")})
    return get_op("nn.conv_transpose").reference([x.astype(np.float64)] +
                                                 [p.astype(np.float64) for p in params], a)[0]


CASES = [  # (c, h, w, m, kernel, group, bias, attrs)
    (16, 9, 7, 8, (2, 2), 1, True, dict(strides=[2, 2])),  # UNet's up-sampling: a 1x1 GEMM
    (6, 5, 6, 5, (3, 3), 1, True, dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                       output_padding=[1, 1])),
    (3, 4, 5, 7, (4, 4), 1, False, dict(strides=[2, 2], pads=[1, 1, 1, 1])),  # DCGAN
    (5, 6, 6, 3, (3, 3), 1, True, dict(pads=[1, 0, 2, 1])),  # stride 1, asymmetric pads
    (9, 4, 5, 6, (5, 3), 3, True, dict(strides=[3, 2], pads=[2, 1, 1, 0],
                                       output_padding=[2, 1])),  # groups, unequal strides
    (4, 3, 3, 4, (3, 3), 2, False, dict(strides=[2, 2], output_shape=[8, 7])),
    (4, 3, 3, 4, (2, 2), 1, True, dict(strides=[2, 2], output_padding=[1, 1])),
]


@pytest.mark.parametrize("c, h, w, m, k, group, bias, attrs", CASES)
def test_phase_form_matches_reference_and_leaves_no_direct_loop_nest(c, h, w, m, k, group, bias,
                                                                     attrs):
    model, x, params = _model(c, h, w, m, k, group, bias, **attrs)
    cm = ember.compile(model, target="llvm -num-threads=1")
    (y,) = cm.run({"x": x})
    want = _reference(x, params, c, k, group, attrs)
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    assert not any("conv_transpose" in st["op"] for st in cm.plan["steps"])
    ort = pytest.importorskip("onnxruntime")
    (ref,) = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_dilated_and_weight_input_forms_keep_the_direct_loop_nest():
    model, x, params = _model(4, 5, 5, 3, (3, 3), 1, True, strides=[2, 2], dilations=[2, 2])
    cm = ember.compile(model, target="llvm -num-threads=1")
    want = _reference(x, params, 4, (3, 3), 1, {"strides": [2, 2], "dilations": [2, 2]})
    np.testing.assert_allclose(cm.run({"x": x})[0], want, rtol=1e-4, atol=1e-4)
    assert any("conv_transpose" in st["op"] for st in cm.plan["steps"])
    # the weight as a graph input (not a constant): no rewrite, still right
    g = model.graph
    winit = g.initializer[0]
    g2 = helper.make_graph(list(g.node), "g", list(g.input) + [helper.make_tensor_value_info(
        "w", TensorProto.FLOAT, list(winit.dims))], list(g.output),
        initializer=[i for i in g.initializer if i.name != "w"])
    m2 = helper.make_model(g2, opset_imports=[helper.make_opsetid("", 17)])
    cm2 = ember.compile(m2, target="llvm -num-threads=1")
    np.testing.assert_allclose(cm2.run({"x": x, "w": params[0]})[0], want, rtol=1e-4, atol=1e-4)
