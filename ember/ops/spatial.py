"""Spatial operators that move or sample values by data: max unpooling (ONNX MaxUnpool), RoI
align (ONNX RoiAlign) and deformable convolution (ONNX DeformConv).

Layouts are ONNX's: activations ``(N, C, *spatial)``. Indices and coordinates are read at run
time: MaxUnpool's index input is checked first (an out-of-range index is an ``InputError`` naming
the node); the kernels clamp every computed index inside its buffer (never an out-of-bounds
access).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import is_float
from .imperative import imperative_kernel
from .registry import REQUIRED, OpPattern, register_op


# max_unpool ------------------------------------------------------------------------------------

def _unpool_type(types, attrs):
    x, idx = types
    inferred = tuple(attrs["inferred_shape"])
    out = tuple(attrs["output_shape"] or inferred)
    if idx.shape != x.shape or idx.dtype not in ("int32", "int64"):
        raise ShapeMismatchError(f"nn.max_unpool: indices {idx.shape} {idx.dtype} must be int64 "
                                 f"of the input's shape {x.shape}")
    if len(inferred) != x.ndim or len(out) != x.ndim or out[:2] != x.shape[:2] or \
            inferred[:2] != x.shape[:2]:
        raise ShapeMismatchError(f"nn.max_unpool: shapes {inferred} / {out} do not fit input "
                                 f"{x.shape}")
    return [TensorType(out, x.dtype)]


def _unpool_ref(xs, attrs):
    x, idx = xs
    inferred = tuple(attrs["inferred_shape"])
    out = tuple(attrs["output_shape"] or inferred)
    flat = np.zeros(int(np.prod(inferred)), x.dtype)
    flat[np.asarray(idx, np.int64).reshape(-1)] = x.reshape(-1)
    y = np.zeros(out, x.dtype)
    common = tuple(slice(0, min(a, b)) for a, b in zip(inferred, out))
    y[common] = flat.reshape(inferred)[common]
    return [y]


def _unpool_compute(inputs, attrs, out_types):
    inferred = tuple(attrs["inferred_shape"])
    out = out_types[0].shape
    total = int(np.prod(inferred))

    def body(k):
        x, idx = k.inputs
        y, = k.outputs
        zero = k.loop(out, lambda *i: k.store(y, i, te.const(0, y.dtype)))

        def scatter(*i):
            j = te.minimum(te.maximum(te.cast("int64", k.read(idx, i)), 0), total - 1)
            coords, rest = [], j
            for d in reversed(inferred):
                coords.append(te.truncmod(rest, d))
                rest = te.truncdiv(rest, d)
            coords.reverse()
            inside = te.all_of(*[te.lt(c, n) for c, n, m in zip(coords, out, inferred) if n < m])
            return k.if_(inside, k.store(y, coords, k.read(x, i)))
        return k.seq(zero, k.loop(inputs[0].shape, scatter))
    return imperative_kernel(inputs, out_types, body, "max_unpool",
                             checks=[te.IndexCheck(inputs[1], [(0, total - 1)],
                                                   "MaxUnpool index")])


register_op("nn.max_unpool", infer_type=_unpool_type, reference=_unpool_ref,
            compute=_unpool_compute, pattern=OpPattern.OPAQUE, num_inputs=(2, 2),
            attrs={"inferred_shape": REQUIRED, "output_shape": None},
            doc="scatter x into zeros at the flat indices (over inferred_shape, as MaxPool's "
                "Indices output gives them), then place that in the corner of output_shape "
                "(ONNX MaxUnpool)")


# roi_align -------------------------------------------------------------------------------------

def _roi_type(types, attrs):
    x, rois, bidx = types
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or bidx.shape != (rois.shape[0],) \
            or not is_float(x.dtype):
        raise ShapeMismatchError(f"image.roi_align: needs X (N, C, H, W) float, rois (R, 4) and "
                                 f"batch_indices (R,), got {x.shape}, {rois.shape}, {bidx.shape}")
    if attrs["mode"] not in ("avg", "max"):
        raise ShapeMismatchError(f"image.roi_align: mode {attrs['mode']!r} is not avg or max")
    return [TensorType((rois.shape[0], x.shape[1], attrs["output_height"],
                        attrs["output_width"]), x.dtype)]


def _roi_box(r, attrs):
    """(start_h, start_w, bin_h, bin_w, grid_h, grid_w) of one roi (numpy, double)."""
    off = 0.5 if attrs["half_pixel"] else 0.0
    sc = float(attrs["spatial_scale"])
    x0, y0, x1, y1 = (float(v) * sc - off for v in r)
    rw, rh = x1 - x0, y1 - y0
    if not attrs["half_pixel"]:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    oh, ow = attrs["output_height"], attrs["output_width"]
    s = attrs["sampling_ratio"]
    gh = s if s > 0 else int(np.ceil(rh / oh))
    gw = s if s > 0 else int(np.ceil(rw / ow))
    return y0, x0, rh / oh, rw / ow, gh, gw


def _roi_ref(xs, attrs):
    """Loops over rois, bins and samples with explicit bilinear interpolation."""
    x, rois, bidx = xs
    N, C, H, W = x.shape
    oh, ow = attrs["output_height"], attrs["output_width"]
    y = np.zeros((rois.shape[0], C, oh, ow))
    xd = x.astype(np.float64)
    for r in range(rois.shape[0]):
        img = xd[int(bidx[r])]
        sh, sw, bh, bw, gh, gw = _roi_box(rois[r], attrs)
        count = max(gh * gw, 1)
        for ph in range(oh):
            for pw in range(ow):
                vals = []
                for iy in range(gh):
                    yy = sh + ph * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        xx = sw + pw * bw + (ix + 0.5) * bw / gw
                        if yy < -1.0 or yy > H or xx < -1.0 or xx > W:
                            vals.append(np.zeros((4, C)))
                            continue
                        yy, xx = max(yy, 0.0), max(xx, 0.0)
                        yl, xl = int(yy), int(xx)
                        if yl >= H - 1:
                            yl = yh = H - 1
                            yy = float(yl)
                        else:
                            yh = yl + 1
                        if xl >= W - 1:
                            xl = xh = W - 1
                            xx = float(xl)
                        else:
                            xh = xl + 1
                        ly, lx = yy - yl, xx - xl
                        hy, hx = 1 - ly, 1 - lx
                        vals.append(np.stack([hy * hx * img[:, yl, xl], hy * lx * img[:, yl, xh],
                                              ly * hx * img[:, yh, xl], ly * lx * img[:, yh, xh]]))
                v = np.stack(vals)  # (samples, 4, C)
                if attrs["mode"] == "avg":
                    y[r, :, ph, pw] = v.sum(axis=(0, 1)) / count
                else:
                    y[r, :, ph, pw] = v.max(axis=1).max(axis=0)
    return [y.astype(x.dtype)]


def _roi_compute(inputs, attrs, out_types):
    x, rois, bidx = inputs
    N, C, H, W = x.shape
    oh, ow = attrs["output_height"], attrs["output_width"]
    off = 0.5 if attrs["half_pixel"] else 0.0
    sc = float(attrs["spatial_scale"])
    s = attrs["sampling_ratio"]
    G = s if s > 0 else int(attrs["max_grid"])
    ry, rx = te.reduce_axis(G, "ry"), te.reduce_axis(G, "rx")
    acc = "float64"

    def box(r):
        def coord(c):
            return te.cast(acc, rois[r, c]) * sc - off
        x0, y0, x1, y1 = coord(0), coord(1), coord(2), coord(3)
        rw, rh = x1 - x0, y1 - y0
        if not attrs["half_pixel"]:
            rw, rh = te.maximum(rw, 1.0), te.maximum(rh, 1.0)
        bh, bw = rh / float(oh), rw / float(ow)
        if s > 0:
            gh = gw = te.const(float(s), acc)
        else:
            gh, gw = te.ceil(rh / float(oh)), te.ceil(rw / float(ow))
        return y0, x0, bh, bw, gh, gw

    def samples(r, c, ph, pw, combine):
        """The four weighted corner values of sample (ry, rx), combined (sum or max)."""
        y0, x0, bh, bw, gh, gw = box(r)
        b = te.minimum(te.maximum(te.cast("int64", bidx[r]), 0), N - 1)
        yy = y0 + te.cast(acc, ph) * bh + (te.cast(acc, ry.var) + 0.5) * bh / gh
        xx = x0 + te.cast(acc, pw) * bw + (te.cast(acc, rx.var) + 0.5) * bw / gw
        outside = te.lt(yy, -1.0) | te.gt(yy, float(H)) | te.lt(xx, -1.0) | te.gt(xx, float(W))
        yy, xx = te.maximum(yy, 0.0), te.maximum(xx, 0.0)
        yl0, xl0 = te.cast("int64", yy), te.cast("int64", xx)
        ytop, xtop = te.ge(yl0, H - 1), te.ge(xl0, W - 1)
        yl = te.select(ytop, te.const(H - 1, "int64"), yl0)
        xl = te.select(xtop, te.const(W - 1, "int64"), xl0)
        yh = te.select(ytop, te.const(H - 1, "int64"), yl0 + 1)
        xh = te.select(xtop, te.const(W - 1, "int64"), xl0 + 1)
        ly = te.select(ytop, te.const(0.0, acc), yy - te.cast(acc, yl))
        lx = te.select(xtop, te.const(0.0, acc), xx - te.cast(acc, xl))
        hy, hx = 1.0 - ly, 1.0 - lx

        def v(i, j):
            return te.cast(acc, x[b, c, i, j])
        terms = [hy * hx * v(yl, xl), hy * lx * v(yl, xh), ly * hx * v(yh, xl),
                 ly * lx * v(yh, xh)]
        val = combine(terms)
        valid = te.all_of(te.lt(te.cast(acc, ry.var), gh), te.lt(te.cast(acc, rx.var), gw))
        return te.select(outside, te.const(0.0, acc), val), valid

    if attrs["mode"] == "avg":
        def favg(r, c, ph, pw):
            val, valid = samples(r, c, ph, pw, lambda t: t[0] + t[1] + t[2] + t[3])
            return te.sum(val, axis=[ry, rx], where=valid)
        tot = te.compute(out_types[0].shape, favg, name="roi_align_sum")

        def fcount(r):
            _, _, _, _, gh, gw = box(r)
            return te.maximum(gh * gw, 1.0)
        cnt = te.compute((rois.shape[0],), fcount, name="roi_align_count")
        return [te.compute(out_types[0].shape, lambda r, c, ph, pw: te.cast(
            x.dtype, tot[r, c, ph, pw] / cnt[r]), name="roi_align")]

    def fmax(r, c, ph, pw):
        val, valid = samples(r, c, ph, pw, lambda t: te.maximum(te.maximum(t[0], t[1]),
                                                                te.maximum(t[2], t[3])))
        return te.max(val, axis=[ry, rx], where=valid)
    m = te.compute(out_types[0].shape, fmax, name="roi_align_max")

    def fout(r, c, ph, pw):
        _, _, _, _, gh, gw = box(r)  # an empty sample grid gives 0
        return te.cast(x.dtype, te.select(te.gt(gh * gw, 0.0), m[r, c, ph, pw],
                                          te.const(0.0, acc)))
    return [te.compute(out_types[0].shape, fout, name="roi_align")]


register_op("image.roi_align", infer_type=_roi_type, reference=_roi_ref, compute=_roi_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(3, 3),
            attrs={"output_height": 1, "output_width": 1, "sampling_ratio": 0,
                   "spatial_scale": 1.0, "mode": "avg", "half_pixel": 1, "max_grid": 1},
            doc="RoI align of X (N, C, H, W) over rois (R, 4: x1, y1, x2, y2) of images "
                "batch_indices (R,): bilinear samples on a grid per output bin, averaged or "
                "max-pooled; sampling_ratio 0 adapts the grid to each roi (at most max_grid) "
                "(ONNX RoiAlign-16; half_pixel=0 is output_half_pixel)")


# deform_conv -----------------------------------------------------------------------------------

def _dc_geom(attrs):
    return (tuple(attrs["strides"] or (1, 1)), tuple(attrs["dilations"] or (1, 1)),
            tuple(attrs["pads"] or (0, 0, 0, 0)))


def _dc_type(types, attrs):
    x, w, off = types[0], types[1], types[2]
    where = "nn.deform_conv: "
    g, og = attrs["group"], attrs["offset_group"]
    if x.ndim != 4 or w.ndim != 4 or off.ndim != 4:
        raise ShapeMismatchError(f"{where}2-D only: X, W, offset must be 4-D, got {x.shape}, "
                                 f"{w.shape}, {off.shape}")
    N, C, H, Wd = x.shape
    M, Cg, kh, kw = w.shape
    (sh, sw), (dh, dw), p = _dc_geom(attrs)
    oh = (H + p[0] + p[2] - (dh * (kh - 1) + 1)) // sh + 1
    ow = (Wd + p[1] + p[3] - (dw * (kw - 1) + 1)) // sw + 1
    if C != Cg * g or M % g or C % og or off.shape != (N, og * kh * kw * 2, oh, ow):
        raise ShapeMismatchError(f"{where}X {x.shape}, W {w.shape}, offset {off.shape} do not fit "
                                 f"group {g}, offset_group {og} and output ({oh}, {ow})")
    if len(types) > 3 and types[3].shape != (M,):
        raise ShapeMismatchError(f"{where}bias {types[3].shape} != ({M},)")
    if len(types) > 4 and types[4].shape != (N, og * kh * kw, oh, ow):
        raise ShapeMismatchError(f"{where}mask {types[4].shape} != {(N, og * kh * kw, oh, ow)}")
    return [TensorType((N, M, oh, ow), x.dtype)]


def _dc_ref(xs, attrs):
    """Per kernel tap: bilinear samples of every channel at the offset positions (zeros outside
    the image), weighted by the mask, then contracted with the weights."""
    x, w, off = (a.astype(np.float64) for a in xs[:3])
    N, C, H, Wd = x.shape
    M, Cg, kh, kw = w.shape
    g, og = attrs["group"], attrs["offset_group"]
    (sh, sw), (dh, dw), p = _dc_geom(attrs)
    oh, ow = off.shape[2:]
    off = off.reshape(N, og, kh, kw, 2, oh, ow)
    mask = xs[4].astype(np.float64).reshape(N, og, kh, kw, oh, ow) if len(xs) > 4 and \
        xs[4] is not None else np.ones((N, og, kh, kw, oh, ow))
    cog = C // og
    y = np.zeros((N, M, oh, ow))
    base_h = (np.arange(oh) * sh - p[0])[:, None]
    base_w = (np.arange(ow) * sw - p[1])[None, :]
    for ki in range(kh):
        for kj in range(kw):
            cols = np.zeros((N, C, oh, ow))
            for c in range(C):
                o = c // cog
                hh = base_h + ki * dh + off[:, o, ki, kj, 0]
                ww = base_w + kj * dw + off[:, o, ki, kj, 1]
                h0, w0 = np.floor(hh), np.floor(ww)
                val = np.zeros((N, oh, ow))
                for dy in (0, 1):
                    for dx in (0, 1):
                        yi, xi = h0 + dy, w0 + dx
                        wt = (1 - np.abs(hh - yi)) * (1 - np.abs(ww - xi))
                        ok = (yi >= 0) & (yi < H) & (xi >= 0) & (xi < Wd)
                        yc = np.clip(yi, 0, H - 1).astype(int)
                        xc = np.clip(xi, 0, Wd - 1).astype(int)
                        pix = x[np.arange(N)[:, None, None], c, yc, xc]
                        val += np.where(ok, wt * pix, 0.0)
                cols[:, c] = val * mask[:, o, ki, kj]
            for gi in range(g):
                mg = M // g
                y[:, gi * mg:(gi + 1) * mg] += np.einsum(
                    "nchw,mc->nmhw", cols[:, gi * Cg:(gi + 1) * Cg],
                    w[gi * mg:(gi + 1) * mg, :, ki, kj])
    if len(xs) > 3 and xs[3] is not None:
        y += xs[3].astype(np.float64).reshape(1, -1, 1, 1)
    return [y.astype(xs[0].dtype)]


def _dc_compute(inputs, attrs, out_types):
    x, w, off = inputs[0], inputs[1], inputs[2]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    N, C, H, Wd = x.shape
    M, Cg, kh, kw = w.shape
    g, og = attrs["group"], attrs["offset_group"]
    (sh, sw), (dh, dw), p = _dc_geom(attrs)
    Mg, cog = M // g, C // og
    acc = "float64" if x.dtype == "float64" else "float32"
    rc, rki, rkj = te.reduce_axis(Cg, "dcc"), te.reduce_axis(kh, "dci"), te.reduce_axis(kw, "dcj")

    def f(n, m, i, j):
        c = (m // Mg) * Cg + rc.var if g > 1 else rc.var
        o = c // cog if og > 1 else 0
        tap = rki.var * kw + rkj.var
        hh = te.cast(acc, i * sh - p[0] + rki.var * dh) + te.cast(acc, off[n, o * kh * kw * 2
                                                                          + tap * 2, i, j])
        ww = te.cast(acc, j * sw - p[1] + rkj.var * dw) + te.cast(acc, off[n, o * kh * kw * 2
                                                                          + tap * 2 + 1, i, j])
        h0, w0 = te.floor(hh), te.floor(ww)
        val = None
        for dy in (0, 1):
            for dx in (0, 1):
                yi, xi = h0 + float(dy), w0 + float(dx)
                wt = (1.0 - te.abs(hh - yi)) * (1.0 - te.abs(ww - xi))
                yc, xc = te.cast("int64", yi), te.cast("int64", xi)
                ok = te.all_of(te.ge(yc, 0), te.lt(yc, H), te.ge(xc, 0), te.lt(xc, Wd))
                pix = x[n, c, te.minimum(te.maximum(yc, 0), H - 1),
                        te.minimum(te.maximum(xc, 0), Wd - 1)]
                term = te.select(ok, wt * te.cast(acc, pix), te.const(0.0, acc))
                val = term if val is None else val + term
        if mask is not None:
            val = val * te.cast(acc, mask[n, o * kh * kw + tap, i, j])
        return te.sum(val * te.cast(acc, w[m, rc.var, rki.var, rkj.var]), axis=[rc, rki, rkj])
    y = te.compute(out_types[0].shape, f, name="deform_conv_acc")

    def fout(n, m, i, j):
        v = y[n, m, i, j]
        if bias is not None:
            v = v + te.cast(acc, bias[m])
        return te.cast(x.dtype, v)
    return [te.compute(out_types[0].shape, fout, name="deform_conv")]


register_op("nn.deform_conv", infer_type=_dc_type, reference=_dc_ref, compute=_dc_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(3, 5),
            attrs={"strides": None, "dilations": None, "pads": None, "group": 1,
                   "offset_group": 1},
            doc="2-D deformable convolution: each kernel tap samples X bilinearly (zeros outside) "
                "at its position plus the learned offset, scaled by the optional mask, then "
                "weights as a grouped convolution plus optional bias (ONNX DeformConv-19)")
