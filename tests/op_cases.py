"""Randomized inputs and attributes for every registered graph operator.

``CASES[op](draw)`` returns a ``Case`` (inputs, attrs, tolerance) drawn with a hypothesis
``draw`` function. ``test_ops.py`` compiles each case and compares it with the operator's NumPy
reference; ``test_op_references.py`` checks the references themselves against onnx's
``ReferenceEvaluator``. An operator added to the registry needs an entry here (the coverage test
fails otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st


@dataclass
class Case:
    """One example: the op's inputs, its attributes, and a tolerance (``None``: by dtype)."""

    inputs: list
    attrs: dict = field(default_factory=dict)
    rtol: float | None = None
    atol: float | None = None


CASES: dict[str, Callable] = {}


def cases(*names):
    """Register a case generator ``fn(draw, op)`` for the operators ``names``."""
    def deco(fn):
        for n in names:
            CASES[n] = (lambda name: lambda draw: fn(draw, name))(n)
        return fn
    return deco


# drawing helpers ------------------------------------------------------------------------------

FLOATS = ["float32", "float64"]
SIGNED = ["int8", "int32", "int64"]
INTS = SIGNED + ["uint8"]
REDUCE_TOL = dict(rtol=1e-4, atol=1e-5)  # float32 sums in a different order than float64


def rng(draw) -> np.random.Generator:
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))


def shape(draw, min_rank=0, max_rank=4, min_side=1, max_side=5, allow_empty=False):
    rank = draw(st.integers(min_rank, max_rank), label="rank")
    lo = 0 if allow_empty and draw(st.integers(0, 9), label="empty?") == 0 else min_side
    return tuple(draw(st.lists(st.integers(lo, max_side), min_size=rank, max_size=rank),
                      label="shape"))


def broadcastable(draw, shp):
    """A shape that broadcasts with ``shp`` to ``shp`` (leading dims dropped, some set to 1)."""
    k = draw(st.integers(0, len(shp)), label="bcast rank")
    tail = list(shp[len(shp) - k:])
    for i in range(len(tail)):
        if draw(st.booleans(), label="to 1"):
            tail[i] = 1
    return tuple(tail)


