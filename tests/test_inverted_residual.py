"""The fused inverted-residual block (ember.ops.inverted_residual, the FuseInvertedResidual pass,
the kernel of rules/inverted_residual): one-block ONNX models compiled fused and unfused against
onnxruntime, the operator's NumPy reference against an independent float64 computation, the
pass's matching and gating, and MobileNetV2 with every block fused against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ember
from ember.errors import PassError, ShapeMismatchError
from ember.frontend.onnx import from_onnx
from ember.graph.passes.fuse_inverted_residual import MIN_FUSE_BYTES
from ember.graph.passes.pass_manager import PassContext
from ember.graph.passes.pipeline import optimize
from ember.ops import get_op
from ember.testing import models as M
from ember.testing.models import _conv_bn, _GraphBuilder

ort = pytest.importorskip("onnxruntime")


def block_model(cin=16, t=6, cout=24, h=20, w=20, stride=1, act="relu6", residual=None,
                batch=1, pads=1, seed=0) -> onnx.ModelProto:
    """One MobileNetV2 block in NCHW ONNX: [1x1 Conv+BN+act] -> 3x3 depthwise Conv+BN+act ->
    1x1 Conv+BN [+ Add input] (``t == 1``: no expand convolution)."""
    g = _GraphBuilder(seed)

    def a(y):
        if act == "relu6":
            return g.op("Clip", [y, g.init("lo", np.array(0.0, np.float32)),
                                 g.init("hi", np.array(6.0, np.float32))])
        return g.op("Relu", [y])
    y, hidden = "input", cin * t
    if t != 1:
        y = a(_conv_bn(g, y, cin, hidden, 1, pads=0))
    y = a(_conv_bn(g, y, hidden, hidden, 3, stride, group=hidden, pads=pads))
    y = _conv_bn(g, y, hidden, cout, 1, pads=0, gamma=(0.3, 0.6))
    if residual is None:
        residual = stride == 1 and cin == cout
    if residual:
        y = g.op("Add", ["input", y])
    g.nodes[-1].output[0] = "output"
    oh, ow = (h + 2 * pads - 3) // stride + 1, (w + 2 * pads - 3) // stride + 1
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, cin, h, w])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, cout, oh, ow])
    return g.model("block", [inp], [out], 13)


def ort_run(model, x):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so).run(None, {"input": x})[0]


def fused_ops(model, fuse):
    mod, params = from_onnx(model)
    with PassContext(opt_level=2, config={"inverted_residual.fuse": fuse}):
        mod, _ = optimize(mod, "llvm", params)
    return [b.call for b in mod.main.bindings if b.call.op == "nn.inverted_residual"] + [
        c for b in mod.main.bindings if b.call.is_function_call
        for c in (x.call for x in mod[b.call.callee].bindings)
        if c.op == "nn.inverted_residual"]


CASES = {
    "s1_residual_odd": dict(cin=16, t=6, cout=16, h=13, w=11, stride=1),
    "s2_odd": dict(cin=16, t=6, cout=24, h=13, w=11, stride=2),
    "no_expand_s1": dict(cin=32, t=1, cout=16, h=15, w=9, stride=1),
    "no_expand_s2_relu": dict(cin=8, t=1, cout=8, h=12, w=12, stride=2, act="relu"),
    "relu_batch2_residual": dict(cin=24, t=6, cout=24, h=14, w=14, stride=1, act="relu",
                                 batch=2),
    "s2_no_padding": dict(cin=16, t=4, cout=24, h=9, w=10, stride=2, pads=0),
    "s1_no_residual": dict(cin=16, t=6, cout=16, h=7, w=7, stride=1, residual=False),
    "s2_wide_masked_tails": dict(cin=24, t=6, cout=40, h=23, w=29, stride=2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_block_matches_onnxruntime_and_unfused(name):
    kw = CASES[name]
    model = block_model(**kw)
    x = np.random.default_rng(1).standard_normal(
        (kw.get("batch", 1), kw["cin"], kw["h"], kw["w"])).astype(np.float32)
    want = ort_run(model, x)
    (call,) = fused_ops(model, 1)
    residual = kw.get("residual")
    assert call.attrs["residual"] == (residual if residual is not None else
                                      kw["stride"] == 1 and kw["cin"] == kw["cout"])
    assert call.attrs["expand"] == (kw["t"] != 1)
    outs = {}
    for fuse in (1, -1):
        with PassContext(config={"inverted_residual.fuse": fuse}):
            outs[fuse] = ember.compile(model).run({"input": x})[0]
        np.testing.assert_allclose(outs[fuse], want, rtol=1e-4, atol=1e-5, err_msg=f"fuse={fuse}")
    np.testing.assert_allclose(outs[1], outs[-1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("band", [1, 2, 5])
def test_band_heights_and_scalar_micro_kernels(band):
    """Every band height (ragged last band included), schedule level 1 (the compute's
    portable scalar micro-kernels, no SIMD rule) and the AVX2 micro-kernels give the same
    answer."""
    model = block_model(cin=8, t=3, cout=8, h=11, w=6, stride=1)
    x = np.random.default_rng(2).standard_normal((1, 8, 11, 6)).astype(np.float32)
    want = ort_run(model, x)
    for level, target in ((1, "llvm"), (2, "llvm"), (2, "llvm -isa=avx2")):
        cfg = {"inverted_residual.fuse": 1, "inverted_residual.band": band,
               "schedule.level": level}
        with PassContext(config=cfg):
            got = ember.compile(model, target=target).run({"input": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"level {level}, {target}")


def test_heap_scratch_when_the_rows_are_too_large_for_the_stack(monkeypatch):
    import ember.tir.schedule.rules.inverted_residual as rule
    monkeypatch.setattr(rule, "STACK_BYTES", 1024)
    model = block_model(cin=8, t=3, cout=8, h=9, w=13, stride=2)
    x = np.random.default_rng(5).standard_normal((1, 8, 9, 13)).astype(np.float32)
    mod, params = from_onnx(model)
    with PassContext(config={"inverted_residual.fuse": 1}):
        compiled = ember.build(mod, "llvm", params)
    assert compiled.source.count("ember_alloc(") == 3  # the definition + E + D
    np.testing.assert_allclose(compiled.run({"input": x})[0], ort_run(model, x),
                               rtol=1e-4, atol=1e-5)


def _reference_f64(x, w1, b1, wd, bd, w2, b2, stride, act):
    """Independent float64 block: NHWC, w1 (Cin, Ce), wd (3, 3, Ce), w2 (Ce, Cout)."""
    e = np.clip(x @ w1 + b1, act[0], act[1])
    n, h, w, c = e.shape
    ep = np.zeros((n, h + 2, w + 2, c))
    ep[:, 1:-1, 1:-1] = e
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    d = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            win = ep[:, i * stride:i * stride + 3, j * stride:j * stride + 3]
            d[:, i, j] = np.einsum("nabc,abc->nc", win, wd)
    d = np.clip(d + bd, act[0], act[1])
    return d @ w2 + b2


@pytest.mark.parametrize("stride", [1, 2])
def test_reference_matches_direct_float64(stride):
    rng = np.random.default_rng(stride)
    x = rng.standard_normal((1, 7, 6, 4)).astype(np.float32)
    w1, b1 = rng.standard_normal((4, 12)).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    wd, bd = rng.standard_normal((3, 3, 12)).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    w2, b2 = rng.standard_normal((12, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    attrs = dict(get_op("nn.inverted_residual").attrs, stride=stride, pads=(1, 1, 1, 1))
    (got,) = get_op("nn.inverted_residual").reference(
        [x, w1, wd, w2, np.concatenate([b1, bd, b2])], attrs)
    want = _reference_f64(x.astype(np.float64), w1, b1, wd, bd, w2, b2, stride, (0.0, 6.0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_pass_gating_and_switches():
    small = block_model(cin=16, t=6, cout=16, h=8, w=8)       # 8x8x96 expanded: 24 KB
    big = block_model(cin=16, t=6, cout=24, h=56, w=56, stride=2)  # 56x56x96: 1.2 MB
    assert 4 * 8 * 8 * 96 < MIN_FUSE_BYTES <= 4 * 56 * 56 * 96
    assert fused_ops(small, 0) == [] and len(fused_ops(small, 1)) == 1
    assert len(fused_ops(big, 0)) == 1 and fused_ops(big, -1) == []
    mod, params = from_onnx(big)
    with PassContext(opt_level=2, disabled_pass=["FuseInvertedResidual"]):
        mod, _ = optimize(mod, "llvm", params)
    assert all(b.call.op != "nn.inverted_residual" for b in mod.main.bindings)


def test_pass_keeps_an_intermediate_that_is_read_twice():
    """The expand activation is also a model output: only depthwise -> project is fused, and
    both outputs stay right."""
    model = block_model(cin=8, t=2, cout=8, h=6, w=6, residual=False)
    clip_out = next(n for n in model.graph.node if n.op_type == "Clip").output[0]
    model.graph.output.append(helper.make_tensor_value_info(clip_out, TensorProto.FLOAT,
                                                            [1, 16, 6, 6]))
    (call,) = fused_ops(model, 1)
    assert call.attrs["expand"] is False
    x = np.random.default_rng(4).standard_normal((1, 8, 6, 6)).astype(np.float32)
    so = ort.SessionOptions()
    want = ort.InferenceSession(model.SerializeToString(), so).run(None, {"input": x})
    with PassContext(config={"inverted_residual.fuse": 1}):
        got = ember.compile(model).run({"input": x})
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-5)


def test_bad_shapes_raise_typed_errors():
    op = get_op("nn.inverted_residual")
    from ember.graph.ir import TensorType as T
    attrs = dict(op.attrs)
    good = [T((1, 8, 8, 4), "float32"), T((4, 12), "float32"), T((3, 3, 12), "float32"),
            T((12, 4), "float32"), T((28,), "float32")]
    assert op.infer_type(good, attrs)[0].shape == (1, 8, 8, 4)
    with pytest.raises(ShapeMismatchError, match="bias"):
        op.infer_type(good[:4] + [T((27,), "float32")], attrs)
    with pytest.raises(ShapeMismatchError, match="stride"):
        op.infer_type(good, dict(attrs, stride=3))
    with pytest.raises(ShapeMismatchError, match="residual"):
        op.infer_type(good[:3] + [T((12, 5), "float32"), T((29,), "float32")],
                      dict(attrs, residual=True))
    with pytest.raises(ShapeMismatchError, match="w_expand"):
        op.infer_type([good[0], T((5, 12), "float32")] + good[2:], attrs)
    with pytest.raises(ShapeMismatchError, match="band"):
        op.infer_type(good, dict(attrs, band=-3))


def test_negative_band_config_is_a_pass_error_not_a_wrong_answer():
    # a negative band made the kernel's band loop empty: the output was never written
    with PassContext(config={"inverted_residual.fuse": 1, "inverted_residual.band": -3}):
        with pytest.raises(PassError, match="inverted_residual.band"):
            ember.compile(block_model(cin=16, t=6, cout=16, h=9, w=9))


def test_mobilenet_v2_every_block_fused_matches_onnxruntime():
    model = M.mobilenet_v2(seed=3, image_size=64)
    x = np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), so).run(None, {"input": x})[0]
    assert len(fused_ops(model, 1)) == 17
    with PassContext(config={"inverted_residual.fuse": 1}):
        got = ember.compile(model).run({"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("expand", [True, False])
def test_one_channel_blocks_with_one_element_weights_match_onnxruntime(expand):
    # Cin = Ce = 1 (expand) or Ce = Cout = 1 (project): a one-element weight is an immediate
    # constant, not a kernel parameter, and the fused kernel's parameter list came out short
    rng = np.random.default_rng(11)

    def w(*s):
        return rng.standard_normal(s).astype(np.float32)
    inits = {"wd": w(1, 1, 3, 3), "wp": w(1, 1, 1, 1), "bp": w(1)}
    nodes = [helper.make_node("Conv", ["x", "wd"], ["d"], kernel_shape=[3, 3], group=1,
                              pads=[0, 0, 1, 0]),
             helper.make_node("Relu", ["d"], ["da"]),
             helper.make_node("Conv", ["da", "wp", "bp"], ["output"], kernel_shape=[1, 1])]
    if expand:
        inits.update(we=w(1, 1, 1, 1), be=w(1))
        nodes[0].input[0] = "ea"
        nodes[:0] = [helper.make_node("Conv", ["input", "we", "be"], ["e"], kernel_shape=[1, 1]),
                     helper.make_node("Relu", ["e"], ["ea"])]
    else:  # a 3x3 convolution first, so the depthwise input is channels-last
        inits.update(w0=w(1, 1, 3, 3))
        nodes[0].input[0] = "c0"
        nodes[:0] = [helper.make_node("Conv", ["input", "w0"], ["c0"], kernel_shape=[3, 3],
                                      pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "one_channel", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                             [1, 1, 7, 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, 6, 2])],
        [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.standard_normal((1, 1, 7, 4)).astype(np.float32)
    with PassContext(config={"inverted_residual.fuse": 1}):
        got = ember.compile(model).run({"input": x})[0]
    np.testing.assert_allclose(got, ort_run(model, x), rtol=1e-4, atol=1e-5)
