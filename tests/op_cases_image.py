"""Randomized cases for the image operators (``ember.ops.image``). Registered into
``op_cases.CASES`` (imported at its end)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from op_cases import FLOATS, Case, cases, one_of, rng, shape, values

# scales exactly representable in float32 (ONNX passes scales as float32)
RESIZE_SCALES = [0.25, 0.5, 0.625, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0]
COORD_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize"]


@cases("image.resize")
def resize(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1, max_rank=4, max_side=6)
    ax = draw(st.integers(0, len(shp) - 1), label="axis")
    scale = one_of(draw, RESIZE_SCALES, "scale")
    size = int(scale * shp[ax])
    if size == 0:
        scale, size = 2.0, 2 * shp[ax]
    if draw(st.booleans(), label="by size"):  # sizes given: the scale is size / length
        size = draw(st.integers(1, 2 * shp[ax] + 1), label="size")
        scale = size / shp[ax]
    mode = one_of(draw, ["nearest", "linear", "cubic"], "mode")
    ctm = one_of(draw, COORD_MODES, "ctm")
    if ctm == "half_pixel_symmetric" and size != scale * shp[ax]:
        # onnx's evaluator picks wrong taps when this mode's offset puts a coordinate 1 ulp
        # off an integer; sizes that are exact multiples keep the reference check meaningful
        size, scale = 2 * shp[ax], 2.0
    attrs = {"axis": ax, "size": size, "scale": scale, "mode": mode,
             "coordinate_transformation_mode": ctm,
             "nearest_mode": one_of(draw, ["round_prefer_floor", "round_prefer_ceil", "floor",
                                           "ceil"], "nearest_mode"),
             "cubic_coeff_a": one_of(draw, [-0.75, -0.5], "a"),
             "exclude_outside": draw(st.integers(0, 1), label="exclude_outside"),
             "antialias": 0 if mode == "nearest" else draw(st.integers(0, 1), label="antialias"),
             "extrapolation_value": one_of(draw, [0.0, -1.5], "extrapolation")}
    if ctm == "tf_crop_and_resize":
        attrs["roi"] = one_of(draw, [[0.0, 1.0], [0.25, 0.75], [0.125, 1.25], [-0.25, 0.5]], "roi")
    dt = one_of(draw, FLOATS + ["uint8", "int32"], "dtype")
    x = values(r, shp, dt)
    return Case([x], attrs, rtol=1e-5, atol=1e-5)


@cases("image.grid_sample")
def grid_sample(draw, op):
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial rank")
    n, c = draw(st.integers(1, 2), label="N"), draw(st.integers(1, 3), label="C")
    sp = tuple(draw(st.lists(st.integers(1, 5), min_size=nsp, max_size=nsp), label="in"))
    out = tuple(draw(st.lists(st.integers(1, 4), min_size=nsp, max_size=nsp), label="out"))
    dt = one_of(draw, FLOATS, "dtype")
    x = values(r, (n, c) + sp, dt)
    grid = np.asarray(r.uniform(-1.4, 1.4, (n,) + out + (nsp,)), dt)
    attrs = {"mode": one_of(draw, ["nearest", "linear", "cubic"], "mode"),
             "padding_mode": one_of(draw, ["zeros", "border", "reflection"], "padding"),
             "align_corners": draw(st.integers(0, 1), label="align_corners")}
    if attrs["padding_mode"] == "reflection" and attrs["align_corners"] and min(sp) == 1:
        attrs["align_corners"] = 0  # onnx's evaluator divides by zero there (ours reflects to 0)
    return Case([x, grid], attrs, rtol=1e-4, atol=1e-5)


@cases("image.col2im")
def col2im(draw, op):
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial rank")
    img = draw(st.lists(st.integers(1, 6), min_size=nsp, max_size=nsp), label="image")
    blk = [draw(st.integers(1, i), label="block") for i in img]
    dil = [draw(st.integers(1, 2), label="dilation") for _ in img]
    strides = [draw(st.integers(1, 3), label="stride") for _ in img]
    pads = [draw(st.integers(0, 2), label="pad") for _ in range(2 * nsp)]
    nb = [(img[d] + pads[d] + pads[d + nsp] - dil[d] * (blk[d] - 1) - 1) // strides[d] + 1
          for d in range(nsp)]
    if min(nb) <= 0:
        dil, pads, strides = [1] * nsp, [0] * (2 * nsp), [1] * nsp
        nb = [img[d] - blk[d] + 1 for d in range(nsp)]
    n, c = draw(st.integers(1, 2), label="N"), draw(st.integers(1, 3), label="C")
    dt = one_of(draw, FLOATS, "dtype")
    x = values(r, (n, c * int(np.prod(blk)), int(np.prod(nb))), dt)
    attrs = {"image_shape": img, "block_shape": blk, "dilations": dil, "pads": pads,
             "strides": strides}
    return Case([x], attrs, rtol=1e-5, atol=1e-5)
