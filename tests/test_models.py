"""Whole models compiled to native code and checked against independent references:

- the nine light models of the onnx package against the outputs shipped beside them, fed the
  input onnx's backend runner uses, within the tolerances of its ``data.json`` files;
- ResNet-18, MobileNetV2 and BERT-style encoders (built with ``onnx.helper``, seeded random
  weights) against onnxruntime within rtol 1e-4, atol 1e-5;
- the graph IR text of every model: print -> parse -> structurally equal, and printed again the
  same text.
"""

import numpy as np
import onnx
import pytest

import ember
from ember.frontend import from_onnx
from ember.graph import IRModule, structural_equal
from ember.testing import assert_close
from ember.testing import models as M

ort = pytest.importorskip("onnxruntime")

SLOW_LIGHT = {"vgg19"}  # ~20 s of naive convolution


def light_params():
    return [pytest.param(n, marks=pytest.mark.slow(reason=f"a whole model: {n}"))
            if n in SLOW_LIGHT else n for n in M.LIGHT_MODELS]


@pytest.mark.parametrize("name", light_params())
def test_light_model_matches_shipped_output(name):
    model = M.light_model(name)
    feeds = M.light_model_inputs(model)
    expected = M.light_model_expected(name)
    rtol, atol = M.light_model_tolerance(name)
    compiled = ember.compile(model)
    got = compiled.run(feeds)
    assert compiled.output_names == [o.name for o in model.graph.output]
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert_close(g, e, rtol, atol, f"{name} output {k}")


def test_light_model_inputs_are_the_backend_runners():
    from onnx.backend.test.runner import Runner
    model = M.light_model("squeezenet")
    feeds = M.light_model_inputs(model)
    inits = {t.name for t in model.graph.initializer}
    vis = [vi for vi in model.graph.input if vi.name not in inits]
    assert list(feeds) == [vi.name for vi in vis]
    for vi in vis:
        want = Runner.generate_dummy_data(vi)
        np.testing.assert_array_equal(feeds[vi.name], want)
        assert feeds[vi.name].dtype == want.dtype == np.float32


