"""One door: ``ember.compile`` takes every model the ONNX backend takes. Operators ONNX defines by
a function body compile statically (and fuse); what needs host code (data-dependent shapes,
strings, sequences, symbolic input dims) falls back to the staged executor with the reason in
``info``; string models run from Python and from ``ember run``; ``ember compile`` says why a
staged model has no artifact and ``ember bench`` times it."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.cli import main
from ember.errors import ArtifactError, HostValueError, UnsupportedOpError

N = helper.make_node


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=18, functions=(), extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, functions=list(functions),
                             opset_imports=[helper.make_opsetid("", opset)] + list(extra_opsets))


def _ref(m, feeds):
    return ReferenceEvaluator(m).run(None, feeds)


# function bodies compile statically ------------------------------------------------------------

def test_schema_function_operators_compile_statically_and_fuse():
    # ReduceL1 (opset 18) and MeanVarianceNormalization are ONNX functions without an ember
    # converter: expanded in from_onnx, one static model, matching onnx's reference
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    m = _model([N("MeanVarianceNormalization", ["x"], ["n"], axes=[0, 2]),
                N("ReduceL1", ["n", "ax"], ["y"], keepdims=1)],
               [vi("x", TensorProto.FLOAT, [2, 3, 4])], [vi("y", TensorProto.FLOAT, None)],
               [helper.make_tensor("ax", TensorProto.INT64, [1], [2])])
    c = ember.compile(m)
    assert c.info["executor"] == "static"
    assert c.info["num_kernels"] < c.info["num_bindings"]  # the bodies' operators fused
    np.testing.assert_allclose(c.run({"x": x})[0], _ref(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_context_dependent_and_model_local_functions_compile_statically():
    # SoftmaxCrossEntropyLoss has a context-dependent body; "twice" is a model-local function
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((3, 5)).astype(np.float32)
    labels = np.array([0, 4, 2], np.int64)
    f = helper.make_function("local.fns", "twice", ["a"], ["b"],
                             [N("Add", ["a", "a"], ["b"])], [helper.make_opsetid("", 18)])
    m = _model([N("SoftmaxCrossEntropyLoss", ["s", "l"], ["loss"], reduction="mean"),
                N("twice", ["loss"], ["y"], domain="local.fns")],
               [vi("s", TensorProto.FLOAT, [3, 5]), vi("l", TensorProto.INT64, [3])],
               [vi("y", TensorProto.FLOAT, None)], functions=[f],
               extra_opsets=[helper.make_opsetid("local.fns", 1)])
    c = ember.compile(m)
    assert c.info["executor"] == "static"
    logp = scores - np.log(np.exp(scores).sum(1, keepdims=True))
    want = -2 * logp[np.arange(3), labels].mean()
    np.testing.assert_allclose(c.run({"s": scores, "l": labels})[0], want, rtol=1e-5)


# what needs host code falls back to the staged executor ----------------------------------------

def test_data_dependent_shape_falls_back_to_staged_with_the_reason():
    m = _model([N("NonZero", ["x"], ["nz"])], [vi("x", TensorProto.FLOAT, [2, 3])],
               [vi("nz", TensorProto.INT64, None)])
    c = ember.compile(m)
    assert c.info["executor"] == "staged" and "NonZero" in c.info["staged_reason"]
    x = np.array([[0, 1, 0], [2, 0, 3]], np.float32)
    np.testing.assert_array_equal(c.run({"x": x})[0], np.array(np.nonzero(x)))
    with pytest.raises(ArtifactError, match="staged executor"):
        c.save("never.ember")


def test_symbolic_input_dim_is_staged_unless_shapes_fix_it():
    m = _model([N("Relu", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, ["n", 3])],
               [vi("y", TensorProto.FLOAT, None)])
    c = ember.compile(m)
    assert c.info["executor"] == "staged" and "'n'" in c.info["staged_reason"]
    for rows in (2, 5):
        x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        np.testing.assert_array_equal(c.run({"x": x})[0], np.maximum(x, 0))
    assert ember.compile(m, shapes={"x": (4, 3)}).info["executor"] == "static"


def test_sequence_input_is_staged():
    m = _model([N("SequenceLength", ["s"], ["n"])],
               [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])],
               [vi("n", TensorProto.INT64, [])])
    with pytest.raises(HostValueError):
        ember.compile(m, executor="static")
    c = ember.compile(m)
    assert c.info["executor"] == "staged"
    assert int(c.run({"s": [np.zeros(2, np.float32)] * 3})[0]) == 3


def test_operator_no_executor_runs_fails_at_compile_time():
    m = _model([N("NoSuchOp", ["x"], ["y"], name="mystery", domain="custom.domain")],
               [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])],
               extra_opsets=[helper.make_opsetid("custom.domain", 1)])
    with pytest.raises(UnsupportedOpError) as e:
        ember.compile(m)
    assert e.value.op == "NoSuchOp" and "mystery" in str(e.value)


# strings ---------------------------------------------------------------------------------------

WORDS = [f"w{i}" for i in range(20)]


def _label_encoder_then(op_nodes, inits=()):
    nodes = [N("LabelEncoder", ["x"], ["s"], domain="ai.onnx.ml", keys_int64s=[0, 1, 2],
               values_strings=["a", "b", "c"], default_string="?")] + op_nodes
    return _model(nodes, [vi("x", TensorProto.INT64, [4])], [vi("y", TensorProto.STRING, None)],
                  inits, extra_opsets=[helper.make_opsetid("ai.onnx.ml", 3)])


@pytest.mark.parametrize("case", ["reshape", "gather", "concat", "where_initializers",
                                  "constant_output"])
def test_strings_from_host_operators_run_through_compiled_graphs(case):
    # (was: TypeError "Cannot change data-type for array of references" from the executor, or
    # UnsupportedOpError for the string graph input of a compiled segment)
    x = np.array([0, 1, 2, 5], np.int64)
    if case == "reshape":
        m = _label_encoder_then([N("Reshape", ["s", "sh"], ["y"])],
                                [helper.make_tensor("sh", TensorProto.INT64, [2], [2, 2])])
    elif case == "gather":
        m = _label_encoder_then([N("Gather", ["s", "i"], ["y"])],
                                [helper.make_tensor("i", TensorProto.INT64, [2], [3, 0])])
    elif case == "concat":
        m = _label_encoder_then([N("Concat", ["s", "s"], ["y"], axis=0)])
    else:
        a = helper.make_tensor("A", TensorProto.STRING, [20], [w.encode() for w in WORDS])
        b = helper.make_tensor("B", TensorProto.STRING, [20], [w.upper().encode() for w in WORDS])
        if case == "where_initializers":
            m = _model([N("Where", ["c", "A", "B"], ["y"])], [vi("c", TensorProto.BOOL, [20])],
                       [vi("y", TensorProto.STRING, None)], [a, b])
            x = np.arange(20) % 3 == 0
        else:
            m = _model([N("Constant", [], ["y"], value=a)], [],
                       [vi("y", TensorProto.STRING, None)])
    feeds = {m.graph.input[0].name: x} if m.graph.input else {}
    c = ember.compile(m)
    assert c.info["executor"] == "staged"
    y, = c.run(feeds)
    want, = _ref(m, feeds)
    assert y.shape == want.shape and [str(v) for v in y.ravel()] == [str(v) for v in want.ravel()]


def test_ember_run_prints_string_outputs(tmp_path, capsys):
    m = _label_encoder_then([N("Identity", ["s"], ["y"])])
    path = tmp_path / "strings.onnx"
    onnx.save(m, path)
    np.save(tmp_path / "x.npy", np.array([2, 0, 9, 1], np.int64))
    out_dir = tmp_path / "out"
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--repeat", "1",
                 "--save-outputs", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "string" in out and "(4,)" in out
    np.testing.assert_array_equal(np.load(out_dir / "output_0.npy"), ["c", "a", "?", "b"])


# the command line ------------------------------------------------------------------------------

@pytest.fixture
def nonzero_model(tmp_path):
    m = _model([N("NonZero", ["x"], ["nz"]), N("Cast", ["nz"], ["y"], to=TensorProto.FLOAT)],
               [vi("x", TensorProto.FLOAT, [3, 4])], [vi("y", TensorProto.FLOAT, None)])
    path = tmp_path / "nz.onnx"
    onnx.save(m, path)
    return path


def test_ember_compile_of_a_staged_model_says_why_nothing_is_saved(nonzero_model, capsys):
    out = nonzero_model.with_suffix(".ember")
    assert main(["compile", str(nonzero_model), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ArtifactError" in err and "staged executor" in err and "NonZero" in err
    assert "ember run" in err and not out.exists()


def test_ember_bench_times_a_staged_model(nonzero_model, capsys):
    assert main(["bench", str(nonzero_model), "--repeat", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "staged executor" in out
    row = next(ln for ln in out.splitlines()
               if ln.split()[:1] == ["ember"] and ln.split()[1].replace(".", "").isdigit())
    assert "yes" in row  # matches onnxruntime
