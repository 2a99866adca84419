"""The operators' NumPy references checked against an independent one: onnx's
``ReferenceEvaluator`` running the equivalent ONNX node on the same randomized cases that
``test_ops.py`` compiles (so the kernels are compared with references that are themselves
checked against the ONNX specification's implementation)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ember.ops.registry import normalize_axis
from ember.testing import assert_close, default_tolerance, reference_op
from op_cases import CASES
from test_ops import SCALE

ONNX_DTYPE = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
              "float16": TensorProto.FLOAT16, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8,
              "int32": TensorProto.INT32, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}

# op -> (ONNX op type, opset, translate(case inputs, attrs) -> (onnx inputs, onnx attrs))
SAME = lambda xs, a: (xs, {})  # noqa: E731
UNARY = {"exp": "Exp", "log": "Log", "sqrt": "Sqrt", "tanh": "Tanh", "erf": "Erf",
         "sigmoid": "Sigmoid", "floor": "Floor", "ceil": "Ceil", "round": "Round",
         "reciprocal": "Reciprocal", "sin": "Sin", "cos": "Cos", "isnan": "IsNaN",
         "nn.relu": "Relu", "negative": "Neg", "abs": "Abs", "sign": "Sign", "copy": "Identity",
         "logical_not": "Not", "nn.global_avg_pool": "GlobalAveragePool",
         "nn.global_max_pool": "GlobalMaxPool", "matmul": "MatMul"}
BINARY = {"add": "Add", "subtract": "Sub", "multiply": "Mul", "divide": "Div", "power": "Pow",
          "maximum": "Max", "minimum": "Min", "equal": "Equal", "less": "Less",
          "less_equal": "LessOrEqual", "greater": "Greater", "greater_equal": "GreaterOrEqual",
          "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor", "where": "Where"}
ONNX_OPS = {op: (t, 18, SAME) for op, t in {**UNARY, **BINARY}.items()}


def onnx_op(op, op_type, opset):
    def deco(fn):
        ONNX_OPS[op] = (op_type, opset, fn)
        return fn
    return deco


def i64(values):
    return np.asarray(values, np.int64)


@onnx_op("clip", "Clip", 13)
def _clip(xs, a):
    x = xs[0]
    lo = None if a["min"] is None else np.asarray(a["min"]).astype(x.dtype)
    hi = None if a["max"] is None else np.asarray(a["max"]).astype(x.dtype)
    return [x, lo, hi], {}


@onnx_op("cast", "Cast", 19)
def _cast(xs, a):
    return xs, {"to": ONNX_DTYPE[a["dtype"]]}


def _reduce(xs, a):
    x = xs[0]
    attrs = {"keepdims": a["keepdims"]}
    if a["axes"] is None:
        return [x], attrs
    if len(a["axes"]) == 0:
        return [x, i64([])], {**attrs, "noop_with_empty_axes": 1}
    return [x, i64(a["axes"])], attrs


for _op, _t in {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
                "min": "ReduceMin", "prod": "ReduceProd"}.items():
    ONNX_OPS[_op] = (_t, 18, _reduce)


@onnx_op("reshape", "Reshape", 14)
def _reshape(xs, a):
    return [xs[0], i64(a["newshape"])], {"allowzero": 1}


@onnx_op("transpose", "Transpose", 13)
def _transpose(xs, a):
    nd = xs[0].ndim
    return xs, ({} if not a["perm"] else {"perm": [normalize_axis(p, nd) for p in a["perm"]]})


@onnx_op("concatenate", "Concat", 13)
def _concat(xs, a):
    return xs, {"axis": a["axis"]}


@onnx_op("broadcast_to", "Expand", 13)
def _expand(xs, a):
    return [xs[0], i64(a["shape"])], {}


@onnx_op("take", "Gather", 13)
def _gather(xs, a):
    return xs, {"axis": a["axis"]}


@onnx_op("strided_slice", "Slice", 13)
def _slice(xs, a):
    x = xs[0]
    # ember's end -1 with a negative step means "past index 0": ONNX spells it -(dim + 1)
    ends = [e if not (e == -1 and s < 0) else -(d + 1)
            for e, s, d in zip(a["end"], a["strides"], x.shape)]
    return [x, i64(a["begin"]), i64(ends), i64(range(x.ndim)), i64(a["strides"])], {}


@onnx_op("nn.pad", "Pad", 19)
def _pad(xs, a):
    x = xs[0]
    return [x, i64(a["pads"]), np.asarray(a["value"]).astype(x.dtype)], {"mode": a["mode"]}


def _spatial(xs, a, nsp):
    out = {}
    for k in ("strides", "pads", "dilations"):
        if a.get(k) is not None:
            out[k] = list(a[k])
    return out


@onnx_op("nn.conv", "Conv", 11)
def _conv(xs, a):
    return xs, {**_spatial(xs, a, xs[0].ndim - 2), "group": a["group"],
                "kernel_shape": list(xs[1].shape[2:])}


@onnx_op("nn.max_pool", "MaxPool", 12)
def _max_pool(xs, a):
    return xs, {**_spatial(xs, a, xs[0].ndim - 2), "kernel_shape": list(a["kernel_shape"]),
                "ceil_mode": a["ceil_mode"]}


@onnx_op("nn.avg_pool", "AveragePool", 19)
def _avg_pool(xs, a):
    return xs, {**_spatial(xs, a, xs[0].ndim - 2), "kernel_shape": list(a["kernel_shape"]),
                "ceil_mode": a["ceil_mode"], "count_include_pad": a["count_include_pad"]}


@onnx_op("nn.batch_norm", "BatchNormalization", 15)
def _bn(xs, a):
    return xs, {"epsilon": a["epsilon"]}


@onnx_op("nn.lrn", "LRN", 13)
def _lrn(xs, a):
    # The evaluator takes 4-D only and loops its channel window over range(N) instead of
    # range(C) (right only when N == C). LRN mixes channels, never positions, so the input is
    # checked as (C copies, C, N * prod(spatial), 1) and the answer read back from copy 0.
    x = xs[0]
    n, c = x.shape[:2]
    flat = np.moveaxis(x.reshape(n, c, -1), 0, 1).reshape(1, c, -1, 1)

    def back(y):
        return np.moveaxis(y[0].reshape(c, n, -1), 1, 0).reshape(x.shape)
    return [np.repeat(flat, c, axis=0)], {k: a[k] for k in ("size", "alpha", "beta", "bias")}, back


@onnx_op("nn.softmax", "Softmax", 13)
def _softmax(xs, a):
    return xs, {"axis": a["axis"]}


ONNX_OPS["nn.log_softmax"] = ("LogSoftmax", 13, _softmax)


@onnx_op("nn.layer_norm", "LayerNormalization", 17)
def _layer_norm(xs, a):
    return xs, {"axis": a["axis"], "epsilon": a["epsilon"]}


@onnx_op("nn.gemm", "Gemm", 13)
def _gemm(xs, a):
    return xs, {"alpha": a["alpha"], "beta": a["beta"], "transA": a["trans_a"],
                "transB": a["trans_b"]}


# Cases where onnx's ReferenceEvaluator itself is wrong or refuses (checked against the spec and
# onnxruntime): those examples are checked against onnxruntime instead.
def _plain_2d_window(xs, a):
    nsp = xs[0].ndim - 2
    pads = list(a["pads"] or [0] * (2 * nsp))
    return nsp == 2 and pads[:nsp] == pads[nsp:] and all(d == 1 for d in a["dilations"] or ())


ORT_INSTEAD = {
    # the evaluator's pooling is right for plain 2-D windows only: it ignores dilations in
    # AveragePool, miscounts 1-D outputs with asymmetric pads and indexes out of range on some
    "nn.avg_pool": lambda xs, a: not _plain_2d_window(xs, a),
    "nn.max_pool": lambda xs, a: not _plain_2d_window(xs, a),
    # the evaluator's GlobalMaxPool reduces axes (rank-2, rank-1), right only for 4-D inputs
    "nn.global_max_pool": lambda xs, a: xs[0].ndim != 4,
    # the evaluator's Pad calls np.pad, which rejects negative (cropping) pads
    "nn.pad": lambda xs, a: min(a["pads"]) < 0,
}


def _model(op_type, opset, inputs, attrs):
    names = [f"i{k}" if x is not None else "" for k, x in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op_type, names, ["y"], **attrs)
    vis = [helper.make_tensor_value_info(n, ONNX_DTYPE[str(x.dtype)], list(x.shape))
           for n, x in zip(names, inputs) if n]
    graph = helper.make_graph([node], "g", vis, [helper.make_value_info("y", helper.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, {n: x for n, x in zip(names, inputs) if n}


def run_onnxruntime(op_type, opset, inputs, attrs):
    """onnxruntime's result; float64 is run in float32 (most CPU kernels have no float64)."""
    ort = pytest.importorskip("onnxruntime")
    wide = [x is not None and x.dtype == np.float64 for x in inputs]
    inputs = [x.astype(np.float32) if w else x for x, w in zip(inputs, wide)]
    model, feeds = _model(op_type, opset, inputs, attrs)
    model.graph.output[0].type.tensor_type.elem_type = ONNX_DTYPE[str(inputs[0].dtype)]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    return [o.astype(np.float64) if wide[0] else o for o in outs]


