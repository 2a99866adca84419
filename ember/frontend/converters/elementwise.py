"""Converters for the rest of ONNX's elementwise operators: trigonometric and hyperbolic
functions, activations with attributes, PRelu, IsInf, bitwise operators, BitShift, Mod and
CastLike, BitCast, and the ai.onnx.ml ArrayFeatureExtractor and Binarizer."""

from __future__ import annotations

from ...errors import ShapeMismatchError
from . import converter

_UNARY = {"Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh",
          "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
          "HardSwish": "nn.hard_swish", "Softplus": "nn.softplus", "Softsign": "nn.softsign",
          "Mish": "nn.mish", "BitwiseNot": "bitwise_not"}

# ONNX op: (graph op, {onnx attribute: graph attribute}, {graph attribute: default})
_ACT = {"Elu": ("nn.elu", {"alpha": "alpha"}),
        "Selu": ("nn.selu", {"alpha": "alpha", "gamma": "gamma"}),
        "LeakyRelu": ("nn.leaky_relu", {"alpha": "alpha"}),
        "HardSigmoid": ("nn.hard_sigmoid", {"alpha": "alpha", "beta": "beta"}),
        "Gelu": ("nn.gelu", {"approximate": "approximate"}),
        "Celu": ("nn.celu", {"alpha": "alpha"}),
        "ThresholdedRelu": ("nn.thresholded_relu", {"alpha": "alpha"}),
        "Shrink": ("nn.shrink", {"bias": "bias", "lambd": "lambd"}),
        "Swish": ("nn.swish", {"alpha": "alpha"})}


def _unary(op):
    def convert(ctx, node):
        return [ctx.call(op, [node.input(0)])]
    return convert


for _onnx, _op in _UNARY.items():
    converter(_onnx, since=1)(_unary(_op))


def _act(op, amap):
    def convert(ctx, node):
        attrs = {}
        for k, g in amap.items():
            v = node.attr(k)
            if v is not None:
                attrs[g] = v if isinstance(v, str) else float(v)
        return [ctx.call(op, [node.input(0)], attrs)]
    return convert


for _onnx, (_op, _amap) in _ACT.items():
    converter(_onnx, since=1)(_act(_op, _amap))


@converter("PRelu", since=1)
def prelu(ctx, node):
    """ONNX PRelu: ``nn.prelu(x, slope)``; before opset 7 a ``(C,)`` slope of an N-D ``x`` is
    reshaped to ``(C, 1, ...)`` (per channel)."""
    x, s = node.input(0), node.input(1)
    if node.opset < 7 and s.type.ndim == 1 and x.type.ndim > 2 and s.type.shape[0] == x.type.shape[1]:
        # opset 6 and earlier: a per-channel slope of shape (C,)
        s = ctx.call("reshape", [s], {"newshape": [s.type.shape[0]] + [1] * (x.type.ndim - 2)})
    return [ctx.call("nn.prelu", [x, s])]


@converter("IsInf", since=10)
def isinf(ctx, node):
    """ONNX IsInf-10: ``isinf(x)`` (bool, same shape) with ``detect_positive``/``detect_negative``
    (default 1)."""
    return [ctx.call("isinf", [node.input(0)], {
        "detect_positive": node.attr("detect_positive", 1),
        "detect_negative": node.attr("detect_negative", 1)})]


for _onnx, _op in (("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"),
                   ("BitwiseXor", "bitwise_xor")):
    converter(_onnx, since=18)((lambda o: lambda ctx, node: [
        ctx.call(o, [node.input(0), node.input(1)])])(_op))


@converter("BitShift", since=11)
def bit_shift(ctx, node):
    """ONNX BitShift-11: ``left_shift``/``right_shift`` of unsigned ints by ``direction``.

    Raises:
        ShapeMismatchError: ``direction`` is not LEFT or RIGHT."""
    d = node.attr("direction")
    if d not in ("LEFT", "RIGHT"):
        raise ShapeMismatchError(f"BitShift direction must be LEFT or RIGHT, got {d!r}")
    return [ctx.call(f"{d.lower()}_shift", [node.input(0), node.input(1)])]


@converter("Mod", since=10)
def mod(ctx, node):
    """ONNX Mod-10: ``mod(a, b)``; ``fmod=0`` takes the divisor's sign (integer floor modulo),
    ``fmod=1`` the dividend's (C fmod)."""
    return [ctx.call("mod", [node.input(0), node.input(1)], {"fmod": node.attr("fmod", 0)})]


@converter("CastLike", since=15)
def cast_like(ctx, node):
    """ONNX CastLike-15: ``x`` cast to the dtype of input 1 with Cast's semantics (a copy when
    already that dtype).

    Raises:
        UnsupportedOpError: a target dtype ember does not support."""
    x, like = node.input(0), node.input(1)
    if x.type.dtype == like.type.dtype:
        return [ctx.call("copy", [x])]
    from .math import cast_to
    return [cast_to(ctx, node, x, like.type.dtype)]


@converter("BitCast", since=26)
def bit_cast(ctx, node):
    """ONNX BitCast-26: reinterpret the bits of ``x`` as dtype ``to`` (same element width; a copy
    when equal).

    Raises:
        UnsupportedOpError: ``to`` is not a supported dtype."""
    from ..dtypes import onnx_dtype
    to = onnx_dtype(node.attr("to"), "BitCast to: ")
    x = node.input(0)
    if to == x.type.dtype:
        return [ctx.call("copy", [x])]
    return [ctx.call("bitcast", [x], {"dtype": to})]


@converter("ArrayFeatureExtractor", since=1, domain="ai.onnx.ml")
def array_feature_extractor(ctx, node):
    """ONNX-ML ArrayFeatureExtractor: ``take(x, indices flattened, axis=-1)`` (output shape
    ``x.shape[:-1] + (n_indices,)``)."""
    x, idx = node.input(0), node.input(1)
    idx = ctx.call("reshape", [idx], {"newshape": [idx.type.size]})
    return [ctx.call("take", [x, idx], {"axis": -1})]


@converter("Binarizer", since=1, domain="ai.onnx.ml")
def binarizer(ctx, node):
    """ONNX-ML Binarizer: ``1`` where ``x > threshold`` else ``0``, in x's dtype."""
    import numpy as np
    x = node.input(0)
    th = ctx.const(np.asarray(node.attr("threshold", 0.0), dtype=x.type.dtype))
    one = ctx.const(np.asarray(1, dtype=x.type.dtype))
    zero = ctx.const(np.asarray(0, dtype=x.type.dtype))
    return [ctx.call("where", [ctx.call("greater", [x, th]), one, zero])]
