"""Symbolic dimensions (issue 18, first slice): the graph IR's symbolic dims, their text form,
shape functions checked against NumPy at several sizes, ShapeFunctionMissingError, the ONNX
frontend's symbolic import and shape folding (checked against onnxruntime at several shapes
from one import, through the NumPy reference interpreter), and symbol binding errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.errors import (IRParseError, ShapeFunctionMissingError, ShapeMismatchError,
                          SymbolicShapeError)
from ember.frontend import from_onnx
from ember.tir import symbolic as sym
from ember.graph.builder import infer_call
from ember.graph.interpreter import run_reference
from ember.graph.ir import (Binding, Call, Constant, Function, IRModule, TensorType, Var,
                            structural_equal)
from ember.ops import get_op

B, S = sym.Symbol("batch"), sym.Symbol("seq")


# --- symbolic dims in the IR -------------------------------------------------------------------

def test_symbols_are_interned_and_compare_by_name():
    assert sym.Symbol("seq") is S
    assert S == "seq" and S != "batch"
    assert TensorType(("batch", "seq", 256), "float32").shape == (B, S, 256)


def test_normal_form_makes_equal_dims_equal():
    assert sym.dims_equal(S * B, B * S)
    assert sym.as_dim((B * S * 768) // (B * S * 12)) == 64
    assert sym.as_dim(S + 1 - 1) is S
    assert sym.as_dim((S * 8) % 4) == 0
    assert TensorType((S * B, 3), "float32") == TensorType((B * S, 3), "float32")
    assert hash(TensorType((S * B,), "int8")) == hash(TensorType((B * S,), "int8"))
    assert TensorType((S + 1,), "float32") != TensorType((S,), "float32")


def test_static_types_stay_ints():
    t = TensorType((1, np.int64(3), 224), "float32")
    assert t.shape == (1, 3, 224) and all(type(d) is int for d in t.shape)
    assert t.is_static and t.symbols == [] and t.size == 672
    assert str(t) == "Tensor[(1, 3, 224), float32]"


def test_dim_text_and_parse():
    assert str(TensorType(("batch", "seq", 256), "float32")) == "Tensor[(batch, seq, 256), float32]"
    assert sym.dim_str(B * S) == "(batch * seq)"
    for text in ["(batch * seq)", "(seq + 1)", "(seq - 3)", "(seq // 2)", "(seq % 8)",
                 "min(512, seq)", "max(batch, seq)", "((batch * seq) // 4)"]:
        d = sym.parse_dim(text)
        assert sym.dim_str(d) == text
        assert sym.dims_equal(sym.parse_dim(sym.dim_str(d)), d)
    for bad in ["seq / 2", "seq ** 2", "2.5", "f(seq)", "seq +"]:
        with pytest.raises(ShapeMismatchError):
            sym.parse_dim(bad)


def test_evaluate_matches_python_arithmetic():
    rng = np.random.default_rng(0)
    d = sym.parse_dim("min((batch * seq) // 3 + seq % 5, 40) - 1")
    for _ in range(20):
        b, s = (int(v) for v in rng.integers(1, 50, 2))
        assert sym.evaluate(d, {"batch": b, "seq": s}) == min((b * s) // 3 + s % 5, 40) - 1


def _module_with_symbols():
    x = Var("x", TensorType(("batch", "seq", 32), "float32"))
    y = Var("y", TensorType((B * S, 32), "float32"))
    z = Var("z", TensorType((sym.as_dim(S + 1), 16), "float32"))
    f = Function([x], [
        Binding((y,), Call("reshape", (x,), {"newshape": (B * S, 32)})),
        Binding((z,), Call("strided_slice", (y,), {"begin": (0, 0), "end": (S + 1, 16),
                                                     "strides": (1, 1)})),
    ], [z], attrs={"symbol_bounds": {"batch": [1, 8], "seq": [1, None]}})
    return IRModule.from_function(f)


def test_ir_text_round_trip_with_symbols():
    mod = _module_with_symbols()
    text = mod.text()
    assert "Tensor[(batch, seq, 32), float32]" in text
    assert "Tensor[((batch * seq), 32), float32]" in text
    assert 'newshape=[{"dim": "(batch * seq)"}, 32]' in text
    back = IRModule.from_text(text)
    assert structural_equal(back, mod)
    assert back.text() == text
    assert back.main.bindings[0].call.attrs["newshape"][0] is not None
    assert sym.dims_equal(back.main.bindings[0].call.attrs["newshape"][0], B * S)


def test_ir_parse_rejects_bad_dims():
    with pytest.raises(IRParseError, match="bad dimension"):
        IRModule.from_text("def @main(%x: Tensor[(seq / 2, 3), float32]) {\n  return %x\n}")


# --- shape functions vs NumPy ------------------------------------------------------------------

def _concrete(t: TensorType, env) -> tuple:
    return tuple(sym.evaluate(d, env) for d in t.shape)


def _random(shape, dtype):
    rng = np.random.default_rng(1)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("int"):
        return rng.integers(0, 5, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


SF_CASES = [
    ("add", [("batch", 1, 1, "seq"), ("batch", 4, "seq", "seq")], ["float32"] * 2, {}),
    ("multiply", [("seq", 32), (32,)], ["float32"] * 2, {}),
    ("matmul", [("batch", "seq", 32), (32, 96)], ["float32"] * 2, {}),
    ("matmul", [("batch", 4, "seq", 8), ("batch", 4, 8, "seq")], ["float32"] * 2, {}),
    ("nn.gemm", [("seq", 16), (8, 16), (8,)], ["float32"] * 3, {"trans_b": 1}),
    ("transpose", [("batch", "seq", 4, 8)], ["float32"], {"perm": [0, 2, 1, 3]}),
    ("nn.softmax", [("batch", 4, "seq", "seq")], ["float32"], {"axis": -1}),
    ("nn.layer_norm", [("batch", "seq", 32), (32,), (32,)], ["float32"] * 3, {"axis": -1}),
    ("mean", [("batch", "seq", 32)], ["float32"], {"axes": [-1], "keepdims": 1}),
    ("sum", [("batch", "seq", 32)], ["float32"], {"axes": [1], "keepdims": 0}),
    ("take", [(50, 32), ("batch", "seq")], ["float32", "int64"], {"axis": 0}),
    ("where", [("seq", "seq"), ("batch", 1, "seq", "seq"), ()], ["bool", "float32", "float32"],
     {}),
    ("cast", [("batch", "seq")], ["int64"], {"dtype": "float32"}),
    ("erf", [("batch", "seq", 8)], ["float32"], {}),
    ("nn.gelu", [("batch", "seq", 8)], ["float32"], {}),
    ("concatenate", [("batch", "seq", 8), ("batch", 1, 8)], ["float32"] * 2, {"axis": 1}),
    ("broadcast_to", [("seq", 1)], ["float32"], {"shape": [B, S, 4]}),
    ("reshape", [("batch", "seq", 32)], ["float32"], {"newshape": [B, S, 4, 8]}),
    ("reshape", [("batch", "seq", 4, 8)], ["float32"], {"newshape": [B * S, 32]}),
    ("strided_slice", [(64, 32)], ["float32"], {"begin": [0, 0], "end": [S, 32],
                                                "strides": [1, 1]}),
    ("strided_slice", [("batch", "seq", 8)], ["float32"],
     {"begin": [0, 1, 0], "end": [B, S, 8], "strides": [1, 2, 1]}),
    ("nn.attention", [("batch", 4, "seq", 8), ("batch", 2, "seq", 8), ("batch", 2, "seq", 8)],
     ["float32"] * 3, {"causal": 1}),
]


@pytest.mark.parametrize("op,shapes,dtypes,attrs", SF_CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(SF_CASES)])
def test_shape_function_matches_numpy_reference(op, shapes, dtypes, attrs):
    """The symbolic output type, evaluated at several sizes, is the shape NumPy's reference
    produces on arrays of those sizes."""
    types = [TensorType(s, d) for s, d in zip(shapes, dtypes)]
    args = [Var(f"a{k}", t) for k, t in enumerate(types)]
    attrs_n, (out,) = infer_call(op, args, attrs)
    assert out.symbols, f"{op}: expected a symbolic output, got {out}"
    for b, s in [(1, 1), (2, 7), (3, 16), (1, 33)]:
        env = {"batch": b, "seq": s}
        arrays = [_random(_concrete(t, env), t.dtype) for t in types]
        ref = get_op(op).reference(arrays, sym.substitute_attrs(attrs_n, env))[0]
        assert _concrete(out, env) == np.shape(ref), (op, env)
        assert out.dtype == str(np.asarray(ref).dtype)


def test_shape_function_errors_are_typed():
    x = Var("x", TensorType(("batch", "seq", 32), "float32"))
    with pytest.raises(ShapeMismatchError, match="cannot prove"):
        infer_call("reshape", [x], {"newshape": [B, S, 31]})
    y = Var("y", TensorType(("batch", 31), "float32"))
    with pytest.raises(ShapeMismatchError, match="inner dims"):
        infer_call("matmul", [x, y], {})
    z = Var("z", TensorType(("batch", "seq"), "float32"))
    w = Var("w", TensorType(("batch", "other"), "float32"))
    with pytest.raises(ShapeMismatchError, match="broadcast"):
        infer_call("add", [z, w], {})


def test_missing_shape_function_then_register_shape_func():
    name = "test_dyn.double_last"
    ember.register_op(name, type_rel=lambda ts, a: TensorType(ts[0].shape[:-1] +
                                                              (ts[0].shape[-1] * 2,), ts[0].dtype),
                      reference=lambda xs, a: np.concatenate([xs[0], xs[0]], -1), num_inputs=(1, 1))
    try:
        x = Var("x", TensorType(("batch", 3), "float32"))
        with pytest.raises(ShapeFunctionMissingError, match=name) as ei:
            infer_call(name, [x], {})
        assert "register_shape_func" in str(ei.value) and name in ei.value.ops
        # static inputs never need one
        assert infer_call(name, [Var("s", TensorType((2, 3), "float32"))], {})[1][0].shape == (2, 6)
        ember.register_shape_func(name, lambda ts, a: TensorType(
            ts[0].shape[:-1] + (sym.as_dim(ts[0].shape[-1] * 2),), ts[0].dtype))
        assert infer_call(name, [x], {})[1][0] == TensorType(("batch", 6), "float32")
    finally:
        ember.ops.unregister_op(name)


def _conv_pool_model():
    """Symbolic batch through Conv and MaxPool (no shape functions yet) then Relu."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv0"),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], name="pool0"),
             helper.make_node("Conv", ["p", "w2"], ["c2"], name="conv1"),
             helper.make_node("Relu", ["c2"], ["y"], name="relu0")]
    w2 = numpy_helper.from_array(np.ones((2, 4, 1, 1), np.float32), "w2")
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w, w2]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_shape_function_missing_error_lists_every_operator():
    with pytest.raises(ShapeFunctionMissingError) as ei:
        from_onnx(_conv_pool_model(), dynamic=True)
    e = ei.value
    assert list(e.ops) == ["nn.conv", "nn.max_pool"]
    assert len(e.ops["nn.conv"]) == 2  # both convolutions are named
    msg = str(e)
    assert "conv0" in msg and "conv1" in msg and "pool0" in msg
    assert "ember.register_shape_func('nn.conv'" in msg
    # the same model with the symbol fixed imports statically as before
    mod, _ = from_onnx(_conv_pool_model(), shapes={"x": (2, 3, 8, 8)})
    assert mod.main.outputs[0].type.shape == (2, 2, 5, 5)  # 8 - 3 + 1 = 6, pool 2x2 stride 1: 5


