"""Converters for ONNX image operators: Resize (opsets 10-19), Upsample (1-9), GridSample, Col2Im.

Resize is separable: each resized axis becomes one ``image.resize`` (``ember.ops.image``), in
ascending axis order. ``scales``, ``sizes`` and ``roi`` are shape-like: they must be known at
compile time (a run-time value makes the staged executor specialize on it).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from ...ops.registry import normalize_axis
from . import converter


def _optional_const(ctx, v, what):
    """The constant value of optional input ``v``, or ``None`` when omitted or empty."""
    if v is None:
        return None
    c = ctx.require_constant(v, what)
    return None if c.size == 0 else np.asarray(c)


def resize_plan(in_shape, scales, sizes, axes, policy: str):
    """Per axis ``(axis, scale, size)`` of a resize (ONNX Resize-19 rules): with ``sizes`` the
    scale is ``size / length`` (``keep_aspect_ratio_policy`` ``not_larger``/``not_smaller``
    use one scale for all ``axes`` and round the sizes half up), with ``scales`` the size is
    ``floor(scale * length)``."""
    r = len(in_shape)
    axes = list(range(r)) if axes is None else [normalize_axis(int(a), r, "Resize axes: ")
                                               for a in axes]
    if len(set(axes)) != len(axes):
        raise ShapeMismatchError(f"Resize axes {axes} repeat an axis")
    plan = []
    if sizes is not None:
        sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(axes):
            raise ShapeMismatchError(f"Resize sizes {sizes} must have one value per axis "
                                     f"({len(axes)})")
        sc = [sizes[k] / in_shape[a] for k, a in enumerate(axes)]
        if policy in ("not_larger", "not_smaller"):
            s = min(sc) if policy == "not_larger" else max(sc)
            return [(a, s, int(s * in_shape[a] + 0.5)) for a in axes]
        if policy != "stretch":
            raise UnsupportedOpError(f"Resize keep_aspect_ratio_policy={policy!r} is not one of "
                                     f"stretch, not_larger, not_smaller")
        return [(a, sc[k], sizes[k]) for k, a in enumerate(axes)]
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    if len(scales) != len(axes):
        raise ShapeMismatchError(f"Resize scales {scales} must have one value per axis "
                                 f"({len(axes)})")
    for s in scales:
        if not s > 0:
            raise ShapeMismatchError(f"Resize scales {scales} must be positive")
    for k, a in enumerate(axes):
        plan.append((a, scales[k], int(scales[k] * in_shape[a])))
    return plan


def emit_resize(ctx, x, plan, attrs: dict, roi=None):
    """Chain one ``image.resize`` per axis of ``plan`` that changes anything."""
    r = x.type.ndim
    y = x
    for a, scale, size in sorted(plan):
        ctm = attrs["coordinate_transformation_mode"]
        axis_roi = None
        if ctm == "tf_crop_and_resize":
            axis_roi = [float(roi[a]), float(roi[a + r])]
        if (size == x.type.shape[a] and math.isclose(scale, 1.0)
                and (axis_roi is None or axis_roi == [0.0, 1.0])):
            continue
        axis_attrs = dict(attrs, axis=a, scale=float(scale), size=int(size), roi=axis_roi)
        if attrs.get("nearest_mode") == "simple":  # opsets < 11: per axis
            axis_attrs["nearest_mode"] = "ceil" if scale < 1 else "floor"
        y = ctx.call("image.resize", [y], axis_attrs)
    return y if y is not x else ctx.call("copy", [x])


def _mode(node, mode):
    mode = mode.decode() if isinstance(mode, bytes) else mode
    mode = {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic"):
        raise UnsupportedOpError(f"{node.op_type} mode={mode!r} is not one of nearest, linear, "
                                 f"cubic")
    return mode


def _legacy_attrs(node, mode, plan):
    """Upsample-1..9 and Resize-10: asymmetric coordinates; nearest floors along an axis that
    is upsampled and rounds up along one that is downsampled (the 'simple' rule of those
    opsets)."""
    return {"mode": mode, "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "simple"}


@converter("Resize", since=10)
def resize(ctx, node):
    """ONNX Resize-10+: ``image.resize`` with ``scales`` or ``sizes`` (constant inputs), ``axes``
    and ``keep_aspect_ratio_policy`` (18+), the coordinate transformation, nearest and cubic modes,
    ``roi`` for tf_crop_and_resize, and ``antialias`` (18+).

    Raises:
        ShapeMismatchError: missing scales (Resize-10), not exactly one of scales/sizes, a missing
            or wrong-length roi.
        UnsupportedOpError: an unknown mode, tf_half_pixel_for_nn at opset 13+, antialias with
            nearest.
        RuntimeValueError: scales, sizes or roi only known at run time."""
    x = node.input(0)
    r = x.type.ndim
    mode = _mode(node, node.attr("mode", "nearest"))
    if node.opset < 11:
        scales = _optional_const(ctx, node.input(1), "input 1 (scales)")
        if scales is None:
            raise ShapeMismatchError("Resize-10 needs scales")
        plan = resize_plan(x.type.shape, scales, None, None, "stretch")
        return [emit_resize(ctx, x, plan, _legacy_attrs(node, mode, plan))]
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    if ctm == "tf_half_pixel_for_nn" and node.opset >= 13:
        raise UnsupportedOpError("Resize coordinate_transformation_mode='tf_half_pixel_for_nn' "
                                 "exists in opsets 11 and 12 only")
    scales = _optional_const(ctx, node.input(2), "input 2 (scales)")
    sizes = _optional_const(ctx, node.input(3), "input 3 (sizes)")
    if (scales is None) == (sizes is None):
        raise ShapeMismatchError("Resize needs exactly one of scales and sizes")
    axes = node.attr("axes") if node.opset >= 18 else None
    plan = resize_plan(x.type.shape, scales, sizes, axes,
                       node.attr("keep_aspect_ratio_policy", "stretch"))
    roi = None
    if ctm == "tf_crop_and_resize":
        roi = _optional_const(ctx, node.input(1), "input 1 (roi)")
        if roi is None:
            raise ShapeMismatchError("Resize tf_crop_and_resize needs roi")
        roi = [float(v) for v in roi.reshape(-1)]
        if axes is not None:
            full = [0.0] * r + [1.0] * r
            n = len(axes)
            for k, a in enumerate(axes):
                a = normalize_axis(int(a), r)
                full[a], full[a + r] = roi[k], roi[n + k]
            roi = full
        if len(roi) != 2 * r:
            raise ShapeMismatchError(f"Resize roi {roi} must have 2 x rank ({2 * r}) values")
    antialias = int(node.attr("antialias", 0)) if node.opset >= 18 else 0
    if antialias and mode == "nearest":
        raise UnsupportedOpError("Resize antialias=1 is not defined for mode='nearest'")
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm,
             "nearest_mode": node.attr("nearest_mode", "round_prefer_floor"),
             "cubic_coeff_a": float(node.attr("cubic_coeff_a", -0.75)),
             "exclude_outside": int(node.attr("exclude_outside", 0)),
             "extrapolation_value": float(node.attr("extrapolation_value", 0.0)),
             "antialias": antialias}
    return [emit_resize(ctx, x, plan, attrs, roi)]


@converter("Upsample", since=1)
def upsample(ctx, node):
    """ONNX Upsample (deprecated at 10): a Resize with ``scales`` (``height_scale``/``width_scale``
    at opset 1, attribute at 7-8, input from 9) and the legacy asymmetric coordinates.

    Raises:
        ShapeMismatchError: non-4-D input at opset 1, or Upsample-7 without ``scales``.
        UnsupportedOpError: mode cubic or unknown.
        RuntimeValueError: scales only known at run time."""
    x = node.input(0)
    mode = _mode(node, node.attr("mode", "nearest"))
    if mode == "cubic":
        raise UnsupportedOpError("Upsample mode='cubic' is not defined (nearest or linear)")
    if node.opset < 7:  # Upsample-1: 4-D NCHW with height_scale / width_scale
        if x.type.ndim != 4:
            raise ShapeMismatchError(f"Upsample-1 takes 4-D NCHW input, got {x.type.shape}")
        scales = [1.0, 1.0, float(node.attr("height_scale")), float(node.attr("width_scale"))]
    elif node.opset < 9:
        scales = node.attr("scales")
        if scales is None:
            raise ShapeMismatchError("Upsample-7 needs the scales attribute")
    else:
        scales = _optional_const(ctx, node.input(1), "input 1 (scales)")
    plan = resize_plan(x.type.shape, np.asarray(scales, np.float64), None, None, "stretch")
    return [emit_resize(ctx, x, plan, _legacy_attrs(node, mode, plan))]


@converter("GridSample", since=16)
def grid_sample(ctx, node):
    """ONNX GridSample-16/20: ``image.grid_sample(x, grid)`` with mode (bilinear/bicubic renamed
    linear/cubic), ``padding_mode``, ``align_corners``.

    Raises:
        ShapeMismatchError: non-4-D input before opset 20."""
    mode = node.attr("mode", "bilinear" if node.opset < 20 else "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    x = node.input(0)
    if node.opset < 20 and x.type.ndim != 4:
        raise ShapeMismatchError(f"GridSample-{node.opset} takes 4-D input, got {x.type.shape}")
    return [ctx.call("image.grid_sample", [x, node.input(1)], {
        "mode": mode, "padding_mode": node.attr("padding_mode", "zeros"),
        "align_corners": int(node.attr("align_corners", 0))})]


@converter("Col2Im", since=18)
def col2im(ctx, node):
    """ONNX Col2Im-18: ``image.col2im`` of ``(N, C * prod(block_shape), L)`` columns into an ``(N,
    C, *image_shape)`` image (constant ``image_shape``, ``block_shape``).

    Raises:
        RuntimeValueError: image_shape or block_shape only known at run time."""
    img = ctx.require_constant(node.input(1), "input 1 (image_shape)")
    blk = ctx.require_constant(node.input(2), "input 2 (block_shape)")
    return [ctx.call("image.col2im", [node.input(0)], {
        "image_shape": [int(v) for v in img.reshape(-1)],
        "block_shape": [int(v) for v in blk.reshape(-1)],
        "dilations": node.attr("dilations"), "pads": node.attr("pads"),
        "strides": node.attr("strides")})]
