"""Converters for ONNX neural-network operators (Conv, pooling, normalization, Gemm, MatMul...)."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from ...ops.registry import normalize_axis
from . import converter


def resolve_pads(node, in_sp, kernel, strides, dilations) -> list[int]:
    """Explicit ``begins + ends`` pads from ``auto_pad``/``pads`` (ONNX Conv/Pool rules:
    SAME_UPPER puts the odd padding at the end, SAME_LOWER at the beginning)."""
    n = len(in_sp)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", "", None):
        pads = node.attr("pads")
        pads = list(pads) if pads is not None else [0] * (2 * n)
        if len(pads) != 2 * n:
            raise ShapeMismatchError(f"pads {pads} must have {2 * n} values")
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedOpError(f"auto_pad={auto!r} is not a valid value")
    begins, ends = [], []
    for i in range(n):
        out = -(-in_sp[i] // strides[i])
        total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sp[i], 0)
        small, big = total // 2, total - total // 2
        if auto == "SAME_UPPER":
            begins.append(small)
            ends.append(big)
        else:
            begins.append(big)
            ends.append(small)
    return begins + ends


def _spatial(node, x, kernel):
    n = len(kernel)
    strides = list(node.attr("strides") or [1] * n)
    dilations = list(node.attr("dilations") or [1] * n)
    pads = resolve_pads(node, x.type.shape[2:], kernel, strides, dilations)
    return strides, dilations, pads


@converter("Conv", since=1)
def conv(ctx, node):
    """ONNX Conv: ``nn.conv(x, w[, b])`` with x ``(N, C, D1, ...)``, w ``(M, C/group, k1, ...)``;
    strides, dilations and pads (``auto_pad`` resolved) from the attributes.

    Raises:
        ShapeMismatchError: rank of x below 3, or pads of the wrong length.
        UnsupportedOpError: an invalid ``auto_pad``."""
    x, w, b = node.input(0), node.input(1), node.input(2)
    if x.type.ndim < 3:
        raise ShapeMismatchError(f"Conv input must have rank >= 3, got {x.type.shape}")
    kernel = list(node.attr("kernel_shape") or w.type.shape[2:])
    strides, dilations, pads = _spatial(node, x, kernel)
    args = [x, w] + ([b] if b is not None else [])
    return [ctx.call("nn.conv", args, {"strides": strides, "pads": pads, "dilations": dilations,
                                       "group": node.attr("group", 1)})]


def _pool(kind):
    def convert(ctx, node):
        x = node.input(0)
        kernel = list(node.attr("kernel_shape"))
        strides, dilations, pads = _spatial(node, x, kernel)
        attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads,
                 "dilations": dilations, "ceil_mode": node.attr("ceil_mode", 0)}
        if len(node.outputs) > 1 and node.outputs[1]:  # MaxPool with Indices
            attrs["storage_order"] = node.attr("storage_order", 0)
            return list(ctx.call("nn.max_pool_with_indices", [x], attrs))
        if kind == "avg":
            attrs["count_include_pad"] = node.attr("count_include_pad", 0)
        if node.attr("storage_order", 0):
            raise UnsupportedOpError("MaxPool storage_order=1 is not supported")
        return [ctx.call(f"nn.{kind}_pool", [x], attrs)]
    return convert


converter("MaxPool", since=1)(_pool("max"))
converter("AveragePool", since=1)(_pool("avg"))


@converter("GlobalAveragePool", since=1)
def global_avg_pool(ctx, node):
    """ONNX GlobalAveragePool: mean over all spatial dims, ``(N, C, 1, ...)``."""
    return [ctx.call("nn.global_avg_pool", [node.input(0)])]


@converter("GlobalMaxPool", since=1)
def global_max_pool(ctx, node):
    """ONNX GlobalMaxPool: maximum over all spatial dims, ``(N, C, 1, ...)``."""
    return [ctx.call("nn.global_max_pool", [node.input(0)])]


@converter("BatchNormalization", since=1)
def batch_norm(ctx, node):
    """ONNX BatchNormalization: inference form ``nn.batch_norm(x, scale, B, mean, var, epsilon)``;
    ``training_mode=1`` goes to ``batch_norm_training``.

    Raises:
        UnsupportedOpError: opset < 7 training mode (``is_test=0`` with extra outputs)."""
    if node.attr("training_mode", 0):
        from .nn_ext import batch_norm_training
        return batch_norm_training(ctx, node)
    if node.opset < 7 and node.attr("is_test", 0) == 0 and len(node.outputs) > 1:
        raise UnsupportedOpError("BatchNormalization in training mode (is_test=0) is not supported")
    ins = [node.input(k) for k in range(5)]
    y = ctx.call("nn.batch_norm", ins, {"epsilon": float(node.attr("epsilon", 1e-5))})
    return [y]


@converter("LRN", since=1)
def lrn(ctx, node):
    """ONNX LRN: ``nn.lrn`` across channels with ``size``, ``alpha``, ``beta``, ``bias``."""
    return [ctx.call("nn.lrn", [node.input(0)], {
        "size": node.attr("size"), "alpha": float(node.attr("alpha", 1e-4)),
        "beta": float(node.attr("beta", 0.75)), "bias": float(node.attr("bias", 1.0))})]


def _softmax(op):
    def convert(ctx, node):
        x = node.input(0)
        nd = x.type.ndim
        if node.opset >= 13:
            return [ctx.call(op, [x], {"axis": node.attr("axis", -1)})]
        # opset < 13: coerce to 2-D [prod(shape[:axis]), prod(shape[axis:])] and normalise rows
        # the accepted range is [-rank, rank-1] (onnxruntime refuses others too); a default
        # axis 1 on a 1-D input is out of range, not a softmax over single elements
        axis = normalize_axis(node.attr("axis", 1), nd, f"{node.op_type} axis: ")
        shape = x.type.shape
        rows = int(np.prod(shape[:axis])) if axis else 1
        flat = ctx.call("reshape", [x], {"newshape": [rows, int(np.prod(shape[axis:]))]})
        y = ctx.call(op, [flat], {"axis": -1})
        return [ctx.call("reshape", [y], {"newshape": list(shape)})]
    return convert


converter("Softmax", since=1)(_softmax("nn.softmax"))
converter("LogSoftmax", since=1)(_softmax("nn.log_softmax"))


@converter("Gemm", since=1)
def gemm(ctx, node):
    """ONNX Gemm: ``nn.gemm(A, B[, C])`` = ``alpha * A' @ B' + beta * C`` with
    ``transA``/``transB``."""
    a, b, c = node.input(0), node.input(1), node.input(2)
    attrs = {"alpha": float(node.attr("alpha", 1.0)), "beta": float(node.attr("beta", 1.0)),
             "trans_a": node.attr("transA", 0), "trans_b": node.attr("transB", 0)}
    args = [a, b] + ([c] if c is not None else [])
    return [ctx.call("nn.gemm", args, attrs)]


@converter("MatMul", since=1)
def matmul(ctx, node):
    """ONNX MatMul: ``matmul(a, b)`` (numpy matmul semantics, batch dims broadcast)."""
    return [ctx.call("matmul", [node.input(0), node.input(1)])]


@converter("Dropout", since=1)
def dropout(ctx, node):
    """ONNX Dropout: the input itself (inference), plus an all-true mask when asked; a constant
    true ``training_mode`` (input 2) goes to ``dropout_training``.

    Raises:
        RuntimeValueError: ``training_mode`` is only known at run time."""
    x = node.input(0)
    training = node.input(2)
    if training is not None and bool(ctx.require_constant(training, "input 2 (training_mode)")):
        from .nn_ext import dropout_training
        return dropout_training(ctx, node)
    outs = [x]
    if len(node.outputs) > 1 and node.outputs[1]:
        outs.append(ctx.const(np.ones(x.type.shape, dtype=bool)))
    return outs
