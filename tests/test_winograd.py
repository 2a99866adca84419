"""Winograd convolution (ember.ops.winograd, the WinogradConv pass, the transform schedule rule
and expand_unrolled): the derived matrices, the transforms' NumPy references and the compiled
kernels against a direct NumPy convolution, and whole models against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.errors import ShapeMismatchError
from ember.graph.passes.winograd import choose_tile, padded_rows
from ember.ops import get_op
from ember.ops.winograd import weight_transform, winograd_matrices


def conv_nchw(x, w, b=None, pads=(0, 0, 0, 0)):
    """Direct 3x3 stride-1 cross-correlation in float64: x (N, C, H, W), w (M, C, 3, 3),
    pads (top, left, bottom, right)."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pt, pb), (pl, pr)])
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + oh, j:j + ow],
                           w[:, :, i, j].astype(np.float64))
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    return y


@pytest.mark.parametrize("m", [2, 4, 6])
def test_derived_matrices_compute_1d_correlation(m):
    at, g, bt = (np.array([[float(v) for v in r] for r in mat]) for mat in winograd_matrices(m))
    n = m + 2
    assert at.shape == (m, n) and g.shape == (n, 3) and bt.shape == (n, n)
    assert np.all(bt == np.round(bt))  # B^T scaled to integers
    rng = np.random.default_rng(m)
    d, w = rng.standard_normal(n), rng.standard_normal(3)
    want = np.array([d[i:i + 3] @ w for i in range(m)])
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


def test_f2_matrices_are_lavin_grays_up_to_row_signs():
    _, _, bt = winograd_matrices(2)
    lavin = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    for ours, theirs in zip(bt, lavin):
        assert [float(v) for v in ours] in ([float(v) for v in theirs],
                                            [-float(v) for v in theirs])


@pytest.mark.parametrize("m", [2, 4, 6])
@pytest.mark.parametrize("shape,pads", [((1, 7, 7, 5, 3), (1, 1, 1, 1)),
                                        ((2, 9, 6, 4, 6), (0, 0, 0, 0)),
                                        ((1, 8, 5, 3, 4), (1, 0, 2, 1))])
def test_transform_references_compose_to_the_convolution(m, shape, pads):
    n_, h, w_, c, k = shape
    rng = np.random.default_rng(sum(shape) + m)
    x = rng.standard_normal((n_, h, w_, c)).astype(np.float32)
    w = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    want = conv_nchw(x.transpose(0, 3, 1, 2), w, pads=pads).transpose(0, 2, 3, 1)
    v, = get_op("nn.winograd_input").reference([x], {"tile": m, "pads": pads})
    prod = np.matmul(v.astype(np.float64), weight_transform(w, m).astype(np.float64))
    y, = get_op("nn.winograd_output").reference([prod.astype(np.float32)],
                                                {"tile": m, "out_size": want.shape[1:3]})
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 if m < 6 else 1e-3)


def conv_model(n, c, h, w, k, pads, bias=True, relu=True, residual=False, seed=0):
    """ONNX Conv(3x3, stride 1) [+ residual Add] [+ Relu] and its weights."""
    rng = np.random.default_rng(seed)
    wt = (rng.standard_normal((k, c, 3, 3)) * 0.2).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    inits = [numpy_helper.from_array(wt, "w")] + ([numpy_helper.from_array(b, "b")] if bias
                                                   else [])
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y0"],
                              kernel_shape=[3, 3], pads=list(pads))]
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])]
    last = "y0"
    if residual:
        ins.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [n, k, oh, ow]))
        nodes.append(helper.make_node("Add", [last, "r"], ["y1"]))
        last = "y1"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["y"]))
        last = "y"
    g = helper.make_graph(nodes, "conv", ins,
                          [helper.make_tensor_value_info(last, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return model, wt, (b if bias else None)


CASES = [  # (N, C, H, W, M, pads, bias, relu, residual)
    (1, 16, 7, 7, 16, (1, 1, 1, 1), True, True, False),      # 7x7: partial tiles
    (1, 32, 9, 6, 24, (1, 0, 2, 1), True, True, True),       # odd, asymmetric pads, residual
    (2, 16, 8, 8, 32, (0, 0, 0, 0), False, False, False),    # no padding, batch 2, no epilogue
    (1, 20, 13, 11, 17, (1, 1, 1, 1), True, False, True),    # channels not a lane multiple
    (1, 32, 14, 14, 32, (1, 1, 1, 1), True, True, False),    # 49 tiles of 2: padded GEMM rows
]


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])))
def test_compiled_winograd_conv_matches_numpy(case, tile):
    n, c, h, w, k, pads, bias, relu, residual = case
    model, wt, b = conv_model(n, c, h, w, k, pads, bias, relu, residual, seed=tile)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    want = conv_nchw(x, wt, b, pads)
    feeds = {"x": x}
    if residual:
        feeds["r"] = rng.standard_normal(want.shape).astype(np.float32)
        want = want + feeds["r"]
    if relu:
        want = np.maximum(want, 0)
    with ember.PassContext(config={"winograd.tile": tile}):
        cm = ember.compile(model)
    ops = [s["op"] for s in cm.plan["steps"]]
    assert "nn.winograd_input" in ops and "nn.conv" not in ops
    assert any("winograd_output" in o for o in ops)
    got, = cm.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_winograd_can_be_turned_off():
    model, *_ = conv_model(1, 16, 16, 16, 16, (1, 1, 1, 1))
    for ctx in (ember.PassContext(config={"winograd.tile": -1}),
                ember.PassContext(disabled_pass=["WinogradConv"]),
                ember.PassContext(opt_level=1)):
        with ctx:
            cm = ember.compile(model)
        assert not any("winograd" in s["op"] for s in cm.plan["steps"])
    cm = ember.compile(model)  # default: on
    assert any(s["op"] == "nn.winograd_input" for s in cm.plan["steps"])


