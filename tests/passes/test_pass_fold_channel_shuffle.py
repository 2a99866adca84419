"""FoldChannelShuffle and ``nn.shuffled_group_conv``: the operator's reference against an
independent NumPy formulation (ONNX's NCHW reshape -> transpose -> reshape, then per-group
matrix products), and ShuffleNet-style units on odd shapes (channel counts that are not
multiples of the vector width, groups of 2-4, strides 1 and 2) compiled end to end against
onnxruntime, with the shuffle gone from the compiled plan where the pass applies."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ember
from ember.benchmark import outputs_agree
from ember.ops import get_op
from pass_helpers import shuffle_unit_body


def _onnx_shuffle_nchw(x, g):
    n, c, h, w = x.shape
    return x.reshape(n, g, c // g, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)


@pytest.mark.parametrize("C,M,gc,gs", [(24, 10, 2, 3), (16, 12, 4, 2), (36, 9, 3, 4)])
def test_reference_is_shuffle_then_grouped_conv(C, M, gc, gs):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, C)).astype(np.float32)
    Cg = C // gc
    w4 = rng.standard_normal((M, Cg, 1, 1)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    want = np.zeros((2, 3, 5, M))
    xs = _onnx_shuffle_nchw(x.transpose(0, 3, 1, 2), gs).transpose(0, 2, 3, 1)
    for m in range(M):
        G = m // (M // gc)
        want[..., m] = xs[..., G * Cg:(G + 1) * Cg].astype(np.float64) @ w4[m, :, 0, 0] + b[m]
    got = get_op("nn.shuffled_group_conv").reference(
        [x, w4.reshape(M, Cg // gs, gs), b], {"group": gc, "shuffle": gs})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _unit(c_in, c_mid, c_out, g1, gs, g2, hw, stride, seed=0):
    """gconv(g1) + BN + ReLU -> channel shuffle (gs) -> depthwise 3x3 (stride) + BN ->
    gconv(g2) + BN, plus ReLU (the stride-1 units' residual add when the shapes allow)."""
    nodes, inits, _ = shuffle_unit_body(c_in, c_mid, c_out, g1, gs, g2, hw, stride, seed)
    last = "b2"
    if stride == 1 and c_out == c_in:
        nodes.append(helper.make_node("Add", ["b2", "x"], ["sum"]))
        last = "sum"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    g = helper.make_graph(nodes, "unit",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, c_in, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("c_in,c_mid,c_out,g1,gs,g2,hw,stride,folds", [
    (20, 24, 20, 4, 3, 2, 9, 1, True),     # Cg = 12, shuffle 3: folded; residual add
    (12, 24, 18, 3, 3, 2, 7, 2, True),     # stride-2 depthwise, 9 outputs per group
    (40, 80, 40, 4, 4, 4, 6, 1, True),     # 20 channels per group of the shuffle
    (34, 68, 34, 2, 4, 17, 6, 1, True),    # 17 per shuffle group, 2 outputs per conv group
    (136, 136, 136, 4, 4, 4, 6, 1, True),  # Cg = 34: blocks of 9 x 4 (2 zero products)
    (24, 24, 24, 4, 4, 4, 5, 1, False),    # Cg = 6: blocks of 2 x 4, too many zeros: a copy
])
def test_unit_matches_onnxruntime(c_in, c_mid, c_out, g1, gs, g2, hw, stride, folds):
    m = _unit(c_in, c_mid, c_out, g1, gs, g2, hw, stride)
    cm = ember.compile(m)
    ops = " ".join(s["op"] for s in cm.plan["steps"])
    assert ("shuffled_group_conv" in ops) == folds
    assert any("reshape_transpose" in s["op"] for s in cm.plan["steps"]) != folds
    x = np.random.default_rng(5).standard_normal((1, c_in, hw, hw)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = cm.run({"x": x})[0]
    assert got.shape == want.shape
    assert outputs_agree(got, want)


@pytest.mark.parametrize("C,M,gc,gs", [(136, 136, 4, 4), (24, 10, 2, 3), (30, 15, 3, 5),
                                       (136, 34, 2, 4)])
def test_shuffled_weight_equals_the_shuffled_grouped_conv(C, M, gc, gs):
    """``shuffled_weight`` (zero-padded blocks where gs does not divide Cg) against the
    shuffle + grouped convolution in NumPy."""
    from ember.ops.channel_shuffle import shuffled_weight
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 3, C))
    W = rng.standard_normal((M, C // gc, 1, 1))
    xs = _onnx_shuffle_nchw(x.transpose(0, 3, 1, 2), gs).transpose(0, 2, 3, 1)
    Cg, Mg = C // gc, M // gc
    want = np.concatenate([xs[..., G * Cg:(G + 1) * Cg] @ W[G * Mg:(G + 1) * Mg, :, 0, 0].T
                           for G in range(gc)], -1)
    got = get_op("nn.shuffled_group_conv").reference(
        [x, shuffled_weight(W, C, gc, gs)], {"group": gc, "shuffle": gs})[0]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_shuffled_group_conv_kernel_is_a_gemm():
    """The folded convolution runs on the GEMM micro-kernel (a two-level reduction), not a
    scalar loop nest."""
    cm = ember.compile(_unit(68, 272, 68, 4, 4, 4, 14, 1))
    src = cm.source
    k = src.index("/* @fused_nn_shuffled_group_conv")
    assert "ember_ukr_gemm" in src[k:k + 4000]
