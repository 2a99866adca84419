"""Calibration observers: the range ``[lo, hi]`` of one activation tensor over a calibration set,
and the quantization parameters of a range.

Methods (``calibrate=``):
    ``minmax``: the smallest and largest value seen.
    ``percentile``: the ``PERCENTILE`` / ``100 - PERCENTILE`` percentiles of the values seen (a
        sample of at most ``MAX_SAMPLES`` per tensor), clipping rare outliers.
    ``entropy``: the clipping threshold that minimizes the KL divergence between the histogram
        of ``|x|`` (``BINS`` bins) and its 128-level quantization (Migacz, "8-bit Inference with
        TensorRT", GTC 2017).
"""

from __future__ import annotations

import numpy as np

METHODS = ("minmax", "percentile", "entropy")
PERCENTILE = 99.99
MAX_SAMPLES = 1 << 20
BINS = 2048
LEVELS = 128


class Observer:
    """Accumulates one tensor's values over the calibration feeds (``update``) and gives its
    range (``range()``) for ``method``."""

    def __init__(self, method: str, seed: int = 0):
        self.method = method
        self.lo, self.hi = np.inf, -np.inf
        self.samples: list[np.ndarray] = []
        self.n = 0
        self.rng = np.random.default_rng(seed)

    def update(self, x: np.ndarray) -> None:
        """Add the values of ``x`` (float32, any shape)."""
        x = np.asarray(x, np.float32).reshape(-1)
        if x.size == 0:
            return
        self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))
        if self.method != "minmax":
            keep = MAX_SAMPLES // 64
            if x.size > keep:
                x = self.rng.choice(x, keep, replace=False)
            self.samples.append(x)
            self.n += x.size

    def range(self) -> tuple[float, float]:
        """``(lo, hi)`` with ``lo <= 0 <= hi`` (zero must be exact)."""
        lo, hi = self.lo, self.hi
        if self.method == "percentile" and self.samples:
            s = np.concatenate(self.samples)
            lo, hi = float(np.percentile(s, 100 - PERCENTILE)), float(np.percentile(s, PERCENTILE))
        elif self.method == "entropy" and self.samples:
            t = entropy_threshold(np.concatenate(self.samples))
            lo, hi = max(lo, -t), min(hi, t)
        return min(lo, 0.0), max(hi, 0.0)


def entropy_threshold(x: np.ndarray) -> float:
    """The ``|x|`` clipping threshold minimizing KL(P || Q) over ``BINS``-bin histograms, ``Q``
    being ``P`` clipped and merged into ``LEVELS`` levels (TensorRT's entropy calibration)."""
    a = np.abs(x.astype(np.float64))
    amax = float(a.max()) if a.size else 0.0
    if amax == 0.0:
        return 0.0
    hist, edges = np.histogram(a, BINS, (0.0, amax))
    hist = hist.astype(np.float64)
    best, best_kl = BINS, np.inf
    for i in range(LEVELS, BINS + 1, 16):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        nz = p > 0
        # merge into LEVELS levels, spread each level evenly over its non-empty bins
        idx = (np.arange(i) * LEVELS) // i
        lev = np.bincount(idx, weights=hist[:i], minlength=LEVELS)
        cnt = np.bincount(idx, weights=nz.astype(np.float64), minlength=LEVELS)
        q = np.where(nz, lev[idx] / np.maximum(cnt[idx], 1), 0.0)
        ps, qs = p.sum(), q.sum()
        if ps == 0 or qs == 0:
            continue
        pn, qn = p[nz] / ps, q[nz] / qs
        kl = float(np.sum(pn * np.log(pn / np.maximum(qn, 1e-12))))
        if kl < best_kl:
            best, best_kl = i, kl
    return float(edges[best])


def affine_uint8(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    """Asymmetric uint8 ``(scale, zero_point)`` of ``[lo, hi]`` (``lo <= 0 <= hi``):
    ``scale = (hi - lo) / 255``, ``zero_point = round(-lo / scale)``; a zero range gets scale
    1 (ONNX QuantizeLinear's form, as onnxruntime's quantizer writes it)."""
    scale = (hi - lo) / 255.0
    if not scale > 0:
        return np.float32(1.0), np.uint8(0)
    zp = int(np.clip(np.rint(-lo / scale), 0, 255))
    return np.float32(scale), np.uint8(zp)


def symmetric_int8(w: np.ndarray, axis: int | None) -> np.ndarray:
    """Symmetric int8 weight scales (``max |w| / 127``) per ``axis`` slice, or one for the
    tensor (``axis=None``); zero slices get scale 1."""
    a = np.abs(w.astype(np.float64))
    if axis is None:
        m = np.array(a.max() if a.size else 0.0)
    else:
        m = np.moveaxis(a, axis, 0).reshape(w.shape[axis], -1).max(1)
    s = m / 127.0
    return np.where(s > 0, s, 1.0).astype(np.float32)


def quantize_weight(w: np.ndarray, scale: np.ndarray, axis: int | None) -> np.ndarray:
    """``w`` (float32) quantized to int8 with ``scale`` (per ``axis`` or a scalar), round half
    to even, saturated to [-127, 127]."""
    s = scale
    if axis is not None and np.ndim(scale):
        shape = [1] * w.ndim
        shape[axis] = -1
        s = scale.reshape(shape)
    return np.clip(np.rint(w / s), -127, 127).astype(np.int8)
