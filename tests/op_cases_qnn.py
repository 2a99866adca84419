"""Randomized cases of the int8 operators (``ember.ops.qnn``, ``ember.ops.qnn_conv``):
quantize/dequantize per tensor and per axis, and ``qnn.conv2d`` with packed weights, zero points,
strides, padding, dilation and a fused ReLU. Exact: integer results are compared bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ember.ops.qnn_conv import pack_weight
from op_cases import Case, cases, rng, shape


def qconv_case(rng, n, c, h, w, cout, k, stride=1, pad=0, dil=1, in_dtype="uint8",
               out_dtype="uint8", per_channel=True, relu=False, layout="nchw"):
    """Inputs ``(x, packed w, int32 bias, float32 mult)`` and attributes of one ``qnn.conv2d``
    with random int8 data (shapes as in ``ember.ops.qnn_conv``'s docstring)."""
    kk = c * k * k
    wq = pack_weight(rng.integers(-127, 128, (cout, c, k, k)).astype(np.int8))
    lo_in, hi_in = (0, 255) if in_dtype == "uint8" else (-128, 127)
    shp = (n, c, h, w) if layout == "nchw" else (h, c)
    x = rng.integers(lo_in, hi_in + 1, shp).astype(in_dtype)
    x_zp = int(rng.integers(lo_in, hi_in + 1))
    y_zp = int(rng.integers(0, 256)) if out_dtype == "uint8" else int(rng.integers(-128, 128))
    x_zp_u = x_zp + (128 if in_dtype == "int8" else 0)  # the zero-point correction, folded
    bias = (rng.integers(-20000, 20000, cout) - x_zp_u * wq.astype(np.int64).sum(1)).astype(np.int32)
    scale = (rng.uniform(0.5, 2, cout) if per_channel else np.full(cout, 1.3)) * 40 / \
        (np.sqrt(kk) * 127 * 74)
    attrs = {"layout": layout, "kernel": (k, k), "strides": (stride, stride),
             "pads": (pad, pad, pad, pad), "dilations": (dil, dil), "x_zp": x_zp, "y_zp": y_zp,
             "lo": y_zp if relu else -128, "hi": 255, "out_dtype": out_dtype}
    return x, wq, bias, scale.astype(np.float32), attrs


def _qparams(draw, r, x_shape, dtype):
    """A scale and zero point, per tensor (axis 1 unused) or per axis."""
    if len(x_shape) and draw(st.booleans(), label="per axis"):
        axis = draw(st.integers(0, len(x_shape) - 1), label="axis")
        pshape = (x_shape[axis],)
    else:
        axis, pshape = 1, ()
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    scale = r.uniform(0.01, 0.5, pshape).astype(np.float32)
    return scale, r.integers(lo, hi + 1, pshape).astype(dtype), axis


@cases("qnn.quantize")
def _quantize(draw, op):
    r = rng(draw)
    x_shape = shape(draw, min_rank=1)
    out = draw(st.sampled_from(["uint8", "int8"]), label="out dtype")
    scale, zp, axis = _qparams(draw, r, x_shape, out)
    x = (r.standard_normal(x_shape) * 30).astype(np.float32)
    return Case([x, scale, zp], {"axis": axis, "out_dtype": out}, rtol=0, atol=0)


@cases("qnn.dequantize")
def _dequantize(draw, op):
    r = rng(draw)
    x_shape = shape(draw, min_rank=1)
    dt = draw(st.sampled_from(["uint8", "int8"]), label="dtype")
    scale, zp, axis = _qparams(draw, r, x_shape, dt)
    lo, hi = (0, 255) if dt == "uint8" else (-128, 127)
    q = r.integers(lo, hi + 1, x_shape).astype(dt)
    return Case([q, scale, zp], {"axis": axis}, rtol=0, atol=0)


@cases("qnn.conv2d")
def _qconv(draw, op):
    r = rng(draw)
    k = draw(st.sampled_from([1, 3]), label="kernel")
    kw = dict(n=1, c=draw(st.integers(1, 9), label="c"), h=draw(st.integers(k, 7), label="h"),
              w=draw(st.integers(k, 7), label="w"), cout=draw(st.integers(1, 20), label="cout"),
              k=k, stride=draw(st.sampled_from([1, 2]), label="stride"),
              pad=draw(st.integers(0, k // 2), label="pad"),
              in_dtype=draw(st.sampled_from(["uint8", "int8"]), label="in dtype"),
              out_dtype=draw(st.sampled_from(["uint8", "int8"]), label="out dtype"),
              per_channel=draw(st.booleans(), label="per channel"),
              relu=draw(st.booleans(), label="relu"))
    x, wq, bias, mult, attrs = qconv_case(r, **kw)
    return Case([x, wq, bias, mult], attrs, rtol=0, atol=0)
