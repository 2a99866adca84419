"""ONNX equivalents of the ONNX-breadth operators for ``test_op_references.py`` (imported at its
end): each maps a graph op's case to the ONNX node that onnx's ReferenceEvaluator runs."""

from __future__ import annotations

import numpy as np

from onnx import TensorProto

from test_op_references import ONNX_DTYPE, ONNX_OPS, ORT_INSTEAD, SAME, i64, onnx_op

ONNX_DTYPE.update({"uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32,
                   "uint64": TensorProto.UINT64, "int16": TensorProto.INT16,
                   "bfloat16": TensorProto.BFLOAT16, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
                   "float8_e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
                   "float8_e5m2": TensorProto.FLOAT8E5M2,
                   "float8_e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
                   "float8_e8m0fnu": TensorProto.FLOAT8E8M0, "int4": TensorProto.INT4,
                   "uint4": TensorProto.UINT4, "float4_e2m1fn": TensorProto.FLOAT4E2M1})


@onnx_op("narrow_cast", "Cast", 25)
def _narrow_cast(xs, a):
    return xs, {"to": ONNX_DTYPE[a["dtype"]], "saturate": a["saturate"],
                "round_mode": a["round_mode"]}

_SIMPLE = {"tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh",
           "cosh": "Cosh", "asinh": "Asinh", "acosh": "Acosh", "atanh": "Atanh",
           "nn.hard_swish": "HardSwish", "nn.softplus": "Softplus", "nn.softsign": "Softsign",
           "nn.mish": "Mish", "nn.prelu": "PRelu", "bitwise_and": "BitwiseAnd",
           "bitwise_or": "BitwiseOr", "bitwise_xor": "BitwiseXor", "bitwise_not": "BitwiseNot"}
for _op, _t in _SIMPLE.items():
    ONNX_OPS[_op] = (_t, 18, SAME)


def _attrs(*names):
    return lambda xs, a: (xs, {k: a[k] for k in names})


for _op, _t, _names, _opset in (
        ("nn.elu", "Elu", ("alpha",), 18), ("nn.selu", "Selu", ("alpha", "gamma"), 18),
        ("nn.leaky_relu", "LeakyRelu", ("alpha",), 18),
        ("nn.hard_sigmoid", "HardSigmoid", ("alpha", "beta"), 18),
        ("nn.gelu", "Gelu", ("approximate",), 20), ("nn.celu", "Celu", ("alpha",), 18),
        ("nn.thresholded_relu", "ThresholdedRelu", ("alpha",), 18),
        ("nn.shrink", "Shrink", ("bias", "lambd"), 18), ("nn.swish", "Swish", ("alpha",), 24),
        ("isinf", "IsInf", ("detect_positive", "detect_negative"), 20),
        ("mod", "Mod", ("fmod",), 13),
        ("gather_nd", "GatherND", ("batch_dims",), 13),
        ("scatter_elements", "ScatterElements", ("axis", "reduction"), 18),
        ("scatter_nd", "ScatterND", ("reduction",), 18),
        ("argmax", "ArgMax", ("axis", "keepdims", "select_last_index"), 13),
        ("argmin", "ArgMin", ("axis", "keepdims", "select_last_index"), 13),
        ("nn.hardmax", "Hardmax", ("axis",), 13),
        ("reverse_sequence", "ReverseSequence", ("batch_axis", "time_axis"), 10)):
    ONNX_OPS[_op] = (_t, _opset, _attrs(*_names))


for _d in ("left", "right"):
    ONNX_OPS[f"{_d}_shift"] = ("BitShift", 11, (lambda d: lambda xs, a: (
        xs, {"direction": d.upper()}))(_d))


@onnx_op("gather_elements", "GatherElements", 13)
def _gather_elements(xs, a):  # the evaluator mishandles a negative axis
    return xs, {"axis": a["axis"] % xs[0].ndim}


# the evaluator's Softsign returns a numpy scalar for a 0-d input (and then refuses it)
ORT_INSTEAD["nn.softsign"] = lambda xs, a: xs[0].ndim == 0


@onnx_op("trilu", "Trilu", 14)
def _trilu(xs, a):
    return [xs[0], i64(a["k"])], {"upper": a["upper"]}


@onnx_op("one_hot", "OneHot", 11)
def _one_hot(xs, a):
    return [xs[0], i64(a["depth"]), xs[1]], {"axis": a["axis"]}


@onnx_op("tile", "Tile", 13)
def _tile(xs, a):
    return [xs[0], i64(a["repeats"])], {}


@onnx_op("topk", "TopK", 11)
def _topk(xs, a):
    return [xs[0], i64([a["k"]])], {"axis": a["axis"], "largest": a["largest"],
                                    "sorted": a["sorted"]}


for _k in ("sum", "prod"):
    ONNX_OPS[f"cum{_k}"] = (f"Cum{_k.capitalize()}", 26 if _k == "prod" else 14,
                            lambda xs, a: ([xs[0], i64(a["axis"])],
                                           {"exclusive": a["exclusive"], "reverse": a["reverse"]}))

__all__ = ["np"]


@onnx_op("nn.conv_transpose", "ConvTranspose", 11)
def _conv_transpose(xs, a):
    return xs, {"strides": a["strides"], "pads": a["pads"], "dilations": a["dilations"],
                "group": a["group"], "output_padding": a["output_padding"]}


@onnx_op("nn.lp_pool", "LpPool", 18)
def _lp_pool(xs, a):
    return xs, {"kernel_shape": a["kernel_shape"], "strides": a["strides"], "pads": a["pads"],
                "p": a["p"]}


ONNX_OPS["nn.lp_normalize"] = ("LpNormalization", 1, lambda xs, a: (xs, {"axis": a["axis"],
                                                                          "p": a["p"]}))


@onnx_op("nn.max_pool_with_indices", "MaxPool", 12)
def _max_pool_indices(xs, a):  # values only: the reference harness reads output 0
    return xs, {"kernel_shape": a["kernel_shape"], "strides": a["strides"], "pads": a["pads"]}

# the evaluator's ConvTranspose fails on groups and output_padding: onnxruntime checks those
ORT_INSTEAD["nn.conv_transpose"] = lambda xs, a: True
# the evaluator's LpNormalization forgets |x| (sum of x**p): onnxruntime checks it
ORT_INSTEAD["nn.lp_normalize"] = lambda xs, a: True
ORT_INSTEAD["nn.max_pool_with_indices"] = lambda xs, a: True  # evaluator: see nn.max_pool


ONNX_OPS["bitcast"] = ("BitCast", 26, lambda xs, a: (xs, {"to": ONNX_DTYPE[a["dtype"]]}))
ONNX_OPS["tensor_scatter"] = ("TensorScatter", 24, lambda xs, a: (xs, {"axis": a["axis"],
                                                                     "mode": a["mode"]}))
