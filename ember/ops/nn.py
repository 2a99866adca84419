"""Neural-network operators: convolution, pooling, normalization, softmax, dense products.

Layouts are ONNX's: activations ``(N, C, *spatial)`` (NCHW for 2-D), convolution weights
``(M, C/group, *kernel)``. Padding is explicit (``pads = begins + ends``, one per spatial dim):
the ONNX frontend resolves ``auto_pad`` before building these operators.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import Cast, Expr, is_float
from .elemwise import broadcast_load
from .registry import REQUIRED, OpPattern, broadcast_shapes, normalize_axis, register_op, same_dim


def _sp(attr, n, default):
    return tuple(attr) if attr is not None else (default,) * n


def _window_attrs(attrs, nsp: int):
    """``(strides, dilations, pads)`` of a convolution's or pooling's ``attrs``, ONNX defaults
    (1, 1, 0) when absent; pads hold the ``nsp`` begins then the ``nsp`` ends."""
    return (_sp(attrs["strides"], nsp, 1), _sp(attrs["dilations"], nsp, 1),
            _sp(attrs["pads"], 2 * nsp, 0))


def _in_bounds(conds: list, e: Expr, extent: int, lo_pad: int, hi_pad: int):
    if lo_pad > 0:
        conds.append(te.ge(e, 0))
    if hi_pad > 0:
        conds.append(te.lt(e, extent))


# layouts ----------------------------------------------------------------------------------------

def channels_last(attrs, ndim: int, op: str = "") -> bool:
    """True when ``attrs["data_layout"]`` puts channels last (``"NHWC"``, ``"NWC"``,
    ``"NDHWC"``); ``None`` or a channels-first string (``"NCHW"``...) gives False.

    Raises:
        ShapeMismatchError: a layout string of the wrong rank or an unknown form.
    """
    lay = attrs.get("data_layout")
    if lay is None:
        return False
    sp = "DHW"[3 - (ndim - 2):] if 2 <= ndim <= 5 else None  # the spatial letters, in order
    if (len(lay) != ndim or lay[0] != "N" or ("C" not in lay)
            or lay.index("C") not in (1, ndim - 1)
            or (sp is not None and lay not in ("NC" + sp, "N" + sp + "C"))):
        raise ShapeMismatchError(f"{op}: data_layout {lay!r} does not fit a rank-{ndim} input "
                                 f"(use e.g. 'NCHW' or 'NHWC')")
    return lay.index("C") == ndim - 1 and ndim > 2


def out_channels_last(attrs, ndim: int, op: str = "") -> bool:
    """True when the output of a layout-aware operator is channels-last: ``attrs["out_layout"]``
    when given (``nn.conv`` only: e.g. ``data_layout="NCHW", out_layout="NHWC"`` reads a
    channels-first image and writes channels-last), else as ``data_layout``.

    Raises:
        ShapeMismatchError: a layout string of the wrong rank or an unknown form.
    """
    if attrs.get("out_layout") is None:
        return channels_last(attrs, ndim, op)
    return channels_last({"data_layout": attrs["out_layout"]}, ndim, f"{op} (out_layout)")


def to_channels_first(a: np.ndarray) -> np.ndarray:
    """``(N, *sp, C) -> (N, C, *sp)``."""
    return np.moveaxis(a, -1, 1)


def to_channels_last(a: np.ndarray) -> np.ndarray:
    """``(N, C, *sp) -> (N, *sp, C)``."""
    return np.moveaxis(a, 1, -1)


def _cf_type(t: TensorType) -> TensorType:
    return TensorType((t.shape[0], t.shape[-1]) + tuple(t.shape[1:-1]), t.dtype)


def _cl_type(t: TensorType) -> TensorType:
    return TensorType((t.shape[0],) + tuple(t.shape[2:]) + (t.shape[1],), t.dtype)


def _layout_aware(infer, ref, name):
    """Wrap a channels-first type inference and reference so they also take channels-last
    inputs (``data_layout`` ending in C): transpose in, run, transpose out (the output's layout
    is ``out_layout`` when the attrs have one, see ``out_channels_last``)."""
    def infer2(types, attrs):
        nd = types[0].ndim
        x = _cf_type(types[0]) if channels_last(attrs, nd, name) else types[0]
        ys = infer([x] + list(types[1:]), attrs)
        return [_cl_type(t) for t in ys] if out_channels_last(attrs, nd, name) else ys

    def ref2(xs, attrs):
        nd = xs[0].ndim
        x = to_channels_first(xs[0]) if channels_last(attrs, nd, name) else xs[0]
        ys = ref([x] + list(xs[1:]), attrs)
        if not out_channels_last(attrs, nd, name):
            return ys
        return [np.ascontiguousarray(to_channels_last(y)) for y in ys]
    return infer2, ref2


# convolution -----------------------------------------------------------------------------------

def conv_out_dim(size: int, k: int, s: int, d: int, pb: int, pe: int) -> int:
    """Output length of a convolution along one spatial dim (floor rounding)."""
    return (size + pb + pe - d * (k - 1) - 1) // s + 1


def same_dtypes(types, op: str) -> None:
    """Raise ``ShapeMismatchError`` unless every input of ``op`` has the first one's dtype
    (data, weight and bias of a convolution or GEMM: ONNX gives them one type ``T``)."""
    if any(t.dtype != types[0].dtype for t in types[1:]):
        raise ShapeMismatchError(f"{op}: input dtypes differ ({', '.join(t.dtype for t in types)}); "
                                 f"cast the weights/bias to the data's dtype")


def _conv_type(types, attrs):
    same_dtypes(types, "nn.conv")
    x, w = types[0], types[1]
    nsp = x.ndim - 2
    if nsp < 1 or w.ndim != x.ndim:
        raise ShapeMismatchError(f"nn.conv: input rank {x.ndim} and weight rank {w.ndim} must match "
                                 f"and be at least 3")
    g = attrs["group"]
    if x.shape[1] != w.shape[1] * g:
        raise ShapeMismatchError(f"nn.conv: input channels {x.shape[1]} != weight in-channels "
                                 f"{w.shape[1]} x group {g}")
    if w.shape[0] % g:
        raise ShapeMismatchError(f"nn.conv: {w.shape[0]} output channels not divisible by group {g}")
    s, d, p = _window_attrs(attrs, nsp)
    out = [x.shape[0], w.shape[0]]
    for i in range(nsp):
        o = conv_out_dim(x.shape[2 + i], w.shape[2 + i], s[i], d[i], p[i], p[nsp + i])
        if o <= 0:
            raise ShapeMismatchError(f"nn.conv: output spatial dim {i} would be {o} (input "
                                     f"{x.shape}, kernel {w.shape[2:]})")
        out.append(o)
    if len(types) == 3 and types[2].shape not in ((w.shape[0],),):
        raise ShapeMismatchError(f"nn.conv: bias shape {types[2].shape} != ({w.shape[0]},)")
    return [TensorType(tuple(out), x.dtype)]


def _conv_ref(xs, attrs):
    x, w = xs[0], xs[1]
    nsp = x.ndim - 2
    s, d, p = _window_attrs(attrs, nsp)
    g = attrs["group"]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p[i], p[nsp + i]) for i in range(nsp)])
    M, Cg = w.shape[0], w.shape[1]
    k = w.shape[2:]
    outsp = [conv_out_dim(x.shape[2 + i], k[i], s[i], d[i], p[i], p[nsp + i]) for i in range(nsp)]
    y = np.zeros((x.shape[0], M, *outsp), np.float64)
    Mg = M // g
    for gi in range(g):
        xg = xp[:, gi * Cg:(gi + 1) * Cg]
        wg = w[gi * Mg:(gi + 1) * Mg].astype(np.float64)
        for kidx in np.ndindex(*k):
            sl = tuple(slice(kidx[i] * d[i], kidx[i] * d[i] + s[i] * (outsp[i] - 1) + 1, s[i])
                       for i in range(nsp))
            patch = xg[(slice(None), slice(None)) + sl]  # N, Cg, *out
            y[:, gi * Mg:(gi + 1) * Mg] += np.einsum("nc...,mc->nm...", patch,
                                                     wg[(slice(None), slice(None)) + kidx])
    if len(xs) == 3:
        y += xs[2].astype(np.float64).reshape((1, M) + (1,) * nsp)
    return [y.astype(x.dtype)]


def _conv_compute(inputs, attrs, out_types):
    x, w = inputs[0], inputs[1]
    nsp = x.ndim - 2
    s, d, p = _window_attrs(attrs, nsp)
    g = attrs["group"]
    M, Cg = w.shape[0], w.shape[1]
    Mg = M // g
    out_shape = out_types[0].shape
    rc = te.reduce_axis(Cg, "rc")
    rk = [te.reduce_axis(w.shape[2 + i], f"rk{i}") for i in range(nsp)]

    def f(n, m, *o):
        conds: list = []
        pos = []
        for i in range(nsp):
            e = o[i] * s[i] + rk[i].var * d[i] - p[i]
            _in_bounds(conds, e, x.shape[2 + i], p[i], p[nsp + i])
            pos.append(e)
        c = rc.var if g == 1 else (m // Mg) * Cg + rc.var
        val = x[(n, c, *pos)] * w[(m, rc.var, *[r.var for r in rk])]
        if conds:
            val = te.select(te.all_of(*conds), val, te.const(0, x.dtype))
        return te.sum(val, axis=[rc] + rk)

    y = te.compute(out_shape, f, name="conv")
    if len(inputs) == 3:
        b = inputs[2]
        y = te.compute(out_shape, lambda n, m, *o: y[(n, m, *o)] + b[m], name="conv_bias")
    return [y]


def _conv_compute_cl(inputs, attrs, out_types, in_cl: bool = True):
    """Channels-last convolution: y (N, *osp, M) from x (N, *sp, C), or from a channels-first
    x (N, C, *sp) when ``in_cl`` is False (``data_layout="NCHW", out_layout="NHWC"``: a
    stem convolution reading the network's image without a separate transpose kernel);
    padding is a materialized channels-last ``pad`` stage (which also does the layout change
    of a channels-first x, in the same pass) so the reduction reads plain loads of contiguous
    channels (what the GEMM schedule tensorizes)."""
    x, w = inputs[0], inputs[1]
    nsp = x.ndim - 2
    s, d, p = _window_attrs(attrs, nsp)
    g = attrs["group"]
    M, Cg = w.shape[0], w.shape[1]
    Mg = M // g
    out_shape = out_types[0].shape
    sp0 = 1 if in_cl else 2  # first spatial dim of x

    def at(n, c, pos):  # x's index tuple in its own layout
        return (n, *pos, c) if in_cl else (n, c, *pos)
    widen = _widened_bf16_source(x)
    if widen is not None and (any(p) or not in_cl):
        x = widen  # pad the bf16 data: the reduction reads bf16 (the vdpbf16ps micro-kernel)
    if any(p) or not in_cl:
        psh = [x.shape[0]] + [x.shape[sp0 + i] + p[i] + p[nsp + i] for i in range(nsp)] + \
            [x.shape[1 if not in_cl else -1]]

        def fpad(n, *r):
            sp_, c = r[:-1], r[-1]
            conds: list = []
            pos = []
            for i in range(nsp):
                e = sp_[i] - p[i]
                _in_bounds(conds, e, x.shape[sp0 + i], p[i], p[nsp + i])
                pos.append(e)
            v = x[at(n, c, pos)]
            return te.select(te.all_of(*conds), v, te.const(0, x.dtype)) if conds else v
        xp = te.compute(tuple(psh), fpad, name="pad", materialize=True)
    else:
        xp = x
    rc = te.reduce_axis(Cg, "rc")
    rk = [te.reduce_axis(w.shape[2 + i], f"rk{i}") for i in range(nsp)]

    def f(n, *r):
        o, m = r[:-1], r[-1]
        pos = [o[i] * s[i] + rk[i].var * d[i] for i in range(nsp)]
        c = rc.var if g == 1 else (m // Mg) * Cg + rc.var
        xv = xp[(n, *pos, c)]
        if xv.dtype == "bfloat16":
            xv = Cast("float32", xv)
        return te.sum(xv * w[(m, rc.var, *[q.var for q in rk])], axis=[rc] + rk)

    y = te.compute(out_shape, f, name="conv")
    if len(inputs) == 3:
        b = inputs[2]
        y = te.compute(out_shape, lambda n, *r: y[(n, *r)] + b[r[-1]], name="conv_bias")
    return [y]


def _widened_bf16_source(x):
    """The bfloat16 tensor ``x`` is the float32 cast of, elementwise (ToMixedPrecision's bf16
    storage read in float32), or ``None``."""
    from ..te.tensor import ComputeOp
    from ..tir.expr import Load
    op = x.op
    if not isinstance(op, ComputeOp) or op.materialize:
        return None
    b = op.body
    if not (isinstance(b, Cast) and b.dtype == "float32" and isinstance(b.value, Load)
            and b.value.dtype == "bfloat16"):
        return None
    ld = b.value
    if tuple(ld.src.shape) != tuple(x.shape) or len(ld.indices) != len(op.axis) or not all(
            i is a.var for i, a in zip(ld.indices, op.axis)):
        return None
    return ld.src


def _conv_compute_any(inputs, attrs, out_types):
    nd = inputs[0].ndim
    in_cl = channels_last(attrs, nd, "nn.conv")
    if out_channels_last(attrs, nd, "nn.conv"):
        return _conv_compute_cl(inputs, attrs, out_types, in_cl)
    if in_cl:
        raise ShapeMismatchError("nn.conv: a channels-last input with a channels-first "
                                 "out_layout is not supported (use out_layout=None)")
    return _conv_compute(inputs, attrs, out_types)


_conv_type_l, _conv_ref_l = _layout_aware(_conv_type, _conv_ref, "nn.conv")
register_op("nn.conv", infer_type=_conv_type_l, reference=_conv_ref_l, compute=_conv_compute_any,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(2, 3),
            attrs={"strides": None, "pads": None, "dilations": None, "group": 1,
                   "data_layout": None, "out_layout": None},
            doc="N-d convolution (cross-correlation) of x (N, C, *sp) with w (M, C/group, *k) "
                "plus optional bias (M,), explicit pads (ONNX Conv); data_layout 'NHWC' (any "
                "channels-last string) takes and gives channels-last activations, weights stay "
                "(M, C/group, *k); out_layout (default: data_layout) 'NHWC' with data_layout "
                "'NCHW' reads channels-first and writes channels-last")


# pooling ---------------------------------------------------------------------------------------

def pool_out_dim(size, k, s, d, pb, pe, ceil_mode) -> int:
    """Pooling output length along one dim, ONNX rules (ceil_mode drops a last window that would
    start in the end padding)."""
    num = size + pb + pe - d * (k - 1) - 1
    if ceil_mode:
        o = -(-num // s) + 1
        if (o - 1) * s >= size + pb:
            o -= 1
        return o
    return num // s + 1


def _pool_geom(xshape, attrs):
    nsp = len(xshape) - 2
    k = tuple(attrs["kernel_shape"])
    s, d, p = _window_attrs(attrs, nsp)
    out = [pool_out_dim(xshape[2 + i], k[i], s[i], d[i], p[i], p[nsp + i], attrs["ceil_mode"])
           for i in range(nsp)]
    return nsp, k, s, d, p, out


def _pool_type(types, attrs):
    x = types[0]
    if x.ndim < 3 or len(attrs["kernel_shape"]) != x.ndim - 2:
        raise ShapeMismatchError(f"pooling: input rank {x.ndim} does not match kernel "
                                 f"{attrs['kernel_shape']}")
    _, _, _, _, _, out = _pool_geom(x.shape, attrs)
    if any(o <= 0 for o in out):
        raise ShapeMismatchError(f"pooling: empty output {out} for input {x.shape}")
    return [TensorType((x.shape[0], x.shape[1], *out), x.dtype)]


def _pool_windows(x, attrs):
    """Yield (out index, list of (input index or None for padding, inside_pads)) per window."""
    nsp, k, s, d, p, out = _pool_geom(x.shape, attrs)
    for o in np.ndindex(*out):
        pts = []
        for kk in np.ndindex(*k):
            pos = [o[i] * s[i] + kk[i] * d[i] - p[i] for i in range(nsp)]
            inside = all(0 <= pos[i] < x.shape[2 + i] for i in range(nsp))
            in_pads = all(-p[i] <= pos[i] < x.shape[2 + i] + p[nsp + i] for i in range(nsp))
            pts.append((tuple(pos) if inside else None, in_pads))
        yield o, pts


def _max_pool_ref(xs, attrs):
    x = xs[0]
    _, _, _, _, _, out = _pool_geom(x.shape, attrs)
    y = np.full(x.shape[:2] + tuple(out), -np.inf, np.float64)
    for o, pts in _pool_windows(x, attrs):
        vals = [x[(slice(None), slice(None)) + q] for q, _ in pts if q is not None]
        y[(slice(None), slice(None)) + o] = np.max(vals, axis=0)
    return [y.astype(x.dtype)]


def _avg_pool_ref(xs, attrs):
    x = xs[0]
    _, _, _, _, _, out = _pool_geom(x.shape, attrs)
    y = np.zeros(x.shape[:2] + tuple(out), np.float64)
    for o, pts in _pool_windows(x, attrs):
        vals = [x[(slice(None), slice(None)) + q].astype(np.float64) for q, _ in pts if q is not None]
        n = sum(1 for _, ip in pts if ip) if attrs["count_include_pad"] else len(vals)
        y[(slice(None), slice(None)) + o] = np.sum(vals, axis=0) / n
    return [y.astype(x.dtype)]


class _CFView:
    """A channels-last tensor read with channels-first indices ``(n, c, *sp)``."""

    def __init__(self, t):
        self.t = t
        self.shape = (t.shape[0], t.shape[-1]) + tuple(t.shape[1:-1])
        self.dtype = t.dtype
        self.ndim = t.ndim

    def __getitem__(self, idx):
        return self.t[(idx[0], *idx[2:], idx[1])]


def _out(cl: bool, cf_shape, fbody, name):
    """``te.compute`` of a channels-first body ``fbody(n, c, *sp)`` in the output layout."""
    if not cl:
        return te.compute(cf_shape, fbody, name=name)
    shape = (cf_shape[0],) + tuple(cf_shape[2:]) + (cf_shape[1],)
    return te.compute(shape, lambda n, *r: fbody(n, r[-1], *r[:-1]), name=name)


def _pool_compute(kind):
    def compute(inputs, attrs, out_types):
        cl = channels_last(attrs, inputs[0].ndim, f"nn.{kind}_pool")
        x = _CFView(inputs[0]) if cl else inputs[0]
        nsp, k, s, d, p, out = _pool_geom(x.shape, attrs)
        oshape = (x.shape[0], x.shape[1]) + tuple(out)

        def window(o, rk, lo_pads, hi_pads):
            conds, pos = [], []
            for i in range(nsp):
                e = o[i] * s[i] + rk[i].var * d[i] - p[i]
                # positions past the input (padding or ceil-mode overhang) are skipped
                lo = 0 if lo_pads is None else -p[i]
                hi = x.shape[2 + i] if hi_pads is None else x.shape[2 + i] + p[nsp + i]
                conds.append(te.ge(e, lo))
                conds.append(te.lt(e, hi))
                pos.append(e)
            return te.all_of(*conds), pos

        rk = [te.reduce_axis(k[i], f"pk{i}") for i in range(nsp)]
        if kind == "max":
            def fmax(n, c, *o):
                cond, pos = window(o, rk, None, None)
                return te.max(x[(n, c, *pos)], axis=rk, where=cond)
            return [_out(cl, oshape, fmax, "maxpool")]
        acc_dt = x.dtype

        def fsum(n, c, *o):
            cond, pos = window(o, rk, None, None)
            return te.sum(x[(n, c, *pos)], axis=rk, where=cond)
        total = _out(cl, oshape, fsum, "poolsum")
        include = bool(attrs["count_include_pad"])
        if all(di == 1 for di in d):
            # undilated windows: the divisor in closed form, per axis the overlap of the window
            # [o*s - p, o*s - p + k) with the counted range (the input, plus the pads when
            # count_include_pad; ceil-mode overhang never counts) -- so the kernel has one
            # reduction, which the channel-vectorized pooling rule takes
            def fdiv(n, *r):
                o = r[:-1] if cl else r[1:]
                cnt = None
                for i in range(nsp):
                    lo = o[i] * s[i] - p[i]
                    a, b = (-p[i], x.shape[2 + i] + p[nsp + i]) if include else \
                        (0, x.shape[2 + i])
                    ci = te.maximum(te.minimum(lo + k[i], b) - te.maximum(lo, a), 0)
                    cnt = ci if cnt is None else cnt * ci
                return total[(n, *r)] / te.cast(acc_dt, cnt)
            return [te.compute(out_types[0].shape if cl else oshape, fdiv, name="avgpool")]
        rk2 = [te.reduce_axis(k[i], f"ck{i}") for i in range(nsp)]

        def fcount(n, c, *o):
            cond, _ = window(o, rk2, True if include else None, True if include else None)
            return te.sum(te.const(1, acc_dt), axis=rk2, where=cond)
        count = te.compute(oshape[2:], lambda *o: fcount(0, 0, *o), name="poolcount")
        if cl:
            return [te.compute(out_types[0].shape,
                               lambda n, *r: total[(n, *r)] / count[r[:-1]], name="avgpool")]
        return [te.compute(oshape, lambda n, c, *o: total[(n, c, *o)] / count[o], name="avgpool")]
    return compute


_POOL_ATTRS = {"kernel_shape": REQUIRED, "strides": None, "pads": None, "dilations": None,
               "ceil_mode": 0}
_POOL_ATTRS["data_layout"] = None
_max_t, _max_r = _layout_aware(_pool_type, _max_pool_ref, "nn.max_pool")
_avg_t, _avg_r = _layout_aware(_pool_type, _avg_pool_ref, "nn.avg_pool")
register_op("nn.max_pool", infer_type=_max_t, reference=_max_r,
            compute=_pool_compute("max"),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            attrs=dict(_POOL_ATTRS), doc="N-d max pooling, explicit pads (ONNX MaxPool); "
                                         "data_layout as nn.conv")
register_op("nn.avg_pool", infer_type=_avg_t, reference=_avg_r,
            compute=_pool_compute("avg"),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            attrs=dict(_POOL_ATTRS, count_include_pad=0),
            doc="N-d average pooling; the divisor counts input positions, plus pad positions "
                "when count_include_pad (never ceil-mode overhang) (ONNX AveragePool)")


def _global_pool_type(types, attrs):
    x = types[0]
    if x.ndim < 2:
        raise ShapeMismatchError(f"global pooling needs rank >= 2, got {x.shape}")
    return [TensorType(x.shape[:2] + (1,) * (x.ndim - 2), x.dtype)]


def _global_pool_compute(kind):
    def compute(inputs, attrs, out_types):
        cl = channels_last(attrs, inputs[0].ndim, f"nn.global_{kind}_pool")
        x = _CFView(inputs[0]) if cl else inputs[0]
        rk = [te.reduce_axis(n, f"gk{i}") for i, n in enumerate(x.shape[2:])]
        red = te.max if kind == "max" else te.sum
        cf_shape = x.shape[:2] + (1,) * (x.ndim - 2)
        y = _out(cl, cf_shape, lambda n, c, *o: red(x[(n, c, *[r.var for r in rk])], axis=rk),
                 "gpool")
        if kind == "avg":
            cnt = float(np.prod(x.shape[2:]))
            y = te.compute(out_types[0].shape, lambda *i: y[i] / te.const(cnt, x.dtype),
                           name="gavg")
        return [y]
    return compute


_gavg_t, _gavg_r = _layout_aware(
    _global_pool_type,
    lambda xs, a: [xs[0].mean(axis=tuple(range(2, xs[0].ndim)), keepdims=True,
                              dtype=np.float64).astype(xs[0].dtype)], "nn.global_avg_pool")
_gmax_t, _gmax_r = _layout_aware(
    _global_pool_type,
    lambda xs, a: [xs[0].max(axis=tuple(range(2, xs[0].ndim)), keepdims=True)],
    "nn.global_max_pool")
register_op("nn.global_avg_pool", infer_type=_gavg_t, reference=_gavg_r,
            compute=_global_pool_compute("avg"),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs={"data_layout": None},
            doc="mean over all spatial dims, keeping them as 1 (ONNX GlobalAveragePool); "
                "data_layout as nn.conv")
register_op("nn.global_max_pool", infer_type=_gmax_t, reference=_gmax_r,
            compute=_global_pool_compute("max"),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs={"data_layout": None},
            doc="max over all spatial dims, keeping them as 1 (ONNX GlobalMaxPool); "
                "data_layout as nn.conv")


# normalization --------------------------------------------------------------------------------

def _bn_type(types, attrs):
    x = types[0]
    c = x.shape[1] if x.ndim > 1 else 1
    for t in types[1:]:
        if t.shape != (c,):
            raise ShapeMismatchError(f"nn.batch_norm: parameter shape {t.shape} != ({c},)")
    return [x]


def _bn_ref(xs, attrs):
    x, sc, b, m, v = xs
    shp = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - m.reshape(shp)) / np.sqrt(v.reshape(shp) + attrs["epsilon"]) * sc.reshape(shp) \
        + b.reshape(shp)
    return [y.astype(x.dtype)]


def _bn_compute(inputs, attrs, out_types):
    x, sc, b, m, v = inputs
    eps = attrs["epsilon"]

    def f(n, c, *r):
        return (x[(n, c, *r)] - m[c]) * (sc[c] / te.sqrt(v[c] + te.const(eps, x.dtype))) + b[c]
    return [te.compute(x.shape, f, name="bn")]


register_op("nn.batch_norm", infer_type=_bn_type, reference=_bn_ref, compute=_bn_compute,
            pattern=OpPattern.BROADCAST, num_inputs=(5, 5), attrs={"epsilon": 1e-5},
            doc="inference batch normalization over axis 1: (x - mean) / sqrt(var + eps) * scale "
                "+ bias (ONNX BatchNormalization, training_mode=0)")


def _lrn_ref(xs, attrs):
    x = xs[0].astype(np.float64)
    size, alpha, beta, bias = attrs["size"], attrs["alpha"], attrs["beta"], attrs["bias"]
    C = x.shape[1]
    sq = np.zeros_like(x)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    for c in range(C):
        sq[:, c] = (x[:, max(0, c - lo):min(C, c + hi + 1)] ** 2).sum(axis=1)
    return [(x / (bias + alpha / size * sq) ** beta).astype(xs[0].dtype)]


def _lrn_compute(inputs, attrs, out_types):
    x = inputs[0]
    size, alpha, beta, bias = attrs["size"], attrs["alpha"], attrs["beta"], attrs["bias"]
    C = x.shape[1]
    lo = (size - 1) // 2
    r = te.reduce_axis(size, "lrn")

    def fsq(n, c, *sp):
        cc = c - lo + r.var
        v = x[(n, cc, *sp)]
        return te.sum(v * v, axis=r, where=te.all_of(te.ge(cc, 0), te.lt(cc, C)))
    sq = te.compute(x.shape, fsq, name="lrn_sq")
    dt = x.dtype
    return [te.compute(x.shape, lambda *i: x[i] / te.power(
        te.const(bias, dt) + te.const(alpha / size, dt) * sq[i], te.const(beta, dt)), name="lrn")]


register_op("nn.lrn", infer_type=lambda t, a: [t[0]], reference=_lrn_ref, compute=_lrn_compute,
            pattern=OpPattern.OPAQUE,
            attrs={"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
            doc="local response normalization across channels (ONNX LRN)")


def _axis_softmax_compute(log: bool):
    def compute(inputs, attrs, out_types):
        x = inputs[0]
        ax = normalize_axis(attrs["axis"], x.ndim)
        kd = tuple(1 if i == ax else n for i, n in enumerate(x.shape))

        def at(idx, v):
            return tuple(v if i == ax else e for i, e in enumerate(idx))
        r1 = te.reduce_axis(x.shape[ax], "sm")
        mx = te.compute(kd, lambda *i: te.max(x[at(i, r1.var)], axis=r1), name="sm_max")
        r2 = te.reduce_axis(x.shape[ax], "ss")
        if not log and ax == x.ndim - 1:
            # rows along the last axis: exp once into a row buffer (per-row local under the
            # row-reduction schedule), summed, then scaled by the reciprocal of the sum
            e = te.compute(x.shape, lambda *i: te.exp(x[i] - mx[at(i, 0)]), name="sm_exp",
                           materialize=True)
            sm = te.compute(kd, lambda *i: te.sum(e[at(i, r2.var)], axis=r2), name="sm_sum")
            one = te.const(1, x.dtype)
            return [te.compute(x.shape, lambda *i: e[i] * (one / sm[at(i, 0)]),
                               name="softmax")]
        sm = te.compute(kd, lambda *i: te.sum(te.exp(x[at(i, r2.var)] - mx[i]), axis=r2),
                        name="sm_sum")
        if log:
            return [te.compute(x.shape, lambda *i: x[i] - mx[at(i, 0)] - te.log(sm[at(i, 0)]),
                               name="logsoftmax")]
        return [te.compute(x.shape, lambda *i: te.exp(x[i] - mx[at(i, 0)]) / sm[at(i, 0)],
                           name="softmax")]
    return compute


def _softmax_ref(log):
    def ref(xs, attrs):
        x = xs[0].astype(np.float64)
        ax = attrs["axis"]
        m = x.max(axis=ax, keepdims=True)
        e = np.exp(x - m)
        s = e.sum(axis=ax, keepdims=True)
        y = (x - m - np.log(s)) if log else e / s
        return [y.astype(xs[0].dtype)]
    return ref


def _float_same(name):
    def infer(types, attrs):
        if not is_float(types[0].dtype):
            raise ShapeMismatchError(f"{name} needs a floating-point input, got {types[0].dtype}")
        normalize_axis(attrs.get("axis", -1), types[0].ndim, f"{name}: ")
        return [types[0]]
    return infer


register_op("nn.softmax", infer_type=_float_same("nn.softmax"), reference=_softmax_ref(False),
            compute=_axis_softmax_compute(False), pattern=OpPattern.OPAQUE, attrs={"axis": -1},
            doc="exp(x) / sum(exp(x)) along one axis, max-subtracted (ONNX Softmax-13)")
register_op("nn.log_softmax", infer_type=_float_same("nn.log_softmax"),
            reference=_softmax_ref(True), compute=_axis_softmax_compute(True),
            pattern=OpPattern.OPAQUE, attrs={"axis": -1},
            doc="x - log(sum(exp(x))) along one axis (ONNX LogSoftmax-13)")


def _ln_type(types, attrs):
    x = types[0]
    ax = normalize_axis(attrs["axis"], x.ndim, "nn.layer_norm: ")
    norm = x.shape[ax:]
    for t in types[1:]:
        broadcast_shapes(norm, t.shape, where="nn.layer_norm scale/bias: ")
    return [x]


def _ln_ref(xs, attrs):
    x = xs[0].astype(np.float64)
    ax = normalize_axis(attrs["axis"], x.ndim)
    axes = tuple(range(ax, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    y = (x - m) / np.sqrt(v + attrs["epsilon"]) * xs[1]
    if len(xs) > 2:
        y = y + xs[2]
    return [y.astype(xs[0].dtype)]


def _ln_compute(inputs, attrs, out_types):
    x = inputs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    red_shape = x.shape[ax:]
    n = float(np.prod(red_shape))
    kd = x.shape[:ax] + (1,) * (x.ndim - ax)
    dt = x.dtype
    r1 = [te.reduce_axis(s, "ln") for s in red_shape]
    mean = te.compute(kd, lambda *i: te.sum(x[i[:ax] + tuple(r.var for r in r1)], axis=r1),
                      name="ln_sum")
    r2 = [te.reduce_axis(s, "lv") for s in red_shape]

    def fvar(*i):
        d = x[i[:ax] + tuple(r.var for r in r2)] - mean[i] / te.const(n, dt)
        return te.sum(d * d, axis=r2)
    var = te.compute(kd, fvar, name="ln_var")
    scale = inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    eps = attrs["epsilon"]

    def f(*i):
        k = i[:ax] + (0,) * (x.ndim - ax)
        y = (x[i] - mean[k] / te.const(n, dt)) / te.sqrt(var[k] / te.const(n, dt)
                                                          + te.const(eps, dt))
        y = y * broadcast_load(scale, i)
        if bias is not None:
            y = y + broadcast_load(bias, i)
        return y
    return [te.compute(x.shape, f, name="layer_norm")]


register_op("nn.layer_norm", infer_type=_ln_type, reference=_ln_ref, compute=_ln_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(2, 3), attrs={"axis": -1, "epsilon": 1e-5},
            doc="normalize over dims [axis, rank), then scale and bias (ONNX "
                "LayerNormalization-17, output Y)")


# dense products -------------------------------------------------------------------------------

def _gemm_type(types, attrs):
    same_dtypes(types, "nn.gemm")
    a, b = types[0], types[1]
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeMismatchError(f"nn.gemm: A {a.shape} and B {b.shape} must be 2-D")
    M, K = (a.shape[1], a.shape[0]) if attrs["trans_a"] else a.shape
    K2, N = (b.shape[1], b.shape[0]) if attrs["trans_b"] else b.shape
    if not same_dim(K, K2):
        raise ShapeMismatchError(f"nn.gemm: inner dims differ: A {a.shape} (trans_a="
                                 f"{attrs['trans_a']}) vs B {b.shape} (trans_b={attrs['trans_b']})")
    if len(types) == 3:
        if not all(map(same_dim, broadcast_shapes((M, N), types[2].shape, where="nn.gemm C: "),
                       (M, N))):
            raise ShapeMismatchError(f"nn.gemm: C {types[2].shape} does not broadcast to {(M, N)}")
    return [TensorType((M, N), a.dtype)]


def _gemm_ref(xs, attrs):
    a = xs[0].T if attrs["trans_a"] else xs[0]
    b = xs[1].T if attrs["trans_b"] else xs[1]
    y = attrs["alpha"] * (a.astype(np.float64) @ b.astype(np.float64))
    if len(xs) == 3:
        y = y + attrs["beta"] * xs[2].astype(np.float64)
    return [y.astype(xs[0].dtype)]


def _gemm_compute(inputs, attrs, out_types):
    a, b = inputs[0], inputs[1]
    M, N = out_types[0].shape
    K = a.shape[0] if attrs["trans_a"] else a.shape[1]
    k = te.reduce_axis(K, "gk")
    dt = a.dtype

    def f(i, j):
        av = a[k.var, i] if attrs["trans_a"] else a[i, k.var]
        bv = b[j, k.var] if attrs["trans_b"] else b[k.var, j]
        return te.sum(av * bv, axis=k)
    y = te.compute((M, N), f, name="gemm")
    alpha, beta = attrs["alpha"], attrs["beta"]
    c = inputs[2] if len(inputs) == 3 else None
    if alpha != 1.0 or c is not None:
        def g(i, j):
            v = y[i, j] if alpha == 1.0 else y[i, j] * te.const(alpha, dt)
            if c is not None:
                cv = broadcast_load(c, (i, j))
                v = v + (cv if beta == 1.0 else cv * te.const(beta, dt))
            return v
        y = te.compute((M, N), g, name="gemm_epilogue")
    return [y]


register_op("nn.gemm", infer_type=_gemm_type, reference=_gemm_ref, compute=_gemm_compute,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(2, 3),
            attrs={"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 0},
            doc="alpha * A' @ B' + beta * C, C broadcast to (M, N) (ONNX Gemm)")


def matmul_shape(a: Sequence, b: Sequence, where: str = "matmul: ") -> tuple:
    """Result shape of NumPy ``matmul`` (1-D operands promoted then squeezed)."""
    if len(a) == 0 or len(b) == 0:
        raise ShapeMismatchError(f"{where}operands must have rank >= 1")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if not same_dim(a2[-1], b2[-2]):
        raise ShapeMismatchError(f"{where}inner dims differ: {tuple(a)} @ {tuple(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2], where=where)
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return tuple(out)


def _matmul_type(types, attrs):
    a, b = types
    if a.dtype != b.dtype:
        raise ShapeMismatchError(f"matmul: dtypes differ ({a.dtype} vs {b.dtype})")
    return [TensorType(matmul_shape(a.shape, b.shape), a.dtype)]


def _matmul_ref(xs, attrs):
    a, b = xs
    if a.dtype.kind == "f":
        return [np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)]
    return [np.matmul(a, b)]


def _matmul_compute(inputs, attrs, out_types):
    a, b = inputs
    oshape = out_types[0].shape
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    K = a.shape[-1]
    k = te.reduce_axis(K, "mk")
    nb = len(oshape) - (0 if a_vec else 1) - (0 if b_vec else 1)  # batch rank of the output

    def f(*idx):
        batch = idx[:nb]
        rest = idx[nb:]
        i = None if a_vec else rest[0]
        j = None if b_vec else rest[-1]
        if a_vec:
            av = a[k.var]
        else:
            ab = a.shape[:-2]
            bi = [0 if d == 1 else batch[nb - len(ab) + t] for t, d in enumerate(ab)]
            av = a[(*bi, i, k.var)]
        if b_vec:
            bv = b[k.var]
        else:
            bb = b.shape[:-2]
            bi = [0 if d == 1 else batch[nb - len(bb) + t] for t, d in enumerate(bb)]
            bv = b[(*bi, k.var, j)]
        return te.sum(av * bv, axis=k)
    return [te.compute(oshape, f, name="matmul")]


register_op("matmul", infer_type=_matmul_type, reference=_matmul_ref, compute=_matmul_compute,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(2, 2),
            doc="NumPy matmul with batch broadcasting and 1-D promotion (ONNX MatMul)")


