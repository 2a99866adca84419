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


# indexing ---------------------------------------------------------------------------------------

ANY = FLOATS + SIGNED + ["uint8", "bool"]


def _axis(draw, rank):
    return draw(st.integers(-rank, rank - 1), label="axis")


@cases("gather_elements")
def gather_elements(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    ax = _axis(draw, len(shp))
    ishp = tuple(draw(st.integers(1, 4)) if a == ax % len(shp) else d
                 for a, d in enumerate(shp))
    n = shp[ax]
    ind = r.integers(-n, n, ishp).astype(one_of(draw, ["int32", "int64"]))
    return Case([values(r, shp, one_of(draw, ANY)), ind], {"axis": ax})


@cases("gather_nd")
def gather_nd(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    b = draw(st.integers(0, len(shp) - 1))
    m = draw(st.integers(1, len(shp) - b))
    lead = tuple(shp[:b]) + tuple(shape(draw, 0, 2))
    ind = np.stack([r.integers(-shp[b + k], shp[b + k], lead) for k in range(m)], -1)
    return Case([values(r, shp, one_of(draw, ANY)), ind.astype(np.int64)], {"batch_dims": b})


@cases("scatter_elements")
def scatter_elements(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    ax = _axis(draw, len(shp))
    ishp = tuple(draw(st.integers(1, d)) for d in shp)
    n = shp[ax]
    ind = r.integers(-n, n, ishp).astype(np.int64)
    red = one_of(draw, ["none", "add", "mul", "max", "min"])
    dt = one_of(draw, FLOATS + ["int32", "int64"])
    if red == "none":  # duplicate targets make the result order-dependent: keep them unique
        ind = np.zeros(ishp, np.int64) + np.arange(ishp[ax]).reshape(
            [-1 if a == ax % len(shp) else 1 for a in range(len(shp))])
    return Case([values(r, shp, dt), ind, values(r, ishp, dt, "small")],
                {"axis": ax, "reduction": red})


@cases("scatter_nd")
def scatter_nd(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    m = draw(st.integers(1, len(shp)))
    k = draw(st.integers(1, 4))
    red = one_of(draw, ["none", "add", "mul", "max", "min"])
    dt = one_of(draw, FLOATS + ["int32", "int64"])
    keys = list(np.ndindex(*shp[:m]))
    pick = r.choice(len(keys), size=min(k, len(keys)), replace=red != "none")
    ind = np.array([keys[p] for p in pick], np.int64).reshape(len(pick), m)
    upd = values(r, (len(pick),) + tuple(shp[m:]), dt, "small")
    return Case([values(r, shp, dt), ind, upd], {"reduction": red})


@cases("trilu")
def trilu(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=2)
    return Case([values(r, shp, one_of(draw, ANY))], {"k": draw(st.integers(-4, 4)),
                                                      "upper": draw(st.integers(0, 1))})


@cases("one_hot")
def one_hot(draw, op):
    r = rng(draw)
    shp = shape(draw, 0, 3)
    depth = draw(st.integers(1, 6))
    ind = r.integers(-depth - 1, depth + 1, shp).astype(one_of(draw, ["int32", "int64"]))
    dt = one_of(draw, FLOATS + ["int64"])
    return Case([ind, values(r, (2,), dt)], {"depth": depth,
                                             "axis": draw(st.integers(-len(shp) - 1, len(shp)))})


@cases("tile")
def tile(draw, op):
    r = rng(draw)
    shp = shape(draw, 0, 3)
    reps = [draw(st.integers(0, 3)) for _ in shp]
    return Case([values(r, shp, one_of(draw, ANY))], {"repeats": reps})


@cases("argmax", "argmin", "nn.hardmax")
def arg_reduce(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    dt = one_of(draw, FLOATS if op == "nn.hardmax" else FLOATS + SIGNED + ["uint8"])
    x = values(r, shp, dt, "small")  # ties
    attrs = {"axis": _axis(draw, len(shp))}
    if op != "nn.hardmax":
        attrs.update(keepdims=draw(st.integers(0, 1)), select_last_index=draw(st.integers(0, 1)))
    return Case([x], attrs)


@cases("topk")
def topk(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    ax = _axis(draw, len(shp))
    x = values(r, shp, one_of(draw, FLOATS + ["int32", "int64"]), "small")
    return Case([x], {"k": draw(st.integers(0, shp[ax])), "axis": ax,
                      "largest": draw(st.integers(0, 1))})


@cases("cumsum", "cumprod")
def cumulative(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    x = values(r, shp, one_of(draw, FLOATS + ["int32", "int64"]), "small")
    return Case([x], {"axis": _axis(draw, len(shp)), "exclusive": draw(st.integers(0, 1)),
                      "reverse": draw(st.integers(0, 1))}, rtol=1e-5, atol=1e-6)


@cases("reverse_sequence")
def reverse_sequence(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=2)
    b = draw(st.integers(0, 1))
    lens = r.integers(0, shp[1 - b] + 1, (shp[b],)).astype(np.int64)
    return Case([values(r, shp, one_of(draw, ANY)), lens], {"batch_axis": b, "time_axis": 1 - b})


# narrow floats --------------------------------------------------------------------------------

NARROW_FLOATS = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                 "float8_e8m0fnu"]


@cases("narrow_cast")
def narrow_cast(draw, op):
    r = rng(draw)
    to = one_of(draw, NARROW_FLOATS, "to")
    x = values(r, shape(draw, allow_empty=True), one_of(draw, ["float32", "float16"]), "special")
    x = (x * np.asarray(one_of(draw, [1, 100, 1e4, 1e6]), x.dtype)).astype(x.dtype)
    if to == "float8_e8m0fnu":
        x = np.abs(x)
    attrs = {"dtype": to, "saturate": draw(st.integers(0, 1))}
    if to == "float8_e8m0fnu":
        attrs["round_mode"] = one_of(draw, ["up", "down", "nearest"])
    return Case([x], attrs)


# nn extras ------------------------------------------------------------------------------------

NN_TOL = dict(rtol=1e-4, atol=1e-5)


@cases("nn.conv_transpose")
def conv_transpose(draw, op):
    r = rng(draw)
    nsp = draw(st.integers(1, 2))
    g = draw(st.integers(1, 2))
    cg, mg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sp = [draw(st.integers(1, 4)) for _ in range(nsp)]
    k = [draw(st.integers(1, 3)) for _ in range(nsp)]
    s = [draw(st.integers(1, 3)) for _ in range(nsp)]
    d = [draw(st.integers(1, 2)) for _ in range(nsp)]
    p = [draw(st.integers(0, 1)) for _ in range(2 * nsp)]
    opad = [draw(st.integers(0, s[i] - 1)) for i in range(nsp)]
    for i in range(nsp):  # keep the output non-empty
        full = s[i] * (sp[i] - 1) + opad[i] + (k[i] - 1) * d[i] + 1
        if full - p[i] - p[nsp + i] < 1:
            p[i] = p[nsp + i] = 0
    x = values(r, (draw(st.integers(1, 2)), cg * g, *sp), "float32")
    w = values(r, (cg * g, mg, *k), "float32")
    ins = [x, w] + ([values(r, (mg * g,), "float32")] if draw(st.booleans()) else [])
    return Case(ins, {"strides": s, "pads": p, "dilations": d, "group": g,
                      "output_padding": opad}, **NN_TOL)


def _window(draw, nsp, xshape):
    k = [draw(st.integers(1, min(3, xshape[2 + i]))) for i in range(nsp)]
    s = [draw(st.integers(1, 2)) for _ in range(nsp)]
    p = [draw(st.integers(0, k[i] - 1)) for i in range(nsp)] * 2
    return {"kernel_shape": k, "strides": s, "pads": p}


@cases("nn.lp_pool", "nn.max_pool_with_indices")
def lp_pool(draw, op):
    r = rng(draw)
    nsp = draw(st.integers(1, 2))
    xshape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)),
              *[draw(st.integers(2, 5)) for _ in range(nsp)])
    attrs = _window(draw, nsp, xshape)
    if op == "nn.lp_pool":
        attrs["p"] = draw(st.integers(1, 3))
    return Case([values(r, xshape, one_of(draw, FLOATS))], attrs, **NN_TOL)


@cases("nn.lp_normalize")
def lp_normalize(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1)
    return Case([values(r, shp, one_of(draw, FLOATS))], {
        "axis": draw(st.integers(-len(shp), len(shp) - 1)), "p": draw(st.integers(1, 2))},
        **NN_TOL)


# bitcast ----------------------------------------------------------------------------------------

BITCAST_PAIRS = [("float32", "int32"), ("int32", "float32"), ("float64", "int64"),
                 ("int64", "float64"), ("uint8", "int8"), ("int8", "uint8"), ("uint32", "float32")]


@cases("bitcast")
def bitcast(draw, op):
    src, dst = one_of(draw, BITCAST_PAIRS)
    x = values(rng(draw), shape(draw, allow_empty=True), src)
    return Case([x], {"dtype": dst})


@cases("tensor_scatter")
def tensor_scatter(draw, op):
    r = rng(draw)
    shp = (draw(st.integers(1, 3)),) + shape(draw, 1, 3, min_side=2)
    ax = draw(st.integers(1, len(shp) - 1))
    n = shp[ax]
    s = draw(st.integers(1, n))
    ushp = tuple(s if a == ax else d for a, d in enumerate(shp))
    mode = one_of(draw, ["linear", "circular"])
    hi = n - s if mode == "linear" else n - 1
    wi = r.integers(0, hi + 1, (shp[0],)).astype(np.int64)
    dt = one_of(draw, FLOATS)
    return Case([values(r, shp, dt), values(r, ushp, dt), wi], {"axis": ax, "mode": mode})
