"""Converters for more ONNX neural-network operators: ConvTranspose, LpPool, GlobalLpPool,
LpNormalization, InstanceNormalization, and LayerNormalization with its Mean/InvStdDev outputs
(composed from reductions and arithmetic)."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from ...ops.registry import normalize_axis
from ..dtypes import onnx_dtype
from . import converter
from .nn import _spatial


@converter("ConvTranspose", since=1)
def conv_transpose(ctx, node):
    """ONNX ConvTranspose: ``nn.conv_transpose(x, w[, b])`` with strides, dilations,
    ``output_padding`` and ``output_shape``; SAME_UPPER/SAME_LOWER pads are computed from the
    target shape as the spec says.

    Raises:
        ShapeMismatchError: rank of x below 3.
        UnsupportedOpError: an invalid ``auto_pad``."""
    x, w, b = node.input(0), node.input(1), node.input(2)
    nsp = x.type.ndim - 2
    if nsp < 1:
        raise ShapeMismatchError(f"ConvTranspose input must have rank >= 3, got {x.type.shape}")
    kernel = list(node.attr("kernel_shape") or w.type.shape[2:])
    strides = list(node.attr("strides") or [1] * nsp)
    dil = list(node.attr("dilations") or [1] * nsp)
    outpad = list(node.attr("output_padding") or [0] * nsp)
    out_shape = node.attr("output_shape")
    out_shape = list(out_shape)[-nsp:] if out_shape else None
    auto = node.attr("auto_pad", "NOTSET")
    pads = node.attr("pads")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        target = out_shape or [x.type.shape[2 + i] * strides[i] for i in range(nsp)]
        total = [strides[i] * (x.type.shape[2 + i] - 1) + outpad[i] + (kernel[i] - 1) * dil[i]
                 + 1 - target[i] for i in range(nsp)]
        if auto == "SAME_UPPER":
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            pads = [t - t // 2 for t in total] + [t // 2 for t in total]
        out_shape = target
    elif auto not in ("NOTSET", "VALID", "", None):
        raise UnsupportedOpError(f"auto_pad={auto!r} is not a valid value")
    pads = list(pads) if pads is not None else [0] * (2 * nsp)
    args = [x, w] + ([b] if b is not None else [])
    return [ctx.call("nn.conv_transpose", args, {
        "strides": strides, "pads": pads, "dilations": dil, "group": node.attr("group", 1),
        "output_padding": outpad, "output_shape": out_shape})]


@converter("LpPool", since=1)
def lp_pool(ctx, node):
    """ONNX LpPool: ``nn.lp_pool`` (``(sum |x|^p)^(1/p)`` per window) with kernel, strides, pads,
    dilations, ``ceil_mode`` and ``p``.

    Raises:
        ShapeMismatchError: pads of the wrong length.
        UnsupportedOpError: an invalid ``auto_pad``."""
    x = node.input(0)
    kernel = list(node.attr("kernel_shape"))
    strides, dilations, pads = _spatial(node, x, kernel)
    return [ctx.call("nn.lp_pool", [x], {"kernel_shape": kernel, "strides": strides,
                                         "pads": pads, "dilations": dilations,
                                         "ceil_mode": node.attr("ceil_mode", 0),
                                         "p": node.attr("p", 2)})]


@converter("GlobalLpPool", since=1)
def global_lp_pool(ctx, node):
    """ONNX GlobalLpPool: ``nn.lp_pool`` with a kernel covering all spatial dims."""
    x = node.input(0)
    kernel = list(x.type.shape[2:])
    return [ctx.call("nn.lp_pool", [x], {"kernel_shape": kernel, "p": node.attr("p", 2)})]


@converter("LpNormalization", since=1)
def lp_normalization(ctx, node):
    """ONNX LpNormalization: ``x / ||x||_p`` along ``axis`` (``p`` 1 or 2)."""
    return [ctx.call("nn.lp_normalize", [node.input(0)], {"axis": node.attr("axis", -1),
                                                          "p": node.attr("p", 2)})]


def normalize_moments(ctx, x, axes, eps, stash="float32"):
    """``(mean, inv_std_dev, normalized x)`` over ``axes`` (kept as size 1), computed in
    ``stash`` precision."""
    xs = x if x.type.dtype == stash else ctx.call("cast", [x], {"dtype": stash})
    mean = ctx.call("mean", [xs], {"axes": list(axes), "keepdims": 1})
    d = ctx.call("subtract", [xs, mean])
    var = ctx.call("mean", [ctx.call("multiply", [d, d])], {"axes": list(axes), "keepdims": 1})
    inv = ctx.call("reciprocal", [ctx.call("sqrt", [ctx.call("add", [
        var, ctx.const(np.asarray(eps, dtype=stash))])])])
    return mean, inv, ctx.call("multiply", [d, inv])


@converter("InstanceNormalization", since=1)
def instance_norm(ctx, node):
    """ONNX InstanceNormalization: normalize over the spatial dims of each ``(n, c)``
    (``epsilon``), then ``* scale[c] + B[c]``; float16 inputs compute in float32."""
    x, scale, bias = node.input(0), node.input(1), node.input(2)
    r = x.type.ndim
    stash = "float64" if x.type.dtype == "float64" else "float32"
    _, _, y = normalize_moments(ctx, x, range(2, r), float(node.attr("epsilon", 1e-5)), stash)
    shp = [x.type.shape[1]] + [1] * (r - 2)
    s = ctx.call("reshape", [scale], {"newshape": shp})
    b = ctx.call("reshape", [bias], {"newshape": shp})
    if s.type.dtype != stash:
        s = ctx.call("cast", [s], {"dtype": stash})
        b = ctx.call("cast", [b], {"dtype": stash})
    y = ctx.call("add", [ctx.call("multiply", [y, s]), b])
    return [y if y.type.dtype == x.type.dtype else ctx.call("cast", [y], {"dtype": x.type.dtype})]


@converter("LayerNormalization", since=17)
def layer_norm(ctx, node):
    """ONNX LayerNormalization-17: ``nn.layer_norm`` over dims ``axis..`` for float32 without the
    Mean/InvStdDev outputs; otherwise decomposed in ``stash_type`` and returns ``[Y, Mean,
    InvStdDev]``.

    Raises:
        UnsupportedOpError: an unsupported ``stash_type``."""
    x, scale, bias = node.input(0), node.input(1), node.input(2)
    eps = float(node.attr("epsilon", 1e-5))
    axis = normalize_axis(node.attr("axis", -1), x.type.ndim)
    want_stats = any(o for o in node.outputs[1:])
    stash = onnx_dtype(node.attr("stash_type", 1), "LayerNormalization stash_type: ")
    if not want_stats and stash == "float32" and x.type.dtype == "float32":
        args = [x, scale] + ([bias] if bias is not None else [])
        return [ctx.call("nn.layer_norm", args, {"axis": axis, "epsilon": eps})]
    mean, inv, y = normalize_moments(ctx, x, range(axis, x.type.ndim), eps, stash)
    s = scale if scale.type.dtype == stash else ctx.call("cast", [scale], {"dtype": stash})
    y = ctx.call("multiply", [y, s])
    if bias is not None:
        b = bias if bias.type.dtype == stash else ctx.call("cast", [bias], {"dtype": stash})
        y = ctx.call("add", [y, b])
    if y.type.dtype != x.type.dtype:
        y = ctx.call("cast", [y], {"dtype": x.type.dtype})
    return [y, mean, inv]


def batch_norm_training(ctx, node):
    """BatchNormalization with training_mode=1: normalize with the batch statistics (mean and
    population variance over every axis but 1) and return the updated running statistics
    ``running * momentum + batch * (1 - momentum)``."""
    x, scale, bias, mean, var = (node.input(k) for k in range(5))
    r = x.type.ndim
    axes = [0] + list(range(2, r))
    eps = float(node.attr("epsilon", 1e-5))
    mom = float(node.attr("momentum", 0.9))
    dt = x.type.dtype
    bmean = ctx.call("mean", [x], {"axes": axes, "keepdims": 1})
    d = ctx.call("subtract", [x, bmean])
    bvar = ctx.call("mean", [ctx.call("multiply", [d, d])], {"axes": axes, "keepdims": 1})
    shp = [1, x.type.shape[1]] + [1] * (r - 2)
    inv = ctx.call("reciprocal", [ctx.call("sqrt", [ctx.call("add", [
        bvar, ctx.const(np.asarray(eps, dt))])])])
    y = ctx.call("multiply", [d, ctx.call("multiply", [inv, ctx.call("reshape", [scale], {
        "newshape": shp})])])
    y = ctx.call("add", [y, ctx.call("reshape", [bias], {"newshape": shp})])
    c = [x.type.shape[1]]

    def running(run, batch):
        b = ctx.call("reshape", [batch], {"newshape": c})
        if b.type.dtype != run.type.dtype:
            b = ctx.call("cast", [b], {"dtype": run.type.dtype})
        m = ctx.const(np.asarray(mom, run.type.dtype))
        return ctx.call("add", [ctx.call("multiply", [run, m]),
                                ctx.call("multiply", [b, ctx.const(np.asarray(1 - mom,
                                                                              run.type.dtype))])])
    return [y, running(mean, bmean), running(var, bvar)]


def dropout_training(ctx, node):
    """Dropout with training_mode true: ``y = x * mask / (1 - ratio)``. The mask is drawn when
    the graph is built (one per compiled model): with the ``seed`` attribute, as
    ``numpy.random.RandomState(seed).uniform(size) >= ratio`` (the draws the ONNX suite's
    reference makes), else from fresh entropy."""
    x = node.input(0)
    r = node.input(1)
    ratio = float(ctx.require_constant(r, "input 1 (ratio)").reshape(-1)[0]) if r is not None \
        else 0.5
    if not 0 <= ratio < 1:
        raise ShapeMismatchError(f"Dropout ratio must be in [0, 1), got {ratio}")
    shape = x.type.shape
    if ratio == 0:
        mask = np.ones(shape, bool)
    else:
        seed = node.attr("seed")
        rs = np.random.RandomState(int(seed)) if seed is not None else np.random.RandomState()
        mask = rs.uniform(0, 1.0, shape) >= ratio
    m = ctx.const(mask)
    scale = ctx.const((mask / (1 - ratio)).astype(x.type.dtype))
    y = ctx.call("multiply", [x, scale]) if ratio else ctx.call("copy", [x])
    outs = [y]
    if len(node.outputs) > 1 and node.outputs[1]:
        outs.append(m)
    return outs
