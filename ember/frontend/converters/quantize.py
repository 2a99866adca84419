"""Converters for ONNX quantization: QuantizeLinear, DequantizeLinear (per-tensor, per-axis and
blocked; integer, int4/int2 and float8/float4 types), MatMulInteger, ConvInteger, QLinearMatMul,
QLinearConv. Each is composed of graph operators (cast, arithmetic, round, clip, matmul/conv), so
every step is compiled and fused like any other arithmetic.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from ...ops.registry import normalize_axis
from ..dtypes import onnx_dtype
from . import converter

INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
              "int16": (-32768, 32767), "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3),
              "int2": (-2, 1), "int32": (-2**31, 2**31 - 1)}
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def _f32(ctx, v):
    return v if v.type.dtype == "float32" else ctx.call("cast", [v], {"dtype": "float32"})


def broadcast_param(ctx, p, x_shape, axis: int, block: int, what: str):
    """Scale/zero point ``p`` as a value that broadcasts against ``x_shape``: a scalar stays,
    a 1-D per-axis vector is reshaped along ``axis``, a blocked tensor is repeated ``block``
    times along ``axis`` (ONNX Q/DQ rules)."""
    rank = len(x_shape)
    if p.type.ndim == 0 or p.type.size == 1:
        return ctx.call("reshape", [p], {"newshape": []}) if p.type.ndim else p
    ax = normalize_axis(axis, rank)
    if not block:
        if p.type.ndim != 1 or p.type.shape[0] != x_shape[ax]:
            raise ShapeMismatchError(f"{what} of shape {p.type.shape} does not match axis {ax} of "
                                     f"{x_shape}")
        return ctx.call("reshape", [p], {"newshape": [x_shape[ax]] + [1] * (rank - ax - 1)})
    if p.type.ndim != rank:
        raise ShapeMismatchError(f"blocked {what} must have the rank of the input ({rank})")
    idx = ctx.const(np.arange(x_shape[ax], dtype=np.int64) // block)
    return ctx.call("take", [p, idx], {"axis": ax})


def _qparams(node):
    return node.attr("axis", 1), node.attr("block_size", 0) or 0


def _qdq_form(x, scale, zp, block) -> bool:
    """Whether a Q/DQ node has the form of ``ember.ops.qnn`` (float32 scale per tensor or per
    axis, no blocks, a zero point of the quantized type or none)."""
    if block or scale.type.dtype != "float32" or scale.type.ndim > 1:
        return False
    if scale.type.ndim == 1 and scale.type.size > 1 and x.type.ndim == 0:
        return False
    return zp is None or (zp.type.shape == scale.type.shape)


def _zero_point(ctx, zp, scale, dtype: str):
    """``zp``, or a zero of ``dtype`` shaped like ``scale`` when the node has none."""
    if zp is not None:
        return zp
    return ctx.const(np.zeros(scale.type.shape, dtype))


@converter("DequantizeLinear", since=10)
def dequantize_linear(ctx, node):
    """ONNX DequantizeLinear-10+: ``(x - zero_point) * scale`` computed in float32 (per tensor, per
    ``axis``, or blocked with ``block_size``), cast to ``output_dtype`` or the scale's dtype;
    float8/float4 inputs ignore the zero point.

    Raises:
        ShapeMismatchError: a scale or zero point whose shape does not match the axis or block.
        UnsupportedOpError: an unsupported ``output_dtype``."""
    x, scale, zp = node.input(0), node.input(1), node.input(2)
    axis, block = _qparams(node)
    shp = x.type.shape
    out = node.attr("output_dtype")
    if x.type.dtype in ("int8", "uint8", "int32") and _qdq_form(x, scale, zp, block) and \
            (not out or onnx_dtype(out, "DequantizeLinear output_dtype: ") == "float32"):
        # the QDQ graph form (ember.ops.qnn); not folded, so that realize_qnn sees the weights
        return [ctx.call("qnn.dequantize", [x, scale, _zero_point(ctx, zp, scale, x.type.dtype)],
                         {"axis": axis}, fold=False)]
    s = broadcast_param(ctx, scale, shp, axis, block, "x_scale")
    dx = _f32(ctx, x)
    if zp is not None and x.type.dtype not in FLOAT8 + ("float4_e2m1fn",):
        z = broadcast_param(ctx, zp, shp, axis, block, "x_zero_point")
        dx = ctx.call("subtract", [dx, _f32(ctx, z)])
    y = ctx.call("multiply", [dx, _f32(ctx, s)])
    out = node.attr("output_dtype")
    out = onnx_dtype(out, "DequantizeLinear output_dtype: ") if out else scale.type.dtype
    return [y if out == "float32" else ctx.call("cast", [y], {"dtype": out})]


def quantize(ctx, x_scaled, out: str, zp, saturate: int = 1):
    """``x_scaled`` (already divided by the scale) quantized to ``out``: integers round half to
    even, add the zero point and clamp; float8 converts (saturating unless ``saturate=0``);
    float4 adds the zero point and converts."""
    if out in INT_RANGES:
        r = ctx.call("round", [x_scaled])
        if zp is not None:
            r = ctx.call("add", [r, _f32(ctx, zp)] if r.type.dtype == "float32" else
                         [r, ctx.call("cast", [zp], {"dtype": r.type.dtype})])
        lo, hi = INT_RANGES[out]
        r = ctx.call("clip", [r], {"min": float(lo), "max": float(hi)})
        return ctx.call("cast", [r], {"dtype": out})
    if out in FLOAT8:
        if not saturate:
            return ctx.call("narrow_cast", [x_scaled], {"dtype": out, "saturate": 0})
        return ctx.call("cast", [x_scaled], {"dtype": out})
    if out == "float4_e2m1fn":
        if zp is not None:
            x_scaled = ctx.call("add", [x_scaled, ctx.call("cast", [zp], {
                "dtype": x_scaled.type.dtype})])
        return ctx.call("cast", [x_scaled], {"dtype": out})
    raise UnsupportedOpError(f"quantization to {out} is not supported")


@converter("QuantizeLinear", since=10)
def quantize_linear(ctx, node):
    """ONNX QuantizeLinear-10+: ``saturate(round_half_even(x / scale) + zero_point)`` into the zero
    point's dtype (else ``output_dtype``, default uint8); per tensor, axis or block, with optional
    ``precision``; float8 targets honour ``saturate``.

    Raises:
        ShapeMismatchError: a scale or zero point whose shape does not match the axis or block.
        UnsupportedOpError: an unsupported target dtype."""
    x, scale, zp = node.input(0), node.input(1), node.input(2)
    axis, block = _qparams(node)
    shp = x.type.shape
    out = zp.type.dtype if zp is not None else (
        onnx_dtype(node.attr("output_dtype"), "QuantizeLinear output_dtype: ")
        if node.attr("output_dtype") else "uint8")
    if out in ("int8", "uint8") and x.type.dtype == "float32" and \
            _qdq_form(x, scale, zp, block) and not node.attr("precision"):
        return [ctx.call("qnn.quantize", [x, scale, _zero_point(ctx, zp, scale, out)],
                         {"axis": axis, "out_dtype": out})]
    s = broadcast_param(ctx, scale, shp, axis, block, "y_scale")
    prec = node.attr("precision")
    if prec:
        pdt = onnx_dtype(prec, "QuantizeLinear precision: ")
        xd = ctx.call("cast", [x], {"dtype": pdt}) if x.type.dtype != pdt else x
        s = ctx.call("cast", [s], {"dtype": pdt}) if s.type.dtype != pdt else s
    else:
        xd = x
        if s.type.dtype != x.type.dtype:
            s = ctx.call("cast", [s], {"dtype": x.type.dtype})
    q = ctx.call("divide", [xd, s])
    z = broadcast_param(ctx, zp, shp, axis, block, "y_zero_point") if zp is not None else None
    if out in INT_RANGES and q.type.dtype != "float32":
        q = ctx.call("cast", [q], {"dtype": "float32"})
    return [quantize(ctx, q, out, z, node.attr("saturate", 1))]


def _minus_zp(ctx, v, zp, shape_for, axis):
    v = ctx.call("cast", [v], {"dtype": "int32"})
    if zp is None:
        return v
    z = ctx.call("cast", [zp], {"dtype": "int32"})
    if z.type.ndim == 1 and z.type.size > 1:
        z = ctx.call("reshape", [z], {"newshape": [z.type.size] + [1] * (len(shape_for) - axis - 1)})
    return ctx.call("subtract", [v, z])


@converter("MatMulInteger", since=10)
def matmul_integer(ctx, node):
    """ONNX MatMulInteger-10: ``matmul(a - a_zero_point, b - b_zero_point)`` with an int32 result
    (zero points per tensor, per row of a, or per column of b)."""
    a, b = node.input(0), node.input(1)
    a2 = _minus_zp(ctx, a, node.input(2), a.type.shape, max(a.type.ndim - 2, 0))
    b2 = _minus_zp(ctx, b, node.input(3), b.type.shape, b.type.ndim - 1)
    return [ctx.call("matmul", [a2, b2])]


def _conv_attrs(node, x, w):
    from .nn import _spatial
    kernel = list(node.attr("kernel_shape") or w.type.shape[2:])
    strides, dilations, pads = _spatial(node, x, kernel)
    return {"strides": strides, "pads": pads, "dilations": dilations,
            "group": node.attr("group", 1)}


@converter("ConvInteger", since=10)
def conv_integer(ctx, node):
    """ONNX ConvInteger-10: ``nn.conv(x - x_zero_point, w - w_zero_point)`` with an int32 result
    (w's zero point per output channel or per tensor).

    Raises:
        ShapeMismatchError: pads of the wrong length.
        UnsupportedOpError: an invalid ``auto_pad``."""
    x, w = node.input(0), node.input(1)
    x2 = _minus_zp(ctx, x, node.input(2), x.type.shape, 1)
    w2 = _minus_zp(ctx, w, node.input(3), w.type.shape, 0)
    return [ctx.call("nn.conv", [x2, w2], _conv_attrs(node, x, w))]


def _requantize(ctx, acc, mult, y_zp, out_dtype):
    """round(acc * mult) + y_zp clamped to out_dtype (computed in float64 like the spec's
    reference: int32 accumulator times a float32 multiplier)."""
    d = ctx.call("multiply", [ctx.call("cast", [acc], {"dtype": "float64"}),
                              ctx.call("cast", [mult], {"dtype": "float64"})])
    d = ctx.call("round", [d])
    if y_zp is not None:
        d = ctx.call("add", [d, ctx.call("cast", [y_zp], {"dtype": "float64"})])
    lo, hi = INT_RANGES[out_dtype]
    d = ctx.call("clip", [d], {"min": float(lo), "max": float(hi)})
    return ctx.call("cast", [d], {"dtype": out_dtype})


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx, node):
    """ONNX QLinearMatMul-10: int32 ``matmul`` of the zero-point-shifted operands, requantized by
    ``a_scale * b_scale / y_scale`` (float32) to ``y_zero_point``'s dtype."""
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (node.input(k) for k in range(8))
    a2 = _minus_zp(ctx, a, a_zp, a.type.shape, max(a.type.ndim - 2, 0))
    b2 = _minus_zp(ctx, b, b_zp, b.type.shape, b.type.ndim - 1)
    acc = ctx.call("matmul", [a2, b2])
    mult = ctx.call("divide", [ctx.call("multiply", [_f32(ctx, a_s), _f32(ctx, b_s)]),
                               _f32(ctx, y_s)])
    if mult.type.ndim == 1 and mult.type.size > 1:
        mult = ctx.call("reshape", [mult], {"newshape": [1] * (acc.type.ndim - 1) + [mult.type.size]})
    out = y_zp.type.dtype if y_zp is not None else a.type.dtype
    return [_requantize(ctx, acc, mult, y_zp, out)]


@converter("QLinearConv", since=10)
def qlinear_conv(ctx, node):
    """ONNX QLinearConv-10: int32 ``nn.conv`` of the zero-point-shifted operands (plus the int32
    bias), requantized by ``x_scale * w_scale / y_scale`` (per output channel allowed) to
    ``y_zero_point``'s dtype.

    Raises:
        ShapeMismatchError: pads of the wrong length.
        UnsupportedOpError: an invalid ``auto_pad``."""
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias = (node.input(k) for k in range(9))
    x2 = _minus_zp(ctx, x, x_zp, x.type.shape, 1)
    w2 = _minus_zp(ctx, w, w_zp, w.type.shape, 0)
    args = [x2, w2] + ([bias] if bias is not None else [])
    acc = ctx.call("nn.conv", args, _conv_attrs(node, x, w))
    mult = ctx.call("divide", [ctx.call("multiply", [_f32(ctx, x_s), _f32(ctx, w_s)]),
                               _f32(ctx, y_s)])
    if mult.type.ndim == 1 and mult.type.size > 1:
        mult = ctx.call("reshape", [mult], {"newshape": [mult.type.size] + [1] * (acc.type.ndim - 2)})
    out = y_zp.type.dtype if y_zp is not None else x.type.dtype
    return [_requantize(ctx, acc, mult, y_zp, out)]
