"""Image operators: resampling along one axis (ONNX Resize/Upsample, applied axis by axis), grid
sampling (ONNX GridSample) and column-to-image folding (ONNX Col2Im).

``image.resize`` resamples ONE axis of any-rank tensor to ``size`` elements. ONNX Resize is
separable, so the frontend chains one ``image.resize`` per resized axis. The output position ``o``
maps to a source coordinate ``x(o)`` by the ``coordinate_transformation_mode`` (computed in double
precision, as the ONNX reference does, so that nearest-neighbour ties round the same way):

=====================  =====================================================================
half_pixel             ``(o + 0.5) / scale - 0.5``
half_pixel_symmetric   ``L/2 * (1 - size / (scale * L)) + (o + 0.5) / scale - 0.5``
pytorch_half_pixel     ``(o + 0.5) / scale - 0.5``, or ``-0.5`` when ``scale * L == 1``
align_corners          ``o * (L - 1) / (scale * L - 1)``, or ``0`` when ``scale * L == 1``
asymmetric             ``o / scale``
tf_crop_and_resize     ``o * (e - s) * (L - 1) / (scale * L - 1) + s * (L - 1)`` (``roi=[s, e]``);
                       positions outside ``[0, L - 1]`` are ``extrapolation_value``
tf_half_pixel_for_nn   ``(o + 0.5) / scale`` (Resize-11/12)
=====================  =====================================================================

``nearest`` picks one input (``round_prefer_floor``, ``round_prefer_ceil``, ``floor``, ``ceil``);
``linear`` and ``cubic`` weight the taps ``j`` around ``x`` by ``K(s' * (j - x))`` with the
triangle or the cubic convolution kernel (coefficient ``cubic_coeff_a``), where ``s' =
min(scale, 1)`` with ``antialias`` (the kernel widens when downsampling) and 1 otherwise. Taps
outside ``[0, L)`` read the edge value, or get weight 0 with ``exclude_outside``; the weights are
normalized to sum to 1. Integer tensors are rounded (half to even) and saturated.
"""

from __future__ import annotations

import math

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import is_float
from .registry import REQUIRED, OpPattern, normalize_axis, register_op

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
RESIZE_MODES = ("nearest", "linear", "cubic")