def run_onnx_reference(op_type, opset, inputs, attrs):
    model, feeds = _model(op_type, opset, inputs, attrs)
    return ReferenceEvaluator(model).run(None, feeds)


from op_references_breadth import *  # noqa: E402,F401,F403  (ONNX-breadth operators)
from op_references_image import *  # noqa: E402,F401,F403  (image operators)
from op_references_signal import *  # noqa: E402,F401,F403  (signal operators)
from op_references_linalg import *  # noqa: E402,F401,F403  (linear algebra)
from op_references_spatial import *  # noqa: E402,F401,F403  (data-driven spatial)


# ops whose values no other implementation reproduces: why, and where they are checked instead
NO_ONNX_EQUIVALENT = {
    op: "random draws: ONNX fixes no generator; distributions are tested in test_random_ops.py"
    for op in ("random.uniform", "random.normal", "random.bernoulli")}
NO_ONNX_EQUIVALENT.update({
    op: "Winograd transform halves of a Conv: composed with the weight transform they are "
        "checked against a direct convolution in test_winograd.py"
    for op in ("nn.winograd_input", "nn.winograd_output")})
NO_ONNX_EQUIVALENT.update({
    op: "ONNX's operator takes another attribute form (ember's carries the converter's derived "
        "geometry); the compiled op is checked against onnx.reference on odd shapes in "
        "test_transformer_kernels.py and against onnx's backend cases in test_transformer_ops.py"
    for op in ("nn.attention", "nn.group_norm", "nn.rotary_embedding", "nn.swiglu")})
