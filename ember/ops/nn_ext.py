"""More neural-network operators: transposed convolution, Lp pooling, Lp normalization and
max-pooling indices.

Layouts are ONNX's (``N, C, *spatial``); transposed-convolution weights are ``(C, M/group,
*kernel)``. Padding is explicit (``pads = begins + ends``), resolved by the frontend.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from .nn import _pool_geom, _pool_type, _sp, _window_attrs, same_dtypes
from .registry import REQUIRED, OpPattern, normalize_axis, register_op


# conv_transpose ----------------------------------------------------------------------------------

def _ct_geom(xshape, wshape, attrs):
    nsp = len(xshape) - 2
    s, d, p = _window_attrs(attrs, nsp)
    op = _sp(attrs["output_padding"], nsp, 0)
    k = wshape[2:]
    full = [s[i] * (xshape[2 + i] - 1) + op[i] + (k[i] - 1) * d[i] + 1 for i in range(nsp)]
    out = attrs["output_shape"]
    out = list(out) if out else [full[i] - p[i] - p[nsp + i] for i in range(nsp)]
    return nsp, s, d, p, list(k), out


def _ct_type(types, attrs):
    same_dtypes(types, "nn.conv_transpose")
    x, w = types[0], types[1]
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ShapeMismatchError(f"nn.conv_transpose: input {x.shape} and weight {w.shape} must "
                                 f"have the same rank >= 3")
    g = attrs["group"]
    if w.shape[0] != x.shape[1] or x.shape[1] % g:
        raise ShapeMismatchError(f"nn.conv_transpose: weight in-channels {w.shape[0]} != input "
                                 f"channels {x.shape[1]} (group {g})")
    _, _, _, _, _, out = _ct_geom(x.shape, w.shape, attrs)
    if any(o <= 0 for o in out):
        raise ShapeMismatchError(f"nn.conv_transpose: empty output {out}")
    m = w.shape[1] * g
    if len(types) == 3 and types[2].shape != (m,):
        raise ShapeMismatchError(f"nn.conv_transpose: bias {types[2].shape} != ({m},)")
    return [TensorType((x.shape[0], m, *out), x.dtype)]


def _ct_ref(xs, attrs):
    x, w = xs[0].astype(np.float64), xs[1].astype(np.float64)
    nsp, s, d, p, k, out = _ct_geom(x.shape, w.shape, attrs)
    g = attrs["group"]
    cg, mg = x.shape[1] // g, w.shape[1]
    full = [max(out[i] + p[i], s[i] * (x.shape[2 + i] - 1) + (k[i] - 1) * d[i] + 1)
            for i in range(nsp)]
    y = np.zeros((x.shape[0], mg * g, *full), np.float64)
    for gi in range(g):
        xg = x[:, gi * cg:(gi + 1) * cg]
        for kk in np.ndindex(*k):
            contrib = np.einsum("nc...,cm->nm...", xg, w[gi * cg:(gi + 1) * cg][(slice(None),
                                                                                   slice(None)) + kk])
            sl = tuple(slice(kk[i] * d[i], kk[i] * d[i] + s[i] * (x.shape[2 + i] - 1) + 1, s[i])
                       for i in range(nsp))
            y[(slice(None), slice(gi * mg, (gi + 1) * mg)) + sl] += contrib
    y = y[(slice(None), slice(None)) + tuple(slice(p[i], p[i] + out[i]) for i in range(nsp))]
    if y.shape[2:] != tuple(out):  # output_shape past the computed extent: zeros
        z = np.zeros(y.shape[:2] + tuple(out))
        z[(slice(None), slice(None)) + tuple(slice(0, n) for n in y.shape[2:])] = y
        y = z
    if len(xs) == 3:
        y = y + xs[2].astype(np.float64).reshape((1, -1) + (1,) * nsp)
    return [y.astype(xs[0].dtype)]


def _ct_compute(inputs, attrs, out_types):
    x, w = inputs[0], inputs[1]
    nsp, s, d, p, k, out = _ct_geom(x.shape, w.shape, attrs)
    g = attrs["group"]
    cg, mg = x.shape[1] // g, w.shape[1]
    rc = te.reduce_axis(cg, "tc")
    rk = [te.reduce_axis(k[i], f"tk{i}") for i in range(nsp)]

    def f(n, m, *o):
        conds, pos = [], []
        for i in range(nsp):
            num = o[i] + p[i] - rk[i].var * d[i]
            conds += [te.ge(num, 0), te.lt(num, s[i] * (x.shape[2 + i] - 1) + 1)]
            if s[i] > 1:
                conds.append(te.eq(num % s[i], 0))
                pos.append(num // s[i])
            else:
                pos.append(num)
        c = rc.var if g == 1 else (m // mg) * cg + rc.var
        wm = m if g == 1 else m % mg
        return te.sum(x[(n, c, *pos)] * w[(c, wm, *[r.var for r in rk])], axis=[rc] + rk,
                      where=te.all_of(*conds))
    y = te.compute(out_types[0].shape, f, name="conv_transpose")
    if len(inputs) == 3:
        b = inputs[2]
        y = te.compute(out_types[0].shape, lambda n, m, *o: y[(n, m, *o)] + b[m], name="ct_bias")
    return [y]


register_op("nn.conv_transpose", infer_type=_ct_type, reference=_ct_ref, compute=_ct_compute,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(2, 3),
            attrs={"strides": None, "pads": None, "dilations": None, "group": 1,
                   "output_padding": None, "output_shape": None},
            doc="transposed convolution of x (N, C, *sp) with w (C, M/group, *k), explicit pads "
                "cropping the full output, output_padding/output_shape extending it, optional "
                "bias (M,) (ONNX ConvTranspose)")


# lp_pool ---------------------------------------------------------------------------------------

def _lp_pool_ref(xs, attrs):
    x = xs[0].astype(np.float64)
    nsp, k, s, d, p, out = _pool_geom(x.shape, attrs)
    y = np.zeros(x.shape[:2] + tuple(out))
    for o in np.ndindex(*out):
        acc = np.zeros(x.shape[:2])
        for kk in np.ndindex(*k):
            pos = [o[i] * s[i] + kk[i] * d[i] - p[i] for i in range(nsp)]
            if all(0 <= pos[i] < x.shape[2 + i] for i in range(nsp)):
                acc += np.abs(x[(slice(None), slice(None)) + tuple(pos)]) ** attrs["p"]
        y[(slice(None), slice(None)) + o] = acc ** (1.0 / attrs["p"])
    return [y.astype(xs[0].dtype)]


def _lp_pool_compute(inputs, attrs, out_types):
    x = inputs[0]
    nsp, k, s, d, p, out = _pool_geom(x.shape, attrs)
    pp = float(attrs["p"])
    rk = [te.reduce_axis(k[i], f"lk{i}") for i in range(nsp)]

    def f(n, c, *o):
        conds, pos = [], []
        for i in range(nsp):
            e = o[i] * s[i] + rk[i].var * d[i] - p[i]
            conds += [te.ge(e, 0), te.lt(e, x.shape[2 + i])]
            pos.append(e)
        v = te.abs(x[(n, c, *pos)])
        term = v * v if pp == 2 else (v if pp == 1 else te.power(v, te.const(pp, x.dtype)))
        return te.sum(term, axis=rk, where=te.all_of(*conds))
    acc = te.compute(out_types[0].shape, f, name="lp_pool_sum")
    if pp == 1:
        return [acc]
    return [te.compute(out_types[0].shape, lambda *i: (te.sqrt(acc[i]) if pp == 2 else
                                                       te.power(acc[i], te.const(1 / pp, x.dtype))),
                       name="lp_pool")]


register_op("nn.lp_pool", infer_type=_pool_type, reference=_lp_pool_ref, compute=_lp_pool_compute,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            attrs={"kernel_shape": REQUIRED, "strides": None, "pads": None, "dilations": None,
                   "ceil_mode": 0, "p": 2},
            doc="(sum over the window of |x|^p)^(1/p), padding excluded (ONNX LpPool)")


# lp_normalization --------------------------------------------------------------------------------

def _lpn_ref(xs, attrs):
    x = xs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    xf = x.astype(np.float64)
    n = np.sum(np.abs(xf), axis=ax, keepdims=True) if attrs["p"] == 1 else \
        np.sqrt(np.sum(xf * xf, axis=ax, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(n == 0, 0, xf / n)
    return [y.astype(x.dtype)]


def _lpn_compute(inputs, attrs, out_types):
    x = inputs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    keep = tuple(1 if i == ax else n for i, n in enumerate(x.shape))
    r = te.reduce_axis(x.shape[ax], "ln")

    def at(i, v):
        return tuple(v if a == ax else e for a, e in enumerate(i))

    def fsum(*i):
        v = x[at(i, r.var)]
        return te.sum(te.abs(v) if attrs["p"] == 1 else v * v, axis=r)
    nrm = te.compute(keep, fsum, name="lpn_norm")
    zero = te.const(0, x.dtype)

    def f(*i):
        n = nrm[at(i, 0)]
        n = n if attrs["p"] == 1 else te.sqrt(n)
        return te.select(te.eq(n, zero), zero, x[i] / n)
    return [te.compute(x.shape, f, name="lp_normalize")]


def _lpn_type(types, attrs):
    if attrs["p"] not in (1, 2):
        raise ShapeMismatchError(f"nn.lp_normalize: p must be 1 or 2, got {attrs['p']}")
    normalize_axis(attrs["axis"], types[0].ndim, "nn.lp_normalize: ")
    return [types[0]]


register_op("nn.lp_normalize", infer_type=_lpn_type, reference=_lpn_ref, compute=_lpn_compute,
            pattern=OpPattern.OPAQUE, attrs={"axis": -1, "p": 2},
            doc="x divided by its L1/L2 norm along axis (0 where the norm is 0) "
                "(ONNX LpNormalization)")


# max_pool indices ------------------------------------------------------------------------------

def _mpi_type(types, attrs):
    y = _pool_type(types, attrs)[0]
    return [y, TensorType(y.shape, "int64")]


def _mpi_ref(xs, attrs):
    x = xs[0]
    nsp, k, s, d, p, out = _pool_geom(x.shape, attrs)
    N, C = x.shape[:2]
    y = np.full((N, C, *out), -np.inf)
    idx = np.zeros((N, C, *out), np.int64)
    strides = np.cumprod((list(x.shape[2:]) + [1])[::-1])[::-1][1:]
    col_major = attrs["storage_order"] == 1
    for o in np.ndindex(*out):
        for kk in np.ndindex(*k):
            pos = [o[i] * s[i] + kk[i] * d[i] - p[i] for i in range(nsp)]
            if not all(0 <= pos[i] < x.shape[2 + i] for i in range(nsp)):
                continue
            v = x[(slice(None), slice(None)) + tuple(pos)].astype(np.float64)
            sel = (slice(None), slice(None)) + o
            better = v > y[sel]
            if col_major:
                flat = sum(pos[i] * int(np.prod(x.shape[2:2 + i])) for i in range(nsp))
            else:
                flat = sum(pos[i] * int(strides[i]) for i in range(nsp))
            base = (np.arange(N)[:, None] * C + np.arange(C)[None, :]) * int(np.prod(x.shape[2:]))
            y[sel] = np.where(better, v, y[sel])
            idx[sel] = np.where(better, base + flat, idx[sel])
    return [y.astype(x.dtype), idx]


def _mpi_compute(inputs, attrs, out_types):
    x = inputs[0]
    nsp, k, s, d, p, out = _pool_geom(x.shape, attrs)
    C = x.shape[1]
    sp = x.shape[2:]
    spatial = int(np.prod(sp))
    rk = [te.reduce_axis(k[i], f"mk{i}") for i in range(nsp)]
    rk2 = [te.reduce_axis(k[i], f"mj{i}") for i in range(nsp)]
    oshape = out_types[0].shape

    def window(o, r):
        conds, pos = [], []
        for i in range(nsp):
            e = o[i] * s[i] + r[i].var * d[i] - p[i]
            conds += [te.ge(e, 0), te.lt(e, sp[i])]
            pos.append(e)
        return te.all_of(*conds), pos
    mx = te.compute(oshape, lambda n, c, *o: te.max(
        x[(n, c, *window(o, rk)[1])], axis=rk, where=window(o, rk)[0]), name="mp_max")

    def fidx(n, c, *o):
        cond, pos = window(o, rk2)
        if attrs["storage_order"] == 1:
            flat, mul = 0, 1
            for i in range(nsp):
                flat = flat + pos[i] * mul
                mul *= sp[i]
        else:
            flat = 0
            for i in range(nsp):
                flat = flat * sp[i] + pos[i]
        key = (n * C + c) * spatial + flat
        hit = te.all_of(cond, te.eq(x[(n, c, *pos)], mx[(n, c, *o)]))
        return te.min(te.cast("int64", key), axis=rk2, where=hit)
    return [mx, te.compute(oshape, fidx, name="mp_index")]


register_op("nn.max_pool_with_indices", infer_type=_mpi_type, reference=_mpi_ref,
            compute=_mpi_compute, pattern=OpPattern.OPAQUE,
            attrs={"kernel_shape": REQUIRED, "strides": None, "pads": None, "dilations": None,
                   "ceil_mode": 0, "storage_order": 0},
            doc="max pooling and the flat int64 index (over N, C and the spatial dims, row-major "
                "or column-major spatial with storage_order=1) of each window's first maximum "
                "(ONNX MaxPool with Indices)")
