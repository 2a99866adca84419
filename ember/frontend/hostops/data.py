"""Operators whose output shape depends on the input data, run on the host: ``NonZero``,
``Unique``, ``Compress``, ``NonMaxSuppression``."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError
from . import host_op


@host_op("NonZero")
def nonzero(h, ins):
    """Host kernel for ONNX NonZero: int64 ``(ndim, count)`` indices of the non-zero elements,
    row-major order (numpy ``nonzero``)."""
    x = np.asarray(ins[0])
    if x.ndim == 0:
        return [np.zeros((0, int(bool(x))), np.int64) if not x else np.zeros((0, 1), np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


@host_op("Compress")
def compress(h, ins):
    """Host kernel for ONNX Compress: the slices along ``axis`` (the flattened input when absent)
    where ``condition`` is true; a condition longer than the axis is truncated."""
    x, c = np.asarray(ins[0]), np.asarray(ins[1]).astype(bool)
    axis = h.attr("axis")
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    axis = axis + x.ndim if axis < 0 else axis
    if c.size > x.shape[axis]:
        c = c[:x.shape[axis]]
    return [np.compress(c, x, axis=axis)]


@host_op("Unique")
def unique(h, ins):
    """Host kernel for ONNX Unique: ``[Y, indices, inverse_indices, counts]`` of the flattened
    input or of slices along ``axis``; sorted (``sorted=1``) or in order of first occurrence; index
    outputs int64."""
    x = np.asarray(ins[0])
    axis = h.attr("axis")
    sorted_ = h.attr("sorted", 1)
    if axis is None:
        flat = x.reshape(-1)
        u, idx, inv, cnt = np.unique(flat, return_index=True, return_inverse=True,
                                     return_counts=True)
    else:
        axis = axis + x.ndim if axis < 0 else axis
        u, idx, inv, cnt = np.unique(x, axis=axis, return_index=True, return_inverse=True,
                                     return_counts=True)
    inv = inv.reshape(-1)
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        u = np.take(u, order, axis=0 if axis is None else axis)
        idx, cnt, inv = idx[order], cnt[order], rank[inv]
    return [u, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)]


def _iou(a, b, center):
    if center:
        a = np.array([a[1] - a[3] / 2, a[0] - a[2] / 2, a[1] + a[3] / 2, a[0] + a[2] / 2])
        b = np.array([b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2])
    ay1, ay2 = min(a[0], a[2]), max(a[0], a[2])
    ax1, ax2 = min(a[1], a[3]), max(a[1], a[3])
    by1, by2 = min(b[0], b[2]), max(b[0], b[2])
    bx1, bx2 = min(b[1], b[3]), max(b[1], b[3])
    ih = max(0.0, min(ay2, by2) - max(ay1, by1))
    iw = max(0.0, min(ax2, bx2) - max(ax1, bx1))
    inter = ih * iw
    union = (ay2 - ay1) * (ax2 - ax1) + (by2 - by1) * (bx2 - bx1) - inter
    return inter / union if union > 0 else 0.0


@host_op("NonMaxSuppression")
def non_max_suppression(h, ins):
    """Host kernel for ONNX NonMaxSuppression: per batch and class, boxes by descending score above
    ``score_threshold``, greedily dropping those with IoU above ``iou_threshold`` with a kept box,
    at most ``max_output_boxes_per_class`` (default 0); boxes corner (``center_point_box=0``) or
    center form. Returns int64 ``(n, 3)`` ``[batch, class, box]`` rows.

    Raises:
        ShapeMismatchError: boxes or scores not rank 3."""
    boxes, scores = np.asarray(ins[0], np.float64), np.asarray(ins[1], np.float64)
    get = lambda k, d: (np.asarray(ins[k]).reshape(-1)[0] if len(ins) > k and ins[k] is not None  # noqa: E731
                        and np.asarray(ins[k]).size else d)
    max_out = int(get(2, 0))
    iou_th = float(get(3, 0.0))
    score_th = get(4, None)
    center = h.attr("center_point_box", 0)
    if boxes.ndim != 3 or scores.ndim != 3:
        raise ShapeMismatchError("NonMaxSuppression boxes/scores must be rank 3")
    out = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = sorted(range(len(s)), key=lambda i: (-s[i], i))
            if score_th is not None:
                order = [i for i in order if s[i] > float(score_th)]
            keep: list[int] = []
            for i in order:
                if len(keep) >= max_out:
                    break
                if all(_iou(boxes[b, i], boxes[b, j], center) <= iou_th for j in keep):
                    keep.append(i)
            out += [[b, c, i] for i in keep]
    return [np.array(out, np.int64).reshape(-1, 3)]