def onnxruntime_run(model: onnx.ModelProto, feeds: dict) -> list:
    """onnxruntime's outputs with its graph rewrites off (each node evaluated as specified)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def image(model, seed=1):
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    return {vi.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


BUILT = {
    "resnet18": lambda: (M.resnet18(seed=0), None),
    "mobilenet_v2": lambda: (M.mobilenet_v2(seed=0), None),
    "bert4": lambda: (M.bert_encoder(num_layers=4, hidden=256, heads=4, seq=128, seed=0), 7),
    # the same family at other opsets / forms, smaller so they stay quick
    "bert_opset11": lambda: (M.bert_encoder(2, 64, 2, 32, seed=1, batch=2, opset=11), 3),
    "bert_opset17_layernorm_op": lambda: (M.bert_encoder(2, 64, 4, 24, seed=2, opset=17,
                                                         fused_layer_norm=True), 5),
    "bert_opset21": lambda: (M.bert_encoder(1, 96, 3, 16, seed=3, batch=3, opset=21), 0),
    "resnet18_opset15_64px": lambda: (M.resnet18(seed=4, batch=2, image_size=64, opset=15), None),
    "resnet18_opset7_32px": lambda: (M.resnet18(seed=7, image_size=32, num_classes=10, opset=7),
                                     None),
    "mobilenet_v2_opset21_96px": lambda: (M.mobilenet_v2(seed=5, image_size=96, opset=21), None),
}


def built_model_and_feeds(name):
    model, pad = BUILT[name]()
    feeds = image(model) if pad is None else M.bert_inputs(model, seed=0, pad=pad)
    return model, feeds


@pytest.mark.parametrize("name", sorted(BUILT))
def test_built_model_matches_onnxruntime(name):
    model, feeds = built_model_and_feeds(name)
    want = onnxruntime_run(model, feeds)
    compiled = ember.compile(model)
    got = compiled.run(feeds)
    assert compiled.output_names == [o.name for o in model.graph.output]
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, 1e-4, 1e-5, f"{name} output {k}")


@pytest.mark.slow(reason="a whole model: BERT-base")
def test_bert_base_matches_onnxruntime():
    """The benchmark model (12 layers, hidden 768) is correct too."""
    model = M.bert_base(seq=128)
    feeds = M.bert_inputs(model, seed=1, pad=16)
    want = onnxruntime_run(model, feeds)
    got = ember.compile(model).run(feeds)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, 1e-4, 1e-5, f"bert_base output {k}")


@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("name", ["bert_opset11", "mobilenet_v2_opset21_96px"])
def test_built_model_at_other_opt_levels(name, opt_level):
    model, feeds = built_model_and_feeds(name)
    want = onnxruntime_run(model, feeds)
    with ember.PassContext(opt_level=opt_level):
        got = ember.compile(model).run(feeds)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, 1e-4, 1e-5, f"{name} at opt_level {opt_level}, output {k}")


def test_bert_attention_mask_changes_the_output():
    """The mask path (Equal/Where/Cast/Unsqueeze) is live: padding changes attended tokens."""
    model = M.bert_encoder(1, 32, 2, 8, seed=6)
    m = ember.compile(model)
    a = M.bert_inputs(model, pad=0)
    b = M.bert_inputs(model, pad=3)
    ya, yb = m.run(a)[0], m.run(b)[0]
    assert not np.allclose(ya[0, :5], yb[0, :5])
    for k, (g, w) in enumerate(zip(m.run(b), onnxruntime_run(model, b))):
        assert_close(g, w, 1e-4, 1e-5, f"masked output {k}")


def test_builders_are_seeded_and_valid():
    a, b, c = M.resnet18(seed=3, image_size=32), M.resnet18(seed=3, image_size=32), \
        M.resnet18(seed=4, image_size=32)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()
    opsets = {m.opset_import[0].version for m in (a, M.mobilenet_v2(image_size=32),
                                                  M.bert_encoder(1, 32, 2, 8))}
    assert len(opsets) == 3  # the builders use different opsets by default
    ops = {n.op_type for n in M.bert_encoder(1, 32, 2, 8).graph.node}
    for op in ["MatMul", "Add", "Mul", "Div", "Softmax", "ReduceMean", "Sub", "Pow", "Sqrt", "Erf",
               "Tanh", "Reshape", "Transpose", "Gather", "Where", "Cast", "Shape", "Concat",
               "Unsqueeze", "Squeeze", "Slice", "Expand", "ConstantOfShape"]:
        assert op in ops, op
    with pytest.raises(ValueError):
        M.bert_encoder(opset=13, fused_layer_norm=True)


# graph text round trip ------------------------------------------------------------------------

ROUND_TRIP = {**{f"light_{n}": (lambda n=n: M.light_model(n)) for n in M.LIGHT_MODELS},
              "resnet18": lambda: M.resnet18(image_size=64),
              "mobilenet_v2": lambda: M.mobilenet_v2(image_size=64),
              "bert4": lambda: M.bert_encoder(),
              "bert_layernorm_op": lambda: M.bert_encoder(2, 64, 2, 16, opset=17,
                                                          fused_layer_norm=True)}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_graph_text_round_trip(name):
    mod, _ = from_onnx(ROUND_TRIP[name]())
    text = mod.text()
    back = IRModule.from_text(text)
    assert structural_equal(mod, back)
    assert back.text() == text


def test_symbolic_dims_compile_for_given_shapes():
    """A model exported with dynamic batch/sequence dims compiles for the shapes given."""
    model = M.bert_encoder(2, 64, 2, 16, seed=8)
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "batch", "sequence"
    for vi in model.graph.output:
        vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    compiled = ember.compile(model, shapes={"input_ids": (3, 10), "attention_mask": (3, 10)})
    feeds = {"input_ids": np.random.default_rng(0).integers(0, 1000, (3, 10)),
             "attention_mask": np.ones((3, 10), np.int64)}
    feeds["attention_mask"][1, 7:] = 0
    for k, (g, w) in enumerate(zip(compiled.run(feeds), onnxruntime_run(model, feeds))):
        assert_close(g, w, 1e-4, 1e-5, f"dynamic bert output {k}")
