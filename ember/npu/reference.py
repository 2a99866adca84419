"""Integer NumPy references of the NPU's layers, written from the semantics alone (no tiling,
no packing): int8 x int8 products summed exactly, the int32 accumulator's wrap-around, then the
requantize of :class:`ember.npu.intrin.Requant` (exact rounding shift, clip to int8).
"""

from __future__ import annotations

import numpy as np


def _wrap32(a):
    return a.astype(np.int64).astype(np.int32).astype(np.int64)


def requantize(acc, multiplier=1, shift=0, relu=False):
    """int32 accumulators (int64 array holding int32 values) -> int8, see ``Requant``."""
    p = _wrap32(acc.astype(np.int64) * int(multiplier))
    if shift:
        p = (p + (1 << (shift - 1))) >> shift
    return np.clip(p, 0 if relu else -128, 127).astype(np.int8)


def conv2d_int8(x, w, bias=None, strides=(1, 1), pads=(0, 0, 0, 0), multiplier=1, shift=0,
                relu=False):
    """``x`` (1, C, H, W) int8, ``w`` (O, C, KH, KW) int8, ``bias`` (O,) int32 or None,
    ``pads`` (top, left, bottom, right) -> (1, O, OH, OW) int8 (ONNX Conv + requantize)."""
    _, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    sh, sw = strides
    pt, pl, pb, pr = pads
    xp = np.zeros((c, h + pt + pb, wd + pl + pr), np.int64)
    xp[:, pt:pt + h, pl:pl + wd] = x[0]
    oh = (h + pt + pb - kh) // sh + 1
    ow = (wd + pl + pr - kw) // sw + 1
    acc = np.zeros((o, oh, ow), np.int64)
    wl = w.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
            acc += np.einsum("oc,chw->ohw", wl[:, :, i, j], patch)
    acc = _wrap32(acc)
    if bias is not None:
        acc = _wrap32(acc + bias.astype(np.int64)[:, None, None])
    return requantize(acc, multiplier, shift, relu)[None]


def dense_int8(x, w, bias=None, multiplier=1, shift=0, relu=False):
    """``x`` (N, K) int8, ``w`` (M, K) int8, ``bias`` (M,) int32 -> (N, M) int8."""
    acc = _wrap32(x.astype(np.int64) @ w.astype(np.int64).T)
    if bias is not None:
        acc = _wrap32(acc + bias.astype(np.int64)[None, :])
    return requantize(acc, multiplier, shift, relu)
