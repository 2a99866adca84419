"""Converters for ONNX Resize (opsets 10-19+) and Upsample.

Resize is separable: each resized axis maps output position ``j`` to a source coordinate
``x(j)`` (``coordinate_transformation_mode``) and reads a few neighbours of it with weights
(nearest: one tap; linear: 2; cubic: 4; antialias: a wider kernel scaled by the downsampling
factor). Because shapes, scales and sizes are known when the graph is built, the taps and weights
of every axis are computed here, in NumPy, following the operator's specification; the graph
then gathers the taps (``take``) and contracts them with the weights (``multiply`` + ``sum``),
one axis after the other, so the whole resize is compiled. ``tf_crop_and_resize`` positions
outside the input take ``extrapolation_value`` (``where``). Integer inputs are resized in float32,
rounded half to even and clamped to their type (as the specification's reference does).
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from ...ops.registry import normalize_axis
from . import converter

MODES = ("nearest", "linear", "cubic")
COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


# per-axis taps -----------------------------------------------------------------------------------

def source_coords(mode: str, out_len: int, in_len: int, scale: float, roi=None):
    """Source coordinate of every output position (float64) and, for tf_crop_and_resize, which
    positions fall outside the input (else ``None``)."""
    y = np.arange(out_len, dtype=np.float64)
    out_f = scale * in_len
    outside = None
    if mode == "align_corners":
        x = np.zeros(out_len) if out_f == 1 else y * (in_len - 1) / (out_f - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        if out_f == 1:
            x = np.full(out_len, (end - start) * (in_len - 1) / 2)
        else:
            x = y * (end - start) * (in_len - 1) / (out_f - 1)
        x = x + start * (in_len - 1)
        outside = (x < 0) | (x > in_len - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if out_f == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / out_f)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise UnsupportedOpError(f"coordinate_transformation_mode {mode!r} is not one of "
                                 f"{COORD_MODES}")
    return x, outside


def _cubic(ratio, a):
    r = ratio
    s = 1 - ratio
    return np.stack([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                     ((a + 2) * r - (a + 3)) * r * r + 1,
                     ((a + 2) * s - (a + 3)) * s * s + 1,
                     ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a], -1)


def _cubic_kernel(x, a):
    x = np.abs(x)
    return np.where(x <= 1, (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1,
                    np.where(x < 2, a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a, 0.0))


def axis_taps(x, in_len: int, scale: float, mode: str, nearest_mode: str, cubic_a: float,
              antialias: bool, exclude_outside: bool):
    """``(indices (out, n) int64, weights (out, n) float64)`` of one axis: the ``n`` input
    positions nearest the source coordinate (ties to the lower one, edges clamped) and their
    interpolation weights."""
    xi = np.floor(x)
    ratio = np.where(x == xi, 1.0, x - xi)
    if mode == "nearest":
        integer = x == xi
        if nearest_mode == "round_prefer_floor":
            up = ratio > 0.5
        elif nearest_mode == "round_prefer_ceil":
            up = ratio >= 0.5
        elif nearest_mode == "floor":
            up = np.zeros(x.shape, bool)
        elif nearest_mode == "ceil":
            up = np.ones(x.shape, bool)
        else:
            raise UnsupportedOpError(f"nearest_mode {nearest_mode!r} is not one of "
                                     f"{NEAREST_MODES}")
        up = np.where(integer, True, up)
        w = np.stack([~up, up], -1).astype(np.float64)
    elif mode == "linear":
        if antialias:
            s = min(scale, 1.0)
            start = int(np.floor(-1 / s) + 1)
            k = np.arange(start, start + 2 - 2 * start)
            w = np.clip(1 - np.abs((k[None, :] - ratio[:, None]) * s), 0, 1)
            w = w / w.sum(-1, keepdims=True)
        else:
            w = np.stack([1 - ratio, ratio], -1)
    elif mode == "cubic":
        if antialias:
            s = min(scale, 1.0)
            start = int(np.floor(-2 / s) + 1)
            k = np.arange(start, 2 - start)
            w = _cubic_kernel(s * (k[None, :] - ratio[:, None]), cubic_a)
            w = w / w.sum(-1, keepdims=True)
        else:
            w = _cubic(ratio, cubic_a)
    else:
        raise UnsupportedOpError(f"Resize mode {mode!r} is not one of {MODES}")
    n = w.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        off = np.where(frac <= 0.5, base, base + 1)
    idx = (p + off).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
        tot = w.sum(-1, keepdims=True)
        w = w / np.where(tot == 0, 1.0, tot)
    return np.clip(idx, 0, in_len - 1), w


# graph construction -----------------------------------------------------------------------------

def resize_graph(ctx, x, out_sizes, scales, *, mode, coord, nearest_mode="round_prefer_floor",
                 cubic_a=-0.75, antialias=False, exclude_outside=False, extrapolation=0.0,
                 roi=None):
    """Graph values resizing ``x`` to ``out_sizes`` (per-axis ``scales`` for the coordinate
    maps, ``roi`` as ``[starts..., ends...]`` for tf_crop_and_resize)."""
    shape = list(x.type.shape)
    r = len(shape)
    dtype = x.type.dtype
    is_int = dtype.startswith(("int", "uint")) or dtype == "bool"
    work = "float64" if dtype == "float64" else "float32"
    y = x if dtype == work or mode == "nearest" else ctx.call("cast", [x], {"dtype": work})
    for a in range(r):
        out_len, in_len, s = int(out_sizes[a]), shape[a], float(scales[a])
        a_roi = None if roi is None else (float(roi[a]), float(roi[a + r]))
        if out_len == in_len and np.isclose(s, 1.0) and (
                a_roi is None or (np.isclose(a_roi[0], 0) and np.isclose(a_roi[1], 1))):
            continue
        if out_len == 0 or in_len == 0:
            raise ShapeMismatchError(f"Resize of an empty axis ({in_len} -> {out_len})")
        xs, outside = source_coords(coord, out_len, in_len, s, a_roi)
        idx, w = axis_taps(xs, in_len, s, mode, nearest_mode, cubic_a, antialias,
                           exclude_outside)
        cur = list(y.type.shape)
        if mode == "nearest":
            pick = idx[np.arange(out_len), np.argmax(w, -1)]
            y = ctx.call("take", [y, ctx.const(pick)], {"axis": a})
        else:
            n = idx.shape[1]
            g = ctx.call("take", [y, ctx.const(idx.reshape(-1))], {"axis": a})
            g = ctx.call("reshape", [g], {"newshape": cur[:a] + [out_len, n] + cur[a + 1:]})
            wt = ctx.const(w.astype(work).reshape([out_len, n] + [1] * (r - a - 1)))
            y = ctx.call("sum", [ctx.call("multiply", [g, wt])],
                         {"axes": [a + 1], "keepdims": 0})
        if outside is not None and outside.any():
            mask = ctx.const(outside.reshape([out_len] + [1] * (r - a - 1)))
            fill = ctx.const(np.asarray(extrapolation, dtype=y.type.dtype))
            y = ctx.call("where", [mask, fill, y])
    if y.type.dtype != dtype:
        if is_int:
            y = ctx.call("round", [y])
            info = np.iinfo(np.dtype(dtype)) if dtype != "bool" else None
            if info is not None:
                y = ctx.call("clip", [y], {"min": float(info.min), "max": float(info.max)})
        y = ctx.call("cast", [y], {"dtype": dtype})
    elif y is x:
        y = ctx.call("copy", [x])
    return y


def _floats(a):
    return [float(v) for v in np.asarray(a).reshape(-1)]


@converter("Resize", since=10)
def resize(ctx, node):
    x = node.input(0)
    shape = list(x.type.shape)
    r = len(shape)
    if node.opset < 11:
        scales = _floats(ctx.require_constant(node.input(1), "input 1 (scales)"))
        roi = sizes = None
        coord = "asymmetric"
        nearest_mode = "floor" if node.attr("mode", "nearest") == "nearest" else "round_prefer_floor"
        axes = None
    else:
        roi_v, sc_v, sz_v = node.input(1), node.input(2), node.input(3)
        roi = _floats(ctx.require_constant(roi_v, "input 1 (roi)")) if roi_v is not None else None
        scales = _floats(ctx.require_constant(sc_v, "input 2 (scales)")) if sc_v is not None \
            else None
        sizes = [int(v) for v in np.asarray(ctx.require_constant(sz_v, "input 3 (sizes)"))
                 .reshape(-1)] if sz_v is not None else None
        if scales is not None and len(scales) == 0:
            scales = None
        if sizes is not None and len(sizes) == 0:
            sizes = None
        if roi is not None and len(roi) == 0:
            roi = None
        coord = node.attr("coordinate_transformation_mode", "half_pixel")
        nearest_mode = node.attr("nearest_mode", "round_prefer_floor")
        axes = node.attr("axes")
    mode = node.attr("mode", "nearest")
    if (scales is None) == (sizes is None):
        raise ShapeMismatchError("Resize needs exactly one of scales and sizes")
    axes = list(range(r)) if axes is None else [normalize_axis(a, r) for a in axes]
    full_scales = [1.0] * r
    full_sizes = list(shape)
    full_roi = None
    if roi is not None:
        if len(roi) != 2 * len(axes):
            raise ShapeMismatchError(f"Resize roi has {len(roi)} values, expected "
                                     f"{2 * len(axes)}")
        full_roi = [0.0] * r + [1.0] * r
        for k, a in enumerate(axes):
            full_roi[a], full_roi[r + a] = roi[k], roi[len(axes) + k]
    if sizes is not None:
        if len(sizes) != len(axes):
            raise ShapeMismatchError(f"Resize sizes {sizes} do not match axes {axes}")
        for k, a in enumerate(axes):
            full_sizes[a] = sizes[k]
        full_scales = [full_sizes[a] / shape[a] for a in range(r)]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            if policy not in ("not_larger", "not_smaller"):
                raise UnsupportedOpError(f"keep_aspect_ratio_policy {policy!r}")
            s = pick(full_scales[a] for a in axes)
            full_scales = [s if a in axes else 1.0 for a in range(r)]
            full_sizes = [int(s * shape[a] + 0.5) if a in axes else shape[a] for a in range(r)]
    else:
        if len(scales) != len(axes):
            raise ShapeMismatchError(f"Resize scales {scales} do not match axes {axes}")
        for k, a in enumerate(axes):
            full_scales[a] = scales[k]
        full_sizes = [int(np.floor(full_scales[a] * shape[a])) for a in range(r)]
    if coord == "tf_crop_and_resize" and full_roi is None:
        raise ShapeMismatchError("Resize tf_crop_and_resize needs roi")
    return [resize_graph(ctx, x, full_sizes, full_scales, mode=mode, coord=coord,
                         nearest_mode=nearest_mode, cubic_a=float(node.attr("cubic_coeff_a", -0.75)),
                         antialias=bool(node.attr("antialias", 0)),
                         exclude_outside=bool(node.attr("exclude_outside", 0)),
                         extrapolation=float(node.attr("extrapolation_value", 0.0)),
                         roi=full_roi if coord == "tf_crop_and_resize" else None)]


@converter("Upsample", since=1)
def upsample(ctx, node):
    x = node.input(0)
    shape = list(x.type.shape)
    if node.opset >= 9:
        scales = _floats(ctx.require_constant(node.input(1), "input 1 (scales)"))
    elif node.opset >= 7:
        scales = [float(s) for s in node.attr("scales")]
    else:
        scales = [1.0, 1.0, float(node.attr("height_scale")), float(node.attr("width_scale"))]
    mode = node.attr("mode", "nearest")
    mode = "linear" if mode == "bilinear" else mode
    sizes = [int(np.floor(s * d)) for s, d in zip(scales, shape)]
    return [resize_graph(ctx, x, sizes, scales, mode=mode, coord="asymmetric",
                         nearest_mode="floor")]
