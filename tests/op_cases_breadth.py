"""Randomized cases for the operators added for ONNX-suite breadth (activations, extra unary
math, integer/bit operators...). Registered into ``op_cases.CASES`` (imported at its end)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from op_cases import FLOATS, SIGNED, Case, _binary_shapes, cases, one_of, rng, shape, values

# op: (value kind, {attr: strategy}) for the float activations
ACT = {
    "tan": ("small", {}), "asin": ("unit", {}), "acos": ("unit", {}), "atan": ("normal", {}),
    "sinh": ("normal", {}), "cosh": ("normal", {}), "asinh": ("normal", {}),
    "acosh": ("above1", {}), "atanh": ("unit", {}),
    "nn.elu": ("normal", {"alpha": st.floats(0.1, 2)}),
    "nn.selu": ("normal", {"alpha": st.floats(0.5, 2), "gamma": st.floats(0.5, 2)}),
    "nn.leaky_relu": ("normal", {"alpha": st.floats(0.01, 0.5)}),
    "nn.hard_sigmoid": ("normal", {"alpha": st.floats(0.1, 0.5), "beta": st.floats(0.2, 0.8)}),
    "nn.hard_swish": ("normal", {}), "nn.softplus": ("normal", {}),
    "nn.softsign": ("normal", {}), "nn.mish": ("normal", {}),
    "nn.gelu": ("normal", {"approximate": st.sampled_from(["none", "tanh"])}),
    "nn.celu": ("normal", {"alpha": st.floats(0.5, 2)}),
    "nn.thresholded_relu": ("normal", {"alpha": st.floats(-1, 1)}),
    "nn.shrink": ("normal", {"bias": st.floats(0, 1), "lambd": st.floats(0, 1)}),
    "nn.swish": ("normal", {"alpha": st.floats(0.5, 2)}),
}


@cases(*ACT)
def activation(draw, op):
    r = rng(draw)
    dt = one_of(draw, FLOATS, "dtype")
    kind, attr_st = ACT[op]
    shp = shape(draw, allow_empty=True)
    if kind == "unit":
        x = np.asarray(r.uniform(-0.95, 0.95, shp), dt)
    elif kind == "above1":
        x = np.asarray(r.uniform(1.0, 5.0, shp), dt)
    else:
        x = values(r, shp, dt, kind)
    attrs = {k: draw(s, label=k) for k, s in attr_st.items()}
    return Case([x], attrs, rtol=1e-5, atol=1e-6)


@cases("isinf")
def isinf(draw, op):
    r = rng(draw)
    x = values(r, shape(draw, allow_empty=True), one_of(draw, FLOATS), "special")
    return Case([x], {"detect_positive": draw(st.integers(0, 1)),
                      "detect_negative": draw(st.integers(0, 1))})


@cases("nn.prelu")
def prelu(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    sb = tuple(d if draw(st.booleans()) else 1 for d in shp[draw(st.integers(0, len(shp))):])
    dt = one_of(draw, FLOATS)
    return Case([values(r, shp, dt), values(r, sb, dt)])


@cases("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "mod")
def integer_binary(draw, op):
    r = rng(draw)
    sa, sb = _binary_shapes(draw)
    dts = SIGNED + ["uint8", "uint16", "uint32", "uint64"]
    if op == "mod":
        dts = dts + FLOATS
    dt = one_of(draw, dts, "dtype")
    a = values(r, sa, dt)
    if op.endswith("shift"):
        bits = np.dtype(dt).itemsize * 8
        lo = -3 if dt in SIGNED else 0
        b = np.asarray(r.integers(lo, bits + 3, sb), dt)
    else:
        b = values(r, sb, dt, "nonzero" if op == "mod" else "normal")
    return Case([a, b], {"fmod": draw(st.integers(0, 1))} if op == "mod" else {})


@cases("bitwise_not")
def bitwise_not(draw, op):
    dt = one_of(draw, SIGNED + ["uint8", "uint16", "bool"])
    return Case([values(rng(draw), shape(draw, allow_empty=True), dt)])