def test_strided_grouped_and_few_channel_convs_stay_direct():
    few, *_ = conv_model(1, 3, 16, 16, 8, (1, 1, 1, 1))
    cm = ember.compile(few)
    assert not any("winograd" in s["op"] for s in cm.plan["steps"])
    for attrs, wshape in (({"strides": [2, 2]}, (32, 32, 3, 3)), ({"group": 2}, (32, 16, 3, 3))):
        model, _, _ = conv_model(1, 32, 16, 16, 32, (1, 1, 1, 1), bias=False, relu=False)
        conv = model.graph.node[0]
        conv.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
        model.graph.initializer[0].CopyFrom(numpy_helper.from_array(
            np.random.default_rng(0).standard_normal(wshape).astype(np.float32), "w"))
        cm = ember.compile(model)
        assert not any("winograd" in s["op"] for s in cm.plan["steps"]), attrs
    assert choose_tile(3, 64, 56, 56) is None
    assert choose_tile(64, 64, 56, 56) == 4
    assert choose_tile(256, 256, 14, 14) == 2
    assert 49 < padded_rows(49, 256) <= 49 + 49 // 8   # 7x7 tiles: 7-row register blocks
    assert padded_rows(196, 64) == 196
    # AVX2: 12 accumulators of 8 lanes take 6-row blocks, so 49 tiles pad to 9 blocks of 6
    assert padded_rows(49, 256, 8, "avx2") == 54 and padded_rows(196, 64, 8, "avx2") % 6 == 0
    assert choose_tile(512, 512, 7, 7) is None      # 16 tiles: weight streaming dominates
    assert choose_tile(512, 512, 7, 7, batch=4) == 2


def test_typed_errors():
    with pytest.raises(ShapeMismatchError, match="F\\(3x3"):
        winograd_matrices(3)
    with pytest.raises(ShapeMismatchError, match="not \\(M, C, 3, 3\\)"):
        weight_transform(np.zeros((4, 4, 5, 5), np.float32), 2)
    from ember.graph.ir import TensorType
    with pytest.raises(ShapeMismatchError, match="nn.winograd_input"):
        get_op("nn.winograd_input").infer_type([TensorType((1, 8, 8, 4), "float32")],
                                               {"tile": 3, "pads": (1, 1, 1, 1)})
    with pytest.raises(ShapeMismatchError, match="nn.winograd_output"):
        get_op("nn.winograd_output").infer_type([TensorType((16, 5, 4), "float32")],
                                                {"tile": 2, "out_size": (8, 8)})


@pytest.mark.parametrize("tile", [2, 4])
def test_resnet18_with_winograd_matches_onnxruntime(tile):
    """Every 3x3 stride-1 convolution of a small ResNet-18 (64 px: 16x16 .. 2x2 images, so
    F(4x4) tiles are partial in the last stages) in Winograd form."""
    from test_models import assert_close, image, onnxruntime_run
    from ember.testing import models as M
    model = M.resnet18(seed=4, image_size=64)
    feeds = image(model)
    want = onnxruntime_run(model, feeds)
    with ember.PassContext(config={"winograd.tile": tile}):
        cm = ember.compile(model)
    assert sum(s["op"] == "nn.winograd_input" for s in cm.plan["steps"]) >= 10
    for g, w in zip(cm.run(feeds), want):
        assert_close(g, w, 1e-4, 1e-5, f"resnet18 with F({tile}x{tile}, 3x3)")


def test_flop_count_of_a_transform_counts_one_select_leaf():
    """count_flops (profiler GFLOP/s) counts the taken side of a select: F(2x2)'s B^T rows
    have two +-1 entries, so every V element is a sum of 4 terms (3 adds/subtracts)."""
    from ember.graph.ir import Binding, Call, TensorType, Var
    from ember.graph.lower import lower_binding
    from ember.tune.features import count_flops
    x = Var("x", TensorType((1, 6, 6, 8), "float32"))
    attrs = {"tile": 2, "pads": (1, 1, 1, 1), "num_tiles": None}
    (out_t,) = get_op("nn.winograd_input").infer_type([x.type], attrs)
    b = Binding((Var("v", out_t),), Call("nn.winograd_input", (x,), attrs))
    assert out_t.shape == (16, 9, 8)
    assert count_flops(lower_binding(b, "k")) == 16 * 9 * 8 * 3
