"""ONNX equivalents of the image operators for ``test_op_references.py`` (imported at its end)."""

from __future__ import annotations

import numpy as np

from test_op_references import ONNX_OPS, onnx_op


@onnx_op("image.resize", "Resize", 19)
def _resize(xs, a):
    x = xs[0]
    r = x.ndim
    roi = np.zeros(0, np.float32)
    if a["roi"] is not None:
        roi = np.asarray(a["roi"], np.float32)
    scale, n = a["scale"], x.shape[a["axis"]]
    by_size = not (float(np.float32(scale)) == scale and int(scale * n) == a["size"])
    scales = np.zeros(0, np.float32) if by_size else np.asarray([a["scale"]], np.float32)
    sizes = np.asarray([a["size"]], np.int64) if by_size else None
    attrs = {k: a[k] for k in ("mode", "coordinate_transformation_mode", "nearest_mode",
                               "cubic_coeff_a", "exclude_outside", "extrapolation_value",
                               "antialias")}
    attrs["axes"] = [a["axis"] % r]
    if a["mode"] == "linear" and not a["antialias"]:
        attrs["exclude_outside"] = 0  # a no-op there (an edge tap equals its clamped copy)
    return [x, roi, scales, sizes], attrs


ONNX_OPS["image.grid_sample"] = ("GridSample", 22, lambda xs, a: (xs, dict(a)))


@onnx_op("image.col2im", "Col2Im", 18)
def _col2im(xs, a):
    return [xs[0], np.asarray(a["image_shape"], np.int64), np.asarray(a["block_shape"], np.int64)], \
        {k: a[k] for k in ("dilations", "pads", "strides")}


__all__ = ["ONNX_OPS"]
