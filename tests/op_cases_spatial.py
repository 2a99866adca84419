"""Randomized cases for the data-driven spatial operators (``ember.ops.spatial``). Registered
into ``op_cases.CASES`` (imported at its end)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from op_cases import FLOATS, Case, cases, one_of, rng, values


@cases("nn.max_unpool")
def max_unpool(draw, op):
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial rank")
    n, c = draw(st.integers(1, 2), label="N"), draw(st.integers(1, 2), label="C")
    sp = [draw(st.integers(1, 3), label="in") for _ in range(nsp)]
    inferred = [n, c] + [s + draw(st.integers(0, 2), label="grow") for s in sp]
    out = None
    if draw(st.booleans(), label="output_shape"):
        out = inferred[:2] + [d + draw(st.integers(0, 2), label="extra") for d in inferred[2:]]
    x = values(r, (n, c) + tuple(sp), one_of(draw, FLOATS + ["int32"], "dtype"))
    idx = r.permutation(int(np.prod(inferred)))[:x.size].reshape(x.shape).astype(np.int64)
    return Case([x, idx], {"inferred_shape": inferred, "output_shape": out})


def roi_grid(rois, attrs):
    """The largest adaptive sample grid over ``rois`` (what the converter computes)."""
    off = 0.5 if attrs["half_pixel"] else 0.0
    s = attrs["spatial_scale"]
    h = (rois[:, 3] * s - off) - (rois[:, 1] * s - off)
    w = (rois[:, 2] * s - off) - (rois[:, 0] * s - off)
    if not attrs["half_pixel"]:
        h, w = np.maximum(h, 1.0), np.maximum(w, 1.0)
    return max([1] + [int(math.ceil(v)) for v in np.concatenate(
        [h / attrs["output_height"], w / attrs["output_width"]])])


@cases("image.roi_align")
def roi_align(draw, op):
    r = rng(draw)
    n, c = draw(st.integers(1, 2), label="N"), draw(st.integers(1, 2), label="C")
    hgt, wid = draw(st.integers(1, 6), label="H"), draw(st.integers(1, 6), label="W")
    nr = draw(st.integers(1, 3), label="rois")
    x = values(r, (n, c, hgt, wid), one_of(draw, FLOATS, "dtype"))
    p0 = r.uniform(-1.5, max(hgt, wid), (nr, 2))
    rois = np.concatenate([p0, p0 + r.uniform(0, 5, (nr, 2))], axis=1)[:, [0, 1, 2, 3]]
    rois = rois.astype(x.dtype)
    bidx = r.integers(0, n, nr).astype(np.int64)
    attrs = {"output_height": draw(st.integers(1, 3), label="oh"),
             "output_width": draw(st.integers(1, 3), label="ow"),
             "sampling_ratio": draw(st.integers(0, 2), label="sampling_ratio"),
             "spatial_scale": one_of(draw, [1.0, 0.5], "spatial_scale"),
             "mode": one_of(draw, ["avg", "max"], "mode"),
             "half_pixel": draw(st.integers(0, 1), label="half_pixel")}
    attrs["max_grid"] = roi_grid(rois.astype(np.float64), attrs)
    return Case([x, rois, bidx], attrs, rtol=1e-4, atol=1e-5)


@cases("nn.deform_conv")
def deform_conv(draw, op):
    r = rng(draw)
    g, og = draw(st.integers(1, 2), label="group"), draw(st.integers(1, 2), label="offset_group")
    cg = og * draw(st.integers(1, 2), label="Cg") if g == 1 else og
    n, mg = 1, draw(st.integers(1, 2), label="Mg")
    kh, kw = draw(st.integers(1, 2), label="kh"), draw(st.integers(1, 2), label="kw")
    # 2+ pixels a side: onnx's evaluator maps positions through (size - 1)
    hgt, wid = draw(st.integers(2, 4), label="H"), draw(st.integers(2, 4), label="W")
    sh, sw = draw(st.integers(1, 2), label="sh"), draw(st.integers(1, 2), label="sw")
    pads = [draw(st.integers(0, 1), label="pad") for _ in range(4)]
    oh = (hgt + pads[0] + pads[2] - kh) // sh + 1
    ow = (wid + pads[1] + pads[3] - kw) // sw + 1
    dt = one_of(draw, FLOATS, "dtype")
    c = cg * g
    ins = [values(r, (n, c, hgt, wid), dt), values(r, (mg * g, cg, kh, kw), dt),
           np.asarray(r.uniform(-1.5, 1.5, (n, og * kh * kw * 2, oh, ow)), dt)]
    if draw(st.booleans(), label="bias+mask"):
        ins += [values(r, (mg * g,), dt), np.asarray(r.uniform(0, 1, (n, og * kh * kw, oh, ow)),
                                                      dt)]
    return Case(ins, {"strides": [sh, sw], "pads": pads, "group": g, "offset_group": og},
                rtol=1e-4, atol=1e-5)
