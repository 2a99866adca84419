"""ONNX equivalents of the data-driven spatial operators for ``test_op_references.py``
(imported at its end)."""

from __future__ import annotations

import numpy as np

from test_op_references import ONNX_OPS, onnx_op


@onnx_op("nn.max_unpool", "MaxUnpool", 11)
def _max_unpool(xs, a):
    x = xs[0]
    kernel = [m - s + 1 for m, s in zip(a["inferred_shape"][2:], x.shape[2:])]
    out = None if a["output_shape"] is None else np.asarray(a["output_shape"], np.int64)
    return [x, xs[1], out], {"kernel_shape": kernel}


@onnx_op("image.roi_align", "RoiAlign", 16)
def _roi_align(xs, a):
    attrs = {k: a[k] for k in ("output_height", "output_width", "sampling_ratio",
                               "spatial_scale", "mode")}
    attrs["coordinate_transformation_mode"] = "half_pixel" if a["half_pixel"] else \
        "output_half_pixel"
    return xs, attrs


@onnx_op("nn.deform_conv", "DeformConv", 19)
def _deform_conv(xs, a):
    return xs, {k: a[k] for k in ("strides", "pads", "group", "offset_group")}


__all__ = ["ONNX_OPS"]