def values(r: np.random.Generator, shp, dtype: str, kind: str = "normal") -> np.ndarray:
    """Random array. ``kind``: normal, positive, nonzero, small (|v| <= 3 ints or floats near 1),
    halves (floats on multiples of 0.5), special (normal plus NaN/inf/0/-0)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return r.integers(0, 2, shp).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(int(info.min), -100), min(int(info.max), 100)
        if kind == "small":
            lo, hi = max(lo, -3), 3
        if kind in ("positive",):
            lo = 1
        a = r.integers(lo, hi + 1, shp).astype(dt)
        if kind == "nonzero":
            a[a == 0] = 1
        return a
    if kind == "positive":
        a = r.uniform(0.1, 4.0, shp)
    elif kind == "small":
        a = r.uniform(0.5, 1.5, shp)
    elif kind == "halves":
        a = r.integers(-8, 9, shp) / 2.0
    else:
        a = r.standard_normal(shp) * 2
        if kind == "nonzero":
            a = np.where(np.abs(a) < 0.1, 0.5, a)
    a = np.asarray(a, dtype=dt)
    if kind == "special" and a.size:
        flat = a.reshape(-1)
        for v in (np.nan, np.inf, -np.inf, 0.0, -0.0):
            if r.random() < 0.5:
                flat[r.integers(0, flat.size)] = v
    return a


def one_of(draw, xs, label=None):
    return draw(st.sampled_from(list(xs)), label=label)


# elementwise ----------------------------------------------------------------------------------

UNARY_FLOAT = {"exp": "normal", "log": "positive", "sqrt": "positive", "tanh": "normal",
               "erf": "normal", "sigmoid": "normal", "floor": "normal", "ceil": "normal",
               "round": "halves", "reciprocal": "nonzero", "sin": "normal", "cos": "normal",
               "isnan": "special"}


@cases(*UNARY_FLOAT)
def unary_float(draw, op):
    r = rng(draw)
    dt = one_of(draw, FLOATS + ["float16"], "dtype")
    kind = UNARY_FLOAT[op]
    if op == "floor" or op == "ceil":
        kind = one_of(draw, ["normal", "halves", "special"])
    tol = {}
    if op in ("exp",) and dt == "float32":
        tol = dict(rtol=2e-6, atol=1e-6)
    return Case([values(r, shape(draw, allow_empty=True), dt, kind)], {}, **tol)


@cases("nn.relu", "negative", "abs", "sign")
def unary_any(draw, op):
    r = rng(draw)
    dt = one_of(draw, FLOATS + SIGNED + (["uint8"] if op != "negative" else []), "dtype")
    kind = "special" if dt in FLOATS and draw(st.booleans()) else "normal"
    return Case([values(r, shape(draw, allow_empty=True), dt, kind)])


@cases("copy")
def copy_case(draw, op):
    r = rng(draw)
    dt = one_of(draw, FLOATS + INTS + ["bool", "float16"], "dtype")
    return Case([values(r, shape(draw, allow_empty=True), dt, "special")])


@cases("logical_not")
def logical_not(draw, op):
    return Case([values(rng(draw), shape(draw, allow_empty=True), "bool")])


ARITH = {"add": "normal", "subtract": "normal", "multiply": "normal", "divide": "nonzero",
         "maximum": "special", "minimum": "special"}
COMPARE = ["equal", "less", "less_equal", "greater", "greater_equal"]
LOGIC = ["logical_and", "logical_or", "logical_xor"]


def _binary_shapes(draw):
    out = shape(draw, allow_empty=True)
    a, b = broadcastable(draw, out), broadcastable(draw, out)
    if draw(st.booleans(), label="full a"):
        a = out
    if draw(st.booleans()):
        a, b = b, a
    return a, b


@cases(*ARITH, *COMPARE, *LOGIC)
def binary(draw, op):
    r = rng(draw)
    sa, sb = _binary_shapes(draw)
    if op in LOGIC:
        dt = "bool"
    elif op == "equal":
        dt = one_of(draw, FLOATS + INTS + ["bool"], "dtype")
    else:
        dt = one_of(draw, FLOATS + INTS, "dtype")
    kind = ARITH.get(op, "normal")
    a = values(r, sa, dt, "small" if (op in COMPARE and dt not in FLOATS) else
               ("normal" if kind == "nonzero" else kind))
    b = values(r, sb, dt, "small" if (op in COMPARE and dt not in FLOATS) else kind)
    if op in COMPARE and a.size and b.size and dt != "bool":
        b = b.copy()  # make some elements equal
        bb = np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape))
        if b.ndim == bb.ndim and b.shape == bb.shape:
            m = r.random(b.shape) < 0.3
            b[m] = bb[m]
    if op == "divide" and dt in INTS and b.size and draw(st.booleans(), label="zero divisors"):
        # C leaves x / 0 and MIN / -1 undefined (a trap); ember's kernels give 0 and MIN
        b = b.copy()
        b.reshape(-1)[r.integers(0, b.size, 2)] = 0
        if dt != "uint8" and a.size:
            a = a.copy()
            a.reshape(-1)[0] = np.iinfo(dt).min
            b.reshape(-1)[-1] = -1
    return Case([a, b])


@cases("power")
def power(draw, op):
    r = rng(draw)
    sa, sb = _binary_shapes(draw)
    da = one_of(draw, FLOATS + ["int32", "int64"], "base dtype")
    if da in FLOATS:
        db = one_of(draw, [da, "int64"], "exponent dtype")
        a = values(r, sa, da, "positive")
        b = values(r, sb, db, "small") if db == "int64" else \
            np.asarray(r.uniform(-2, 2, sb), db)
    else:
        a = values(r, sa, da, "small")
        b = np.asarray(r.integers(0, 5, sb), da)
    return Case([a, b], {}, rtol=1e-5 if da == "float32" else None)


@cases("where")
def where(draw, op):
    r = rng(draw)
    out = shape(draw, allow_empty=True)
    sc, sx, sy = (broadcastable(draw, out) for _ in range(3))
    k = draw(st.integers(0, 2))
    sc, sx, sy = [out if i == k else s for i, s in enumerate((sc, sx, sy))]
    dt = one_of(draw, FLOATS + INTS + ["bool"], "dtype")
    return Case([values(r, sc, "bool"), values(r, sx, dt), values(r, sy, dt)])


@cases("clip")
def clip(draw, op):
    r = rng(draw)
    dt = one_of(draw, FLOATS + INTS, "dtype")
    x = values(r, shape(draw, allow_empty=True), dt, "special" if dt in FLOATS else "normal")
    lo = draw(st.one_of(st.none(), st.integers(-60, 60)), label="min")
    hi = draw(st.one_of(st.none(), st.integers(-60, 60)), label="max")
    if dt == "uint8":
        lo = None if lo is None else abs(lo)
        hi = None if hi is None else abs(hi)
    if dt in FLOATS:
        lo = None if lo is None else lo / 20
        hi = None if hi is None else hi / 20
    return Case([x], {"min": lo, "max": hi})


CAST_DTYPES = FLOATS + ["float16", "int8", "uint8", "int32", "int64", "bool"]


@cases("cast")
def cast(draw, op):
    r = rng(draw)
    src = one_of(draw, CAST_DTYPES, "from")
    dst = one_of(draw, CAST_DTYPES, "to")
    shp = shape(draw, allow_empty=True)
    if src in FLOATS + ["float16"]:
        # in range of every destination: C leaves out-of-range float -> int undefined
        lo = 0 if dst == "uint8" else -100
        x = np.asarray(r.uniform(lo, 100, shp), src)
        if dst in ("float16", "float32", "float64", "bool"):
            x = values(r, shp, src, "special")
    else:
        x = values(r, shp, src, "normal")
        if dst == "uint8" and src != "bool":
            x = np.abs(x.astype(np.int64)).astype(src)
    return Case([x], {"dtype": dst})


# reductions -----------------------------------------------------------------------------------

@cases("sum", "mean", "max", "min", "prod")
def reduce_(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1, allow_empty=True)  # empty domains: the identity
    dt = one_of(draw, FLOATS + ["int32", "int64"], "dtype")
    nd = len(shp)
    how = draw(st.integers(0, 3), label="axes form")
    if how == 0:
        axes = None
    else:
        ax = draw(st.lists(st.integers(-nd, nd - 1), min_size=0 if how == 1 else 1,
                           max_size=nd, unique_by=lambda a: a % nd))
        axes = ax
    kind = "small" if op == "prod" else "normal"
    x = values(r, shp, dt, kind)
    return Case([x], {"axes": axes, "keepdims": draw(st.integers(0, 1), label="keepdims")},
                **REDUCE_TOL)


# data movement --------------------------------------------------------------------------------

def _factor_reshape(draw, shp):
    """A new shape with the same number of elements."""
    n = int(np.prod(shp)) if shp else 1
    if n == 0:
        return list(draw(st.permutations(list(shp)))) + [1] * draw(st.integers(0, 1))
    primes, m, p = [], n, 2
    while m > 1:
        while m % p == 0:
            primes.append(p)
            m //= p
        p += 1
    primes = list(draw(st.permutations(primes)))
    rank = draw(st.integers(0 if n == 1 else 1, max(1, min(5, len(primes) + 1))))
    dims = [1] * max(rank, 1)
    for q in primes:
        dims[draw(st.integers(0, len(dims) - 1))] *= q
    if rank == 0:
        return []
    return dims


@cases("reshape")
def reshape(draw, op):
    r = rng(draw)
    shp = shape(draw, allow_empty=True)
    dt = one_of(draw, FLOATS + INTS + ["bool"], "dtype")
    return Case([values(r, shp, dt)], {"newshape": _factor_reshape(draw, shp)})


@cases("transpose")
def transpose(draw, op):
    r = rng(draw)
    shp = shape(draw, max_rank=5, allow_empty=True)
    dt = one_of(draw, FLOATS + INTS, "dtype")
    perm = None if draw(st.integers(0, 3)) == 0 else list(draw(st.permutations(range(len(shp)))))
    if perm is not None and draw(st.booleans()):
        perm = [p - len(shp) for p in perm]  # negative axes
    return Case([values(r, shp, dt)], {"perm": perm})


@cases("concatenate")
def concatenate(draw, op):
    r = rng(draw)
    base = shape(draw, min_rank=1)
    nd = len(base)
    axis = draw(st.integers(-nd, nd - 1))
    dt = one_of(draw, FLOATS + INTS + ["bool"], "dtype")
    xs = []
    for _ in range(draw(st.integers(1, 4), label="count")):
        s = list(base)
        s[axis] = draw(st.integers(0, 4))
        xs.append(values(r, tuple(s), dt))
    assume(sum(x.shape[axis] for x in xs) > 0 or draw(st.booleans()))
    return Case(xs, {"axis": axis})


@cases("broadcast_to")
def broadcast_to(draw, op):
    r = rng(draw)
    out = shape(draw, allow_empty=True)
    xs = broadcastable(draw, out)
    target = out
    if draw(st.booleans(), label="bidirectional"):
        # ONNX Expand: the target may be shorter or hold 1s where x is larger
        target = tuple(1 if draw(st.booleans()) else d for d in out)[draw(st.integers(0, len(out))):]
        xs = out
    dt = one_of(draw, FLOATS + INTS + ["bool"], "dtype")
    return Case([values(r, xs, dt)], {"shape": list(target)})


@cases("take")
def take(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1, max_rank=3)
    nd = len(shp)
    axis = draw(st.integers(-nd, nd - 1))
    n = shp[axis]
    ishape = shape(draw, max_rank=2)
    idt = one_of(draw, ["int32", "int64"], "index dtype")
    ind = r.integers(-n, n, ishape).astype(idt)
    dt = one_of(draw, FLOATS + INTS, "dtype")
    return Case([values(r, shp, dt), ind], {"axis": axis})


@cases("strided_slice")
def strided_slice(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1, max_rank=4, max_side=7)
    begin, end, strides = [], [], []
    for d in shp:
        s = draw(st.sampled_from([1, 1, 2, 3, -1, -2, -3]), label="step")
        if s > 0:
            b = draw(st.integers(0, d))
            e = draw(st.integers(0, d))
        else:
            b = draw(st.integers(0, d - 1))
            e = draw(st.integers(-1, d - 1))
        begin.append(b)
        end.append(e)
        strides.append(s)
    dt = one_of(draw, FLOATS + INTS, "dtype")
    return Case([values(r, shp, dt)], {"begin": begin, "end": end, "strides": strides})


@cases("nn.pad")
def pad(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1, max_rank=4, max_side=5)
    nd = len(shp)
    mode = one_of(draw, ["constant", "reflect", "edge", "wrap"], "mode")
    pads = [0] * (2 * nd)
    for a in range(nd):
        lo_b, lo_e = draw(st.integers(-1, 3)), draw(st.integers(-1, 3))
        if shp[a] + min(lo_b, 0) + min(lo_e, 0) < 1:
            lo_b, lo_e = max(lo_b, 0), max(lo_e, 0)
        inner = shp[a] + min(lo_b, 0) + min(lo_e, 0)
        if mode == "reflect":
            lo_b, lo_e = min(lo_b, inner - 1), min(lo_e, inner - 1)
        pads[a], pads[nd + a] = lo_b, lo_e
    dt = one_of(draw, FLOATS + INTS, "dtype")
    value = float(draw(st.integers(-3, 3)))
    return Case([values(r, shp, dt)], {"pads": pads, "mode": mode, "value": value})


# neural network -------------------------------------------------------------------------------

NN_TOL = dict(rtol=1e-4, atol=1e-5)


@cases("nn.conv")
def conv(draw, op):
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial dims")
    n = draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["plain", "grouped", "depthwise"]))
    g = {"plain": 1, "grouped": draw(st.integers(2, 3)), "depthwise": draw(st.integers(1, 4))}[kind]
    cg = 1 if kind == "depthwise" else draw(st.integers(1, 3))
    mg = draw(st.integers(1, 3)) if kind != "depthwise" else draw(st.integers(1, 2))
    kmax = 3 if nsp < 3 else 2
    k = [draw(st.integers(1, kmax)) for _ in range(nsp)]
    s = [draw(st.integers(1, 3)) for _ in range(nsp)]
    d = [draw(st.integers(1, 2)) for _ in range(nsp)]
    p = [draw(st.integers(0, kk)) for kk in k + k]
    size = []
    for i in range(nsp):
        need = max(1, d[i] * (k[i] - 1) + 1 - p[i] - p[nsp + i])
        size.append(draw(st.integers(need, need + (4 if nsp < 3 else 2))))
    dt = one_of(draw, FLOATS, "dtype")
    x = values(r, (n, g * cg, *size), dt)
    w = values(r, (g * mg, cg, *k), dt)
    ins = [x, w]
    if draw(st.booleans(), label="bias"):
        ins.append(values(r, (g * mg,), dt))
    attrs = {"strides": s if draw(st.booleans()) or s != [1] * nsp else None,
             "pads": p, "dilations": d, "group": g}
    return Case(ins, attrs, **NN_TOL)


@cases("nn.winograd_input")
def winograd_input(draw, op):
    r = rng(draw)
    m = draw(st.sampled_from([2, 4, 6]), label="tile")
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    h, w = (draw(st.integers(max(1, 3 - pads[i] - pads[i + 2]), 9)) for i in (0, 1))
    dt = one_of(draw, FLOATS, "dtype")
    x = values(r, (draw(st.integers(1, 2)), h, w, draw(st.integers(1, 5))), dt)
    extra = draw(st.sampled_from([None, 0, 1, 3]), label="padding rows")
    rows = None if extra is None else x.shape[0] * (-(-(h + pads[0] + pads[2] - 2) // m)) * \
        (-(-(w + pads[1] + pads[3] - 2) // m)) + extra
    return Case([x], {"tile": m, "pads": pads, "num_tiles": rows}, **NN_TOL)


@cases("nn.winograd_output")
def winograd_output(draw, op):
    r = rng(draw)
    m = draw(st.sampled_from([2, 4, 6]), label="tile")
    oh, ow = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    n = draw(st.integers(1, 2))
    extra = draw(st.sampled_from([0, 2]), label="padding rows")
    p = n * (-(-oh // m)) * (-(-ow // m)) + extra
    dt = one_of(draw, FLOATS, "dtype")
    y = values(r, ((m + 2) ** 2, p, draw(st.integers(1, 5))), dt)
    return Case([y], {"tile": m, "out_size": [oh, ow], "batch": n if extra else None},
                **NN_TOL)


@cases("nn.shuffled_group_conv")
def shuffled_group_conv(draw, op):
    r = rng(draw)
    gs = draw(st.integers(1, 4), label="shuffle")
    gc = draw(st.integers(1, 3), label="group")
    # C a multiple of both: the group slices C / gc need not be multiples of gs
    C = math.lcm(gs, gc) * draw(st.integers(1, 3), label="channels / lcm(group, shuffle)")
    q = draw(st.integers(1, C // gs - (gc - 1) * (C // gc) // gs), label="block width")
    mg = draw(st.integers(1, 4), label="outputs per group")
    M = gc * mg
    n, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    dt = one_of(draw, FLOATS, "dtype")
    ins = [values(r, (n, h, w, C), dt), values(r, (M, q, gs), dt)]
    if draw(st.booleans(), label="bias"):
        ins.append(values(r, (M,), dt))
    return Case(ins, {"group": gc, "shuffle": gs}, **NN_TOL)


@cases("nn.inverted_residual")
def inverted_residual(draw, op):
    r = rng(draw)
    expand = draw(st.booleans(), label="expand")
    stride = draw(st.sampled_from([1, 2]), label="stride")
    pads = [draw(st.integers(0, 1)) for _ in range(4)]
    h, w = (draw(st.integers(3 - pads[i] - pads[i + 2], 9)) for i in (0, 1))
    # at least 2 channels in and expanded: a one-element 1x1 weight (Cin = Ce = 1 or
    # Ce = Cout = 1) is a typed LoweringError of the op (FuseInvertedResidual never makes one)
    cin = draw(st.integers(2, 5))
    ce = draw(st.integers(2, 12)) if expand else cin
    oh, ow = (h + pads[0] + pads[2] - 3) // stride + 1, (w + pads[1] + pads[3] - 3) // stride + 1
    residual = (oh, ow) == (h, w) and draw(st.booleans(), label="residual")
    cout = cin if residual else draw(st.integers(1, 6))
    acts = [(0.0, 6.0), (0.0, None), (-1.0, 2.5)]
    ins = [values(r, (draw(st.integers(1, 2)), h, w, cin), "float32")]
    if expand:
        ins.append(values(r, (cin, ce), "float32"))
    ins += [values(r, (3, 3, ce), "float32"), values(r, (ce, cout), "float32"),
            values(r, ((ce if expand else 0) + ce + cout,), "float32")]
    attrs = {"stride": stride, "pads": pads, "expand": expand, "residual": residual,
             "act_expand": draw(st.sampled_from(acts)), "act_dw": draw(st.sampled_from(acts)),
             "band": draw(st.sampled_from([0, 1, 2]))}
    return Case(ins, attrs, **NN_TOL)


def _pool_params(draw, nsp, dilate=True):
    k = [draw(st.integers(1, 3)) for _ in range(nsp)]
    s = [draw(st.integers(1, 3)) for _ in range(nsp)]
    d = [draw(st.integers(1, 2)) if dilate else 1 for _ in range(nsp)]
    p = [draw(st.integers(0, kk - 1)) for kk in k + k]
    return k, s, d, p


@cases("nn.max_pool", "nn.avg_pool")
def pool(draw, op):
    from ember.ops.nn import pool_out_dim
    r = rng(draw)
    nsp = draw(st.integers(1, 3), label="spatial dims")
    k, s, d, p = _pool_params(draw, nsp)
    ceil = draw(st.integers(0, 1), label="ceil_mode")
    size = [draw(st.integers(d[i] * (k[i] - 1) + 1, d[i] * (k[i] - 1) + 5)) for i in range(nsp)]
    for i in range(nsp):  # every window must hold at least one input element
        o = pool_out_dim(size[i], k[i], s[i], d[i], p[i], p[nsp + i], ceil)
        for oo in range(o):
            pos = [oo * s[i] + kk * d[i] - p[i] for kk in range(k[i])]
            assume(any(0 <= q < size[i] for q in pos))
    dt = one_of(draw, FLOATS, "dtype")
    x = values(r, (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *size), dt)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d, "ceil_mode": ceil}
    if op == "nn.avg_pool":
        attrs["count_include_pad"] = draw(st.integers(0, 1), label="count_include_pad")
    return Case([x], attrs, **NN_TOL)


@cases("nn.global_avg_pool", "nn.global_max_pool")
def global_pool(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=3, max_rank=5)
    return Case([values(r, shp, one_of(draw, FLOATS))], {}, **NN_TOL)


@cases("nn.batch_norm")
def batch_norm(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=2, max_rank=5)
    c = shp[1]
    dt = one_of(draw, FLOATS)
    ins = [values(r, shp, dt), values(r, (c,), dt), values(r, (c,), dt), values(r, (c,), dt),
           values(r, (c,), dt, "positive")]
    eps = draw(st.sampled_from([1e-5, 1e-3, 0.1]))
    return Case(ins, {"epsilon": eps}, **NN_TOL)


@cases("nn.lrn")
def lrn(draw, op):
    r = rng(draw)
    shp = (draw(st.integers(1, 2)), draw(st.integers(1, 7)), *shape(draw, 1, 2))
    attrs = {"size": draw(st.integers(1, 5)), "alpha": draw(st.sampled_from([1e-4, 0.01, 0.5])),
             "beta": draw(st.sampled_from([0.75, 0.5, 1.0])),
             "bias": draw(st.sampled_from([1.0, 2.0]))}
    return Case([values(r, shp, one_of(draw, FLOATS))], attrs, **NN_TOL)


@cases("nn.softmax", "nn.log_softmax")
def softmax(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1, max_rank=4)
    nd = len(shp)
    return Case([values(r, shp, one_of(draw, FLOATS)) * 3], {"axis": draw(st.integers(-nd, nd - 1))},
                **NN_TOL)


@cases("nn.layer_norm")
def layer_norm(draw, op):
    r = rng(draw)
    shp = shape(draw, min_rank=1, max_rank=4)
    nd = len(shp)
    axis = draw(st.integers(-nd, nd - 1))
    dt = one_of(draw, FLOATS)
    norm = shp[axis % nd:]
    ss = broadcastable(draw, norm) if draw(st.booleans()) else norm
    ins = [values(r, shp, dt), values(r, ss, dt)]
    if draw(st.booleans(), label="bias"):
        ins.append(values(r, broadcastable(draw, norm), dt))
    return Case(ins, {"axis": axis, "epsilon": draw(st.sampled_from([1e-5, 1e-12, 0.1]))},
                **NN_TOL)


@cases("nn.gemm")
def gemm(draw, op):
    r = rng(draw)
    m, k, n = (draw(st.integers(1, 9)) for _ in range(3))
    ta, tb = draw(st.integers(0, 1)), draw(st.integers(0, 1))
    dt = one_of(draw, FLOATS)
    a = values(r, (k, m) if ta else (m, k), dt)
    b = values(r, (n, k) if tb else (k, n), dt)
    ins = [a, b]
    if draw(st.booleans(), label="C"):
        cs = draw(st.sampled_from([(), (n,), (1, n), (m, 1), (m, n), (1, 1), (1,)]))
        ins.append(values(r, cs, dt))
    attrs = {"trans_a": ta, "trans_b": tb,
             "alpha": draw(st.sampled_from([1.0, 0.5, -2.0])),
             "beta": draw(st.sampled_from([1.0, 0.0, 3.0]))}
    return Case(ins, attrs, **NN_TOL)


@cases("matmul")
def matmul(draw, op):
    r = rng(draw)
    m, k, n = (draw(st.integers(1, 6)) for _ in range(3))
    if draw(st.integers(0, 9)) == 0:
        k = 0  # an empty inner dimension: zeros
    batch = shape(draw, max_rank=2, max_side=3)
    ba, bb = broadcastable(draw, batch), broadcastable(draw, batch)
    if draw(st.booleans()):
        ba = batch
    else:
        bb = batch
    sa = (k,) if draw(st.integers(0, 4)) == 0 else ba + (m, k)
    sb = (k,) if draw(st.integers(0, 4)) == 0 else bb + (k, n)
    dt = one_of(draw, FLOATS + ["int32", "int64"])
    return Case([values(r, sa, dt, "small"), values(r, sb, dt, "small")], {}, **NN_TOL)

from op_cases_breadth import *  # noqa: E402,F401,F403  (cases of the ONNX-breadth operators)
from op_cases_image import *  # noqa: E402,F401,F403  (cases of the image operators)
from op_cases_signal import *  # noqa: E402,F401,F403  (cases of the signal operators)
from op_cases_linalg import *  # noqa: E402,F401,F403  (cases of the linear-algebra operators)
from op_cases_spatial import *  # noqa: E402,F401,F403  (cases of the data-driven spatial operators)
from op_cases_random import *  # noqa: E402,F401,F403  (cases of the random operators)
from op_cases_transformer import *  # noqa: E402,F401,F403  (cases of the transformer operators)
from op_cases_qnn import *  # noqa: E402,F401,F403  (cases of the int8 operators)
