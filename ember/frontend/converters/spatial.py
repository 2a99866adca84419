"""Converters for ONNX spatial operators that move or sample values by data: MaxUnpool (9, 11),
RoiAlign (10, 16) and DeformConv (19)."""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from . import converter


@converter("MaxUnpool", since=9)
def max_unpool(ctx, node):
    """ONNX MaxUnpool-9/11: ``nn.max_unpool(x, indices)`` scattering each value to its flat index
    in an output of the inferred shape or the constant ``output_shape`` (input 2); indices cast to
    int64.

    Raises:
        ShapeMismatchError: rank of x does not match the kernel.
        RuntimeValueError: output_shape only known at run time."""
    x, idx = node.input(0), node.input(1)
    kernel = list(node.attr("kernel_shape"))
    n = len(kernel)
    if x.type.ndim != n + 2:
        raise ShapeMismatchError(f"MaxUnpool input {x.type.shape} does not match kernel {kernel}")
    strides = list(node.attr("strides") or [1] * n)
    pads = list(node.attr("pads") or [0] * (2 * n))
    sp = x.type.shape[2:]
    inferred = list(x.type.shape[:2]) + [(sp[i] - 1) * strides[i] - pads[i] - pads[n + i]
                                         + kernel[i] for i in range(n)]
    out = None
    if node.input(2) is not None:
        out = [int(v) for v in ctx.require_constant(node.input(2), "input 2 (output_shape)")
               .reshape(-1)]
    if idx.type.dtype != "int64":
        idx = ctx.call("cast", [idx], {"dtype": "int64"})
    return [ctx.call("nn.max_unpool", [x, idx], {"inferred_shape": inferred,
                                                 "output_shape": out})]


@converter("RoiAlign", since=10)
def roi_align(ctx, node):
    """ONNX RoiAlign-10/16: ``image.roi_align(x, rois, batch_indices)`` with
    ``output_height``/``output_width``, ``sampling_ratio``, ``spatial_scale`` and avg/max ``mode``;
    ``sampling_ratio=0`` needs constant rois (the adaptive grid is bounded from them).

    Raises:
        UnsupportedOpError: a coordinate_transformation_mode other than
            half_pixel/output_half_pixel.
        RuntimeValueError: rois only known at run time with sampling_ratio=0."""
    x, rois, bidx = node.input(0), node.input(1), node.input(2)
    ctm = node.attr("coordinate_transformation_mode", "half_pixel") if node.opset >= 16 \
        else "output_half_pixel"
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise UnsupportedOpError(f"RoiAlign coordinate_transformation_mode={ctm!r} is not "
                                 f"half_pixel or output_half_pixel")
    oh, ow = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    ratio = int(node.attr("sampling_ratio", 0))
    scale = float(node.attr("spatial_scale", 1.0))
    max_grid = 1
    if ratio <= 0:  # the grid adapts to each roi: bound it by the rois' values
        r = ctx.require_constant(rois, "input 1 (rois, for sampling_ratio=0)").astype(np.float64)
        off = 0.5 if ctm == "half_pixel" else 0.0
        h = r[:, 3] * scale - off - (r[:, 1] * scale - off)
        w = r[:, 2] * scale - off - (r[:, 0] * scale - off)
        if ctm != "half_pixel":
            h, w = np.maximum(h, 1.0), np.maximum(w, 1.0)
        max_grid = max([1] + [int(math.ceil(v)) for v in np.concatenate([h / oh, w / ow])])
    return [ctx.call("image.roi_align", [x, rois, bidx], {
        "output_height": oh, "output_width": ow, "sampling_ratio": max(ratio, 0),
        "spatial_scale": scale, "mode": node.attr("mode", "avg"),
        "half_pixel": int(ctm == "half_pixel"), "max_grid": max_grid})]


@converter("DeformConv", since=19)
def deform_conv(ctx, node):
    """ONNX DeformConv-19: ``nn.deform_conv(x, w, offset[, B][, mask])`` for 4-D ``x`` ``(N, C, H,
    W)``; a zero bias is supplied when only the mask is given.

    Raises:
        UnsupportedOpError: an input that is not 4-D."""
    x, w, off, b, mask = (node.input(k) for k in range(5))
    if x.type.ndim != 4:
        raise UnsupportedOpError(f"DeformConv is supported for 2-D images (4-D input), got "
                                 f"{x.type.shape}")
    args = [x, w, off]
    if b is None and mask is not None:
        b = ctx.const(np.zeros(w.type.shape[0], x.type.dtype))
    if b is not None:
        args.append(b)
    if mask is not None:
        args.append(mask)
    return [ctx.call("nn.deform_conv", args, {
        "strides": node.attr("strides"), "dilations": node.attr("dilations"),
        "pads": node.attr("pads"), "group": int(node.attr("group", 1)),
        "offset_group": int(node.attr("offset_group", 1))})]