NO_ONNX_EQUIVALENT["qnn.conv2d"] = (
    "takes packed weights and a bias with the zero-point correction folded in (no ONNX op "
    "does): checked bit for bit against an integer reference in test_qnn_conv.py, and whole "
    "QDQ models against onnxruntime's int8 execution in test_quantization.py")
ONNX_OPS["qnn.quantize"] = ("QuantizeLinear", 19, lambda xs, a: (xs, {"axis": a["axis"]}))
ONNX_OPS["qnn.dequantize"] = ("DequantizeLinear", 19, lambda xs, a: (xs, {"axis": a["axis"]}))
ONNX_OPS["nn.rms_norm"] = ("RMSNormalization", 23, lambda xs, a: (
    xs, {"axis": a["axis"], "epsilon": a["epsilon"]}))
NO_ONNX_EQUIVALENT["nn.inverted_residual"] = (
    "a chain of ONNX Conv/Clip/Add nodes, not one op: whole blocks and MobileNetV2 are checked "
    "against onnxruntime and the unfused compile in test_inverted_residual.py")
NO_ONNX_EQUIVALENT["nn.shuffled_group_conv"] = (
    "a channel shuffle (Reshape/Transpose/Reshape) folded into a grouped 1x1 Conv, not one op: "
    "the op is checked against a NumPy reference and whole ShuffleNet units against onnxruntime "
    "in tests/passes/test_pass_fold_channel_shuffle.py")


def test_reference_table_covers_known_ops():
    missing = sorted(set(CASES) - set(ONNX_OPS) - set(NO_ONNX_EQUIVALENT))
    assert not missing, f"ops with cases but no ONNX equivalent listed here: {missing}"


@pytest.mark.parametrize("op", sorted(set(ONNX_OPS) & set(CASES)))
def test_numpy_reference_matches_onnx_reference(op):
    op_type, opset, translate = ONNX_OPS[op]

    @settings(max_examples=int(8 * SCALE))
    @given(data=st.data())
    def check(data):
        case = CASES[op](data.draw)
        ours = reference_op(op, case.inputs, case.attrs)
        from ember.graph.builder import infer_call
        from ember.graph.ir import Constant
        attrs_n, _ = infer_call(op, [Constant(x) for x in case.inputs], dict(case.attrs))
        ins, attrs, *post = translate(list(case.inputs), attrs_n)
        use_ort = ORT_INSTEAD.get(op, lambda xs, a: False)(case.inputs, attrs_n)
        theirs = (run_onnxruntime if use_ort else run_onnx_reference)(op_type, opset, ins, attrs)
        for k, (a, b) in enumerate(zip(ours, theirs)):
            b = np.asarray(b)
            if post:
                b = post[0](b)
            r, t = default_tolerance(a.dtype)
            if a.dtype.kind == "f":
                r, t = max(r, case.rtol or 0, 1e-5), max(t, case.atol or 0, 1e-6)
                if use_ort:  # computed in float32
                    r, t = max(r, 1e-4), max(t, 1e-5)
            assert_close(a, b.astype(a.dtype) if b.dtype != a.dtype else b, r, t,
                         f"{op} reference vs onnx {op_type}-{opset}, output {k}")
            assert b.dtype == a.dtype or b.dtype.kind == a.dtype.kind == "f", (b.dtype, a.dtype)
    check()