def _acc_dtype(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


# resize ----------------------------------------------------------------------------------------

def _resize_type(types, attrs):
    x = types[0]
    where = "image.resize: "
    ax = normalize_axis(attrs["axis"], x.ndim, where)
    if attrs["mode"] not in RESIZE_MODES:
        raise ShapeMismatchError(f"{where}mode {attrs['mode']!r} is not one of {RESIZE_MODES}")
    if attrs["coordinate_transformation_mode"] not in COORD_MODES:
        raise ShapeMismatchError(f"{where}coordinate_transformation_mode "
                                 f"{attrs['coordinate_transformation_mode']!r} is not one of "
                                 f"{COORD_MODES}")
    if attrs["nearest_mode"] not in NEAREST_MODES:
        raise ShapeMismatchError(f"{where}nearest_mode {attrs['nearest_mode']!r} is not one of "
                                 f"{NEAREST_MODES}")
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and \
            (attrs["roi"] is None or len(attrs["roi"]) != 2):
        raise ShapeMismatchError(f"{where}tf_crop_and_resize needs roi=[start, end]")
    if int(attrs["size"]) < 0 or not float(attrs["scale"]) > 0:
        raise ShapeMismatchError(f"{where}size {attrs['size']} and scale {attrs['scale']} must be "
                                 f"non-negative and positive")
    if x.dtype == "bool":
        raise ShapeMismatchError(f"{where}cannot resample a bool tensor")
    shape = list(x.shape)
    shape[ax] = int(attrs["size"])
    return [TensorType(tuple(shape), x.dtype)]


def _taps(attrs) -> tuple[int, float]:
    """(number of taps, kernel scale s') of a resize (nearest: the two taps around x)."""
    scale = float(attrs["scale"])
    s = min(scale, 1.0) if attrs["antialias"] else 1.0
    half = 2.0 if attrs["mode"] == "cubic" else 1.0
    start = math.floor(-half / s) + 1
    return 2 - 2 * start, s


def _resize_ref(xs, attrs):
    """Dense (size x L) weight matrix applied along the axis (an independent formulation of the
    gather-and-weight kernel)."""
    x = xs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    L, O = x.shape[ax], int(attrs["size"])
    scale = float(attrs["scale"])
    ctm = attrs["coordinate_transformation_mode"]
    o = np.arange(O, dtype=np.float64)
    out_w = scale * L
    if ctm == "half_pixel":
        xo = (o + 0.5) / scale - 0.5
    elif ctm == "tf_half_pixel_for_nn":
        xo = (o + 0.5) / scale
    elif ctm == "half_pixel_symmetric":
        xo = L / 2 * (1 - O / out_w) + (o + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        xo = (o + 0.5) / scale - 0.5 if out_w != 1 else np.full(O, -0.5)
    elif ctm == "align_corners":
        xo = o * (L - 1) / (out_w - 1) if out_w != 1 else np.zeros(O)
    elif ctm == "asymmetric":
        xo = o / scale
    else:
        s0, s1 = (float(v) for v in attrs["roi"])
        xo = (o * (s1 - s0) * (L - 1) / (out_w - 1) if out_w != 1
              else np.full(O, (s1 - s0) * (L - 1) / 2)) + s0 * (L - 1)
    W = np.zeros((O, L), np.float64)
    mode = attrs["mode"]
    for k in range(O):
        xk = xo[k]
        n, s = _taps(attrs)
        first = math.ceil(xk) - n // 2
        js = np.arange(first, first + n)
        d = np.abs((js - xk) * s)
        if mode == "nearest":
            nm = attrs["nearest_mode"]
            if xk == math.floor(xk):
                j = xk
            elif nm == "round_prefer_floor":
                j = math.floor(xk) if xk - math.floor(xk) <= 0.5 else math.ceil(xk)
            elif nm == "round_prefer_ceil":
                j = math.floor(xk) if xk - math.floor(xk) < 0.5 else math.ceil(xk)
            else:
                j = (math.floor if nm == "floor" else math.ceil)(xk)
            w = (js == j).astype(np.float64)
        elif mode == "linear":
            w = np.clip(1 - d, 0, 1)
        else:
            a = float(attrs["cubic_coeff_a"])
            w = np.where(d <= 1, (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1,
                         np.where(d < 2, a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a, 0.0))
        if attrs["exclude_outside"]:
            w = np.where((js < 0) | (js >= L), 0.0, w)
        tot = w.sum()
        w = w / (tot if tot != 0 else 1.0)
        for jj, ww in zip(js, w):
            W[k, min(max(jj, 0), L - 1)] += ww
    y = np.moveaxis(np.tensordot(W, np.moveaxis(x.astype(np.float64), ax, 0), axes=(1, 0)), 0, ax)
    if ctm == "tf_crop_and_resize":
        outside = (xo < 0) | (xo > L - 1)
        y[(slice(None),) * ax + (outside,)] = float(attrs["extrapolation_value"])
    return [_to_dtype(y, x.dtype)]


def _to_dtype(y: np.ndarray, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.clip(np.rint(y), info.min, info.max).astype(dt)
    return y.astype(dt)


def _coord(o, L, O, attrs):
    """Source coordinate (float64 expression) of output index ``o``."""
    scale = float(attrs["scale"])
    ctm = attrs["coordinate_transformation_mode"]
    f = te.cast("float64", o)
    out_w = scale * L
    if ctm == "half_pixel":
        return (f + 0.5) / scale - 0.5
    if ctm == "tf_half_pixel_for_nn":
        return (f + 0.5) / scale
    if ctm == "half_pixel_symmetric":
        return L / 2 * (1 - O / out_w) + (f + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return (f + 0.5) / scale - 0.5 if out_w != 1 else te.const(-0.5, "float64")
    if ctm == "align_corners":
        return f * float(L - 1) / (out_w - 1) if out_w != 1 else te.const(0.0, "float64")
    if ctm == "asymmetric":
        return f / scale
    s0, s1 = (float(v) for v in attrs["roi"])
    base = f * (s1 - s0) * float(L - 1) / (out_w - 1) if out_w != 1 else \
        te.const((s1 - s0) * (L - 1) / 2, "float64")
    return base + s0 * (L - 1)


def _finish(v, dtype: str):
    """Accumulated value ``v`` stored as ``dtype`` (integers rounded and saturated)."""
    if is_float(dtype):
        return te.cast(dtype, v)
    info = np.iinfo(np.dtype(dtype))
    r = te.minimum(te.maximum(te.round(te.cast("float64", v)), float(info.min)), float(info.max))
    return te.cast(dtype, r)


def _resize_compute(inputs, attrs, out_types):
    x = inputs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    L = x.shape[ax]
    oshape = out_types[0].shape
    O = oshape[ax]
    mode = attrs["mode"]
    acc = _acc_dtype(x.dtype)
    ctm = attrs["coordinate_transformation_mode"]

    def at(i, j):
        return tuple(j if k == ax else v for k, v in enumerate(i))

    def clamp(j):
        return te.minimum(te.maximum(j, 0), L - 1)

    def extrapolate(i, value):
        if ctm != "tf_crop_and_resize":
            return value
        c = _coord(i[ax], L, O, attrs)
        inside = te.all_of(te.ge(c, 0.0), te.le(c, float(L - 1)))
        return te.select(inside, value, te.const(float(attrs["extrapolation_value"]), x.dtype)
                         if is_float(x.dtype) else _finish(te.const(
                             float(attrs["extrapolation_value"]), "float64"), x.dtype))

    def nearest(c):
        nm = attrs["nearest_mode"]
        if nm == "round_prefer_floor":
            j = te.ceil(c - 0.5)
        elif nm == "round_prefer_ceil":
            j = te.floor(c + 0.5)
        else:
            j = (te.floor if nm == "floor" else te.ceil)(c)
        return te.cast("int64", j)

    if mode == "nearest" and not attrs["exclude_outside"]:
        def fnear(*i):
            j = nearest(_coord(i[ax], L, O, attrs))
            return extrapolate(i, x[at(i, clamp(j))])
        return [te.compute(oshape, fnear, name="resize_nearest")]

    n, s = _taps(attrs)
    a = float(attrs["cubic_coeff_a"])
    excl = bool(attrs["exclude_outside"])

    def tap(o, t):
        """(index, weight) of tap ``t`` (an expression) for output index ``o``."""
        c = _coord(o, L, O, attrs)
        j = te.cast("int64", te.ceil(c)) - n // 2 + t
        d = te.abs((te.cast("float64", j) - c) * s)
        if mode == "nearest":  # with exclude_outside: a chosen tap outside the input gives 0
            w = te.select(te.eq(j, nearest(c)), te.const(1.0, "float64"),
                          te.const(0.0, "float64"))
        elif mode == "linear":
            w = te.maximum(1.0 - d, 0.0)
        else:
            near = ((d * (a + 2) - (a + 3)) * d) * d + 1.0
            far = ((d * a - 5 * a) * d + 8 * a) * d - 4 * a
            w = te.select(te.le(d, 1.0), near, te.select(te.lt(d, 2.0), far,
                                                         te.const(0.0, "float64")))
        if excl:
            w = te.select(te.all_of(te.ge(j, 0), te.lt(j, L)), w, te.const(0.0, "float64"))
        return j, w

    rw = te.reduce_axis(n, "rw")
    wsum = te.compute((O,), lambda o: te.sum(tap(o, rw.var)[1], axis=rw), name="resize_wsum")
    rt = te.reduce_axis(n, "rt")

    def fsum(*i):
        j, w = tap(i[ax], rt.var)
        return te.sum(te.cast(acc, w) * te.cast(acc, x[at(i, clamp(j))]), axis=rt)
    num = te.compute(oshape, fsum, name="resize_acc")

    def fout(*i):
        den = te.cast(acc, wsum[i[ax]])
        return extrapolate(i, _finish(num[i] / te.select(te.eq(den, 0.0), te.const(1.0, acc),
                                                            den), x.dtype))
    return [te.compute(oshape, fout, name="resize")]


register_op("image.resize", infer_type=_resize_type, reference=_resize_ref,
            compute=_resize_compute, pattern=OpPattern.OPAQUE,
            attrs={"axis": REQUIRED, "size": REQUIRED, "scale": REQUIRED, "mode": "nearest",
                   "coordinate_transformation_mode": "half_pixel",
                   "nearest_mode": "round_prefer_floor", "cubic_coeff_a": -0.75,
                   "exclude_outside": 0, "extrapolation_value": 0.0, "antialias": 0,
                   "roi": None},
            doc="resample one axis to `size` elements: nearest/linear/cubic (antialias, "
                "exclude_outside), every ONNX coordinate transformation (ONNX Resize-19 along "
                "one axis; Resize/Upsample chain one per axis)")


# grid_sample -----------------------------------------------------------------------------------

GRID_MODES = ("nearest", "linear", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
GRID_CUBIC_A = -0.75


def _gs_type(types, attrs):
    x, g = types
    where = "image.grid_sample: "
    r = x.ndim - 2
    if r < 1 or g.ndim != x.ndim or g.shape[0] != x.shape[0] or g.shape[-1] != r:
        raise ShapeMismatchError(f"{where}input {x.shape} needs a grid (N, *out, {max(r, 1)}) "
                                 f"of the same rank, got {g.shape}")
    if not is_float(x.dtype) or not is_float(g.dtype):
        raise ShapeMismatchError(f"{where}input and grid must be floating point, got {x.dtype}, "
                                 f"{g.dtype}")
    if attrs["mode"] not in GRID_MODES or attrs["padding_mode"] not in PADDING_MODES:
        raise ShapeMismatchError(f"{where}mode {attrs['mode']!r} / padding_mode "
                                 f"{attrs['padding_mode']!r} not in {GRID_MODES} / "
                                 f"{PADDING_MODES}")
    return [TensorType((x.shape[0], x.shape[1]) + tuple(g.shape[1:-1]), x.dtype)]


def _np_reflect(v, lo, hi):
    rng = hi - lo
    if rng == 0:
        return np.full_like(v, lo)
    below, above = v < lo, v > hi
    dx = np.where(below, lo - v, np.where(above, v - hi, 0.0))
    n = np.trunc(dx / rng)
    r = dx - n * rng
    even = np.fmod(n, 2) == 0
    from_lo = np.where(even, lo + r, hi - r)
    from_hi = np.where(even, hi - r, lo + r)
    return np.where(below, from_lo, np.where(above, from_hi, v))


def _gs_ref(xs, attrs):
    x, grid = xs
    N, C = x.shape[:2]
    dims = x.shape[2:]
    r = len(dims)
    mode, pad, align = attrs["mode"], attrs["padding_mode"], attrs["align_corners"]
    out_sp = grid.shape[1:-1]
    g = grid.astype(np.float64).reshape(N, -1, r)[..., ::-1]  # (N, P, r), dim order
    taps, weights = [], []
    for d, L in enumerate(dims):
        v = (g[..., d] + 1) / 2 * (L - 1) if align else ((g[..., d] + 1) * L - 1) / 2
        lo, hi = (0.0, L - 1.0) if align else (-0.5, L - 0.5)
        if mode == "nearest":
            v = np.rint(v)
        if pad == "border":
            v = np.where((v < lo) | (v > hi), np.clip(v, 0, L - 1), v)
        elif pad == "reflection":
            v = _np_reflect(v, lo, hi)
        if mode == "nearest":
            idx, w = np.trunc(v)[..., None], np.ones(v.shape + (1,))
        else:
            base = np.floor(v)
            t = v - base
            if mode == "linear":
                idx = base[..., None] + np.arange(2)
                w = np.stack([1 - t, t], -1)
            else:
                idx = base[..., None] + np.arange(-1, 3)
                dist = np.abs(idx - v[..., None])
                a = GRID_CUBIC_A
                w = np.where(dist <= 1, ((a + 2) * dist - (a + 3)) * dist * dist + 1,
                             ((a * dist - 5 * a) * dist + 8 * a) * dist - 4 * a)
        idx = idx.astype(np.int64)
        if pad == "zeros":
            w = np.where((idx >= 0) & (idx < L), w, 0.0)
            idx = np.clip(idx, 0, L - 1)
        elif pad == "border":
            idx = np.clip(idx, 0, L - 1)
        else:
            idx = np.clip(_np_reflect(idx.astype(np.float64), lo, hi).astype(np.int64), 0, L - 1)
        taps.append(idx)
        weights.append(w)
    P = g.shape[1]
    y = np.zeros((N, C, P))
    xf = x.astype(np.float64)
    for combo in np.ndindex(*[t.shape[-1] for t in taps]):
        w = np.ones((N, P))
        for d in range(r):
            w = w * weights[d][..., combo[d]]
        for n in range(N):
            ix = tuple(taps[d][n, :, combo[d]] for d in range(r))
            y[n] += w[n] * xf[n][(slice(None),) + ix]
    return [y.reshape((N, C) + tuple(out_sp)).astype(x.dtype)]


def _te_reflect(v, lo: float, hi: float):
    """``v`` reflected into ``[lo, hi]`` (ONNX GridSample's reflect) as one triangle wave:
    ``m = fmod(|v - lo|, 2 (hi - lo))``, then ``lo + m`` or ``lo + 2 (hi - lo) - m``. Equal to
    the spec's two-sided form (count the reflections from the nearer edge, flip on odd) but
    ``v`` occurs once: the two-sided form read it six times, and GridSample nests a reflect
    in every tap of every dimension, so its expression tree (which the printers write out as a
    tree) grew to 0.5 MB of WGSL for one 2-d sample and lavapipe's shader compile timed out."""
    rng = hi - lo
    if rng == 0:
        return te.const(lo, v.dtype)
    period = te.const(2.0 * rng, v.dtype)
    m = te.fmod(te.abs(v - lo), period)
    return lo + te.select(te.le(m, rng), m, period - m)


def _gs_compute(inputs, attrs, out_types):
    x, grid = inputs
    dims = x.shape[2:]
    r = len(dims)
    mode, pad, align = attrs["mode"], attrs["padding_mode"], attrs["align_corners"]
    acc = _acc_dtype(x.dtype)
    ntap = {"nearest": 1, "linear": 2, "cubic": 4}[mode]
    first = -1 if mode == "cubic" else 0
    rk = [te.reduce_axis(ntap, f"gs{d}") for d in range(r)]

    def coord(n, o, d):
        L = dims[d]
        gv = te.cast(acc, grid[(n, *o, r - 1 - d)])
        v = (gv + 1.0) / 2.0 * float(L - 1) if align else ((gv + 1.0) * float(L) - 1.0) / 2.0
        lo, hi = (0.0, L - 1.0) if align else (-0.5, L - 0.5)
        if mode == "nearest":
            v = te.round(v)
        if pad == "border":
            v = te.select(te.lt(v, lo) | te.gt(v, hi),
                          te.minimum(te.maximum(v, 0.0), float(L - 1)), v)
        elif pad == "reflection":
            v = _te_reflect(v, lo, hi)
        return v, lo, hi

    def tap(n, o, d, t):
        """(index, weight, in range) of tap ``t`` along dim ``d``."""
        L = dims[d]
        v, lo, hi = coord(n, o, d)
        if mode == "nearest":
            j = te.cast("int64", te.trunc(v))
            w = te.const(1.0, acc)
        else:
            base = te.floor(v)
            j = te.cast("int64", base) + first + t
            dist = te.abs(te.cast(acc, j) - v)
            if mode == "linear":
                w = 1.0 - dist
            else:
                a = GRID_CUBIC_A
                w = te.select(te.le(dist, 1.0), ((dist * (a + 2) - (a + 3)) * dist) * dist + 1.0,
                              ((dist * a - 5 * a) * dist + 8 * a) * dist - 4 * a)
        ok = te.all_of(te.ge(j, 0), te.lt(j, L))
        if pad == "reflection":
            j = te.cast("int64", _te_reflect(te.cast(acc, j), lo, hi))
        return te.minimum(te.maximum(j, 0), L - 1), w, ok

    def f(n, c, *o):
        idx, w, oks = [], None, []
        for d in range(r):
            j, wd, ok = tap(n, o, d, rk[d].var)
            idx.append(j)
            w = wd if w is None else w * wd
            oks.append(ok)
        val = w * te.cast(acc, x[(n, c, *idx)])
        if pad == "zeros":
            val = te.select(te.all_of(*oks), val, te.const(0.0, acc))
        return te.sum(val, axis=rk)
    y = te.compute(out_types[0].shape, f, name="grid_sample_acc")
    if y.dtype == x.dtype:
        return [y]
    return [te.compute(y.shape, lambda *i: te.cast(x.dtype, y[i]), name="grid_sample")]


register_op("image.grid_sample", infer_type=_gs_type, reference=_gs_ref, compute=_gs_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(2, 2),
            attrs={"mode": "linear", "padding_mode": "zeros", "align_corners": 0},
            doc="sample x (N, C, *sp) at the normalized coordinates of grid (N, *out, r) (last "
                "dim in (x, y, z) order): nearest (half to even) / linear / cubic (a=-0.75), "
                "zeros / border / reflection padding (ONNX GridSample-22, any rank)")


# col2im ----------------------------------------------------------------------------------------

def _c2i_geom(attrs):
    img, blk = list(attrs["image_shape"]), list(attrs["block_shape"])
    r = len(img)
    dil = list(attrs["dilations"] or [1] * r)
    pads = list(attrs["pads"] or [0] * (2 * r))
    st = list(attrs["strides"] or [1] * r)
    nb = [(img[d] + pads[d] + pads[d + r] - dil[d] * (blk[d] - 1) - 1) // st[d] + 1
          for d in range(r)]
    return img, blk, dil, pads, st, nb


def _c2i_type(types, attrs):
    x = types[0]
    where = "image.col2im: "
    img, blk, dil, pads, st, nb = _c2i_geom(attrs)
    r = len(img)
    if len(blk) != r or len(dil) != r or len(st) != r or len(pads) != 2 * r:
        raise ShapeMismatchError(f"{where}image_shape {img}, block_shape {blk}, dilations, "
                                 f"strides and pads (2x) must have one value per spatial dim")
    K = int(np.prod(blk))
    if x.ndim != 3 or x.shape[1] % max(K, 1) or x.shape[2] != int(np.prod(nb)) or \
            min(nb, default=1) <= 0:
        raise ShapeMismatchError(f"{where}input {x.shape} must be (N, C x {K}, {int(np.prod(nb))})"
                                 f" for image {img}, blocks {blk}")
    return [TensorType((x.shape[0], x.shape[1] // K) + tuple(img), x.dtype)]


def _c2i_ref(xs, attrs):
    """Scatter-add of every block column into the padded image, then crop."""
    x = xs[0]
    img, blk, dil, pads, st, nb = _c2i_geom(attrs)
    r = len(img)
    N, CK, _ = x.shape
    K = int(np.prod(blk))
    C = CK // K
    padded = np.zeros((N, C) + tuple(img[d] + pads[d] + pads[d + r] for d in range(r)),
                      np.float64)
    cols = x.astype(np.float64).reshape((N, C, K) + tuple(nb))
    for ki, k in enumerate(np.ndindex(*blk)):
        sl = tuple(slice(k[d] * dil[d], k[d] * dil[d] + st[d] * (nb[d] - 1) + 1, st[d])
                   for d in range(r))
        padded[(slice(None), slice(None)) + sl] += cols[:, :, ki]
    crop = tuple(slice(pads[d], pads[d] + img[d]) for d in range(r))
    return [padded[(slice(None), slice(None)) + crop].astype(x.dtype)]


def _c2i_compute(inputs, attrs, out_types):
    x = inputs[0]
    img, blk, dil, pads, st, nb = _c2i_geom(attrs)
    r = len(img)
    K = int(np.prod(blk))
    rk = [te.reduce_axis(b, f"c2i{d}") for d, b in enumerate(blk)]

    def f(n, c, *p):
        conds, q = [], []
        for d in range(r):
            t = p[d] + pads[d] - rk[d].var * dil[d]
            conds += [te.ge(t, 0), te.eq(te.truncmod(t, st[d]), 0),
                      te.lt(te.truncdiv(t, st[d]), nb[d])]
            q.append(te.truncdiv(t, st[d]))
        kflat, qflat = rk[0].var, q[0]
        for d in range(1, r):
            kflat = kflat * blk[d] + rk[d].var
            qflat = qflat * nb[d] + q[d]
        return te.sum(x[n, c * K + kflat, qflat], axis=rk, where=te.all_of(*conds))
    return [te.compute(out_types[0].shape, f, name="col2im")]


register_op("image.col2im", infer_type=_c2i_type, reference=_c2i_ref, compute=_c2i_compute,
            pattern=OpPattern.OPAQUE,
            attrs={"image_shape": REQUIRED, "block_shape": REQUIRED, "dilations": None,
                   "pads": None, "strides": None},
            doc="fold sliding-block columns (N, C x prod(block), blocks) back into an image "
                "(N, C, *image_shape), summing overlaps (ONNX Col2Im-18)")