# --- the ONNX frontend -------------------------------------------------------------------------

def _attention_like_model():
    """A transformer-shaped model with the exporters' shape chains: Shape -> Gather ->
    Unsqueeze -> Concat -> Reshape (heads split and merged), Slice of a position table to
    ``seq``, a Where(Equal(shape, -1)) Expand, Softmax, LayerNormalization and Erf-GELU."""
    d, h = 16, 2
    rng = np.random.default_rng(0)
    w = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3,  # noqa
                                           f"w{len(inits)}")
    inits = []

    def init(*s):
        t = w(*s)
        inits.append(t)
        return t.name

    def c(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
        return name
    wq, wk, pos, g, bta = init(d, d), init(d, d), init(32, d), init(d), init(d)
    c("i0", 0), c("i1", 1), c("ax0", [0]), c("heads", [h]), c("hd", [d // h]), c("m1", [-1])
    c("starts", [0]), c("mone", [-1])
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["shp", "i1"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["su"]),
        helper.make_node("Slice", [pos, "starts", "su", "ax0"], ["pe"]),
        helper.make_node("Add", ["x", "pe"], ["x1"]),
        helper.make_node("LayerNormalization", ["x1", g, bta], ["ln"], axis=-1),
        helper.make_node("MatMul", ["ln", wq], ["q"]),
        helper.make_node("MatMul", ["ln", wk], ["k"]),
        helper.make_node("Concat", ["bu", "su", "heads", "hd"], ["split_shape"], axis=0),
        helper.make_node("Reshape", ["q", "split_shape"], ["q4"]),
        helper.make_node("Reshape", ["k", "split_shape"], ["k4"]),
        helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["sc"]),
        helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
        helper.make_node("Transpose", ["qt"], ["vt"], perm=[0, 1, 2, 3]),
        helper.make_node("MatMul", ["p", "vt"], ["o4"]),
        helper.make_node("Transpose", ["o4"], ["o3"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["bu", "su", "m1"], ["merge_shape"], axis=0),
        helper.make_node("Reshape", ["o3", "merge_shape"], ["o"]),
        helper.make_node("Mul", ["o", "o"], ["o2"]),
        helper.make_node("Erf", ["o2"], ["e"]),
        # Expand to the input's shape through the exporters' Where(Equal(shape, -1), 1, shape)
        helper.make_node("Equal", ["shp", "mone"], ["eq"]),
        helper.make_node("Where", ["eq", "i1", "shp"], ["eshape"]),
        helper.make_node("Expand", [g, "eshape"], ["gb"]),
        helper.make_node("Add", ["e", "gb"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])
    m = helper.make_model(helper.make_graph(nodes, "attn", [x], [y], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def test_symbolic_import_matches_onnxruntime_at_several_shapes():
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
    m = _attention_like_model()
    mod, params = from_onnx(m, dynamic={"seq": (1, 32)})
    main = mod.main
    assert main.params[0].type.shape == (B, S, 16)
    assert main.outputs[0].type.shape == (B, S, 16)
    assert main.attrs["symbol_bounds"] == {"batch": [0, None], "seq": [1, 32]}
    reshapes = [b.call.attrs["newshape"] for b in main.bindings if b.call.op == "reshape"]
    assert [sym.dim_str(d) for d in reshapes[0]] == ["batch", "seq", "2", "8"]
    assert [sym.dim_str(d) for d in reshapes[-1]] == ["batch", "seq", "16"]
    assert structural_equal(IRModule.from_text(mod.text()), mod)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for b, s in [(1, 1), (2, 5), (3, 16), (1, 32), (4, 9)]:
        x = rng.standard_normal((b, s, 16)).astype(np.float32)
        got = run_reference(mod, {"x": x}, params)[0]
        want = sess.run(None, {"x": x})[0]
        assert got.shape == (b, s, 16)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_default_import_still_needs_shapes():
    m = _attention_like_model()
    with pytest.raises(SymbolicShapeError, match="dynamic="):
        from_onnx(m)
    mod, _ = from_onnx(m, shapes={"x": (2, 5, 16)})
    assert mod.main.outputs[0].type.shape == (2, 5, 16)
    assert "symbol_bounds" not in mod.main.attrs
    # shapes= naming symbols makes just those dims symbolic
    mod, _ = from_onnx(m, shapes={"x": ("n", 5, 16)})
    assert mod.main.outputs[0].type.shape == ("n", 5, 16)


def test_dynamic_argument_is_checked():
    m = _attention_like_model()
    with pytest.raises(ShapeMismatchError, match="not symbols of the model"):
        from_onnx(m, dynamic={"tokens": (1, 8)})
    with pytest.raises(ShapeMismatchError, match="0 <= lo <= hi"):
        from_onnx(m, dynamic={"seq": (8, 1)})
    with pytest.raises(ShapeMismatchError, match="mapping"):
        from_onnx(m, dynamic=["seq"])


# --- binding symbols at run time ---------------------------------------------------------------

def test_bind_shapes_errors_name_inputs_and_symbol():
    params = [("ids", (B, S)), ("mask", (B, S)), ("past", (B, sym.as_dim(S - 1), 8))]
    env = sym.bind_shapes(params, {"ids": (2, 7), "mask": (2, 7), "past": (2, 6, 8)},
                          {"seq": (1, 16)})
    assert env == {"batch": 2, "seq": 7}
    with pytest.raises(ShapeMismatchError, match=r"symbol 'seq'.*'ids' axis 1.*'mask' axis 1"):
        sym.bind_shapes(params, {"ids": (2, 7), "mask": (2, 8), "past": (2, 6, 8)})
    with pytest.raises(ShapeMismatchError, match=r"'seq' = 17.*bounds \[1, 16\]"):
        sym.bind_shapes(params, {"ids": (2, 17), "mask": (2, 17), "past": (2, 16, 8)},
                        {"seq": (1, 16)})
    with pytest.raises(ShapeMismatchError, match=r"'past' axis 1 must be \(seq - 1\)"):
        sym.bind_shapes(params, {"ids": (2, 7), "mask": (2, 7), "past": (2, 7, 8)})
    with pytest.raises(ShapeMismatchError, match="axis 2 must be 8"):
        sym.bind_shapes(params, {"ids": (2, 7), "mask": (2, 7), "past": (2, 6, 9)})


def test_reference_run_rejects_contradicting_inputs():
    mod, params = from_onnx(_attention_like_model(), dynamic={"seq": (1, 32)})
    with pytest.raises(ShapeMismatchError, match="'seq' = 33"):
        run_reference(mod, {"x": np.zeros((1, 33, 16), np.float32)}, params)


def test_default_pass_pipeline_keeps_symbolic_graph_correct():
    """The CPU graph pipeline (``optimize``: folding, simplification, layer-norm fusion, CSE,
    FuseOps...) runs on a symbolic graph; the optimized module still matches onnxruntime at
    several sizes (through the reference interpreter, fused functions included)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
    from ember.graph.passes.pipeline import optimize
    m = _attention_like_model()
    mod, params = from_onnx(m, dynamic={"seq": (1, 32)})
    opt, lifted = optimize(mod, "llvm", dict(params))
    assert any(f.attrs.get("primitive") for f in opt.functions.values())  # FuseOps ran
    assert opt.main.outputs[0].type.shape == (B, S, 16)
    assert structural_equal(IRModule.from_text(opt.text()), opt)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for b, s in [(1, 3), (2, 8), (3, 32)]:
        x = rng.standard_normal((b, s, 16)).astype(np.float32)
        got = run_reference(opt, {"x": x}, lifted)[0]
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
