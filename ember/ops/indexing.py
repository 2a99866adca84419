"""Indexing operators: gathers and scatters by index tensors, triangular masks, one-hot, tiling,
arg-reductions, top-k, running sums/products and sequence reversal.

Index tensors are read at run time; negative indices count from the end of their axis. A gather or
scatter whose index tensor is a kernel input checks every index first and fails with an
``InputError`` naming the node when one is out of range (ONNX makes it an error); indices
computed inside a fused kernel are clamped (never an out-of-bounds read or write). Scatters and running sums are imperative
kernels (``ember.ops.imperative``), the others one expression per output element.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import Expr, binop
from .imperative import imperative_kernel
from .registry import REQUIRED, OpPattern, normalize_axis, register_op

INDEX_DTYPES = ("int32", "int64")


def _check_index(t: TensorType, what: str):
    if t.dtype not in INDEX_DTYPES:
        raise ShapeMismatchError(f"{what} must be int32/int64, got {t.dtype}")


def norm_index(e: Expr, n: int) -> Expr:
    """``e`` (any int dtype) as an int64 index into an axis of length ``n``: negative values
    count from the end, the result is clamped to ``[0, n - 1]``."""
    j = te.cast("int64", e)
    j = te.select(te.lt(j, 0), j + n, j)
    return te.minimum(te.maximum(j, 0), max(n - 1, 0))


def _np_norm(idx: np.ndarray, n: int, what: str) -> np.ndarray:
    idx = np.asarray(idx, np.int64)
    idx = np.where(idx < 0, idx + n, idx)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ShapeMismatchError(f"{what}: index out of range for an axis of length {n}")
    return idx


# gather_elements ---------------------------------------------------------------------------------

def _ge_type(types, attrs):
    x, ind = types
    _check_index(ind, "gather_elements indices")
    if ind.ndim != x.ndim:
        raise ShapeMismatchError(f"gather_elements: indices rank {ind.ndim} != data rank {x.ndim}")
    normalize_axis(attrs["axis"], x.ndim, "gather_elements: ")
    return [TensorType(ind.shape, x.dtype)]


def _ge_ref(xs, attrs):
    x, ind = xs
    ax = normalize_axis(attrs["axis"], x.ndim)
    x = x[tuple(slice(None) if a == ax else slice(0, ind.shape[a]) for a in range(x.ndim))]
    return [np.take_along_axis(x, _np_norm(ind, x.shape[ax], "gather_elements"), axis=ax)]


def _ge_compute(inputs, attrs, out_types):
    x, ind = inputs
    ax = normalize_axis(attrs["axis"], x.ndim)

    def f(*i):
        j = norm_index(ind[i], x.shape[ax])
        return x[tuple(j if k == ax else v for k, v in enumerate(i))]
    n = x.shape[ax]
    return [te.compute(out_types[0].shape, f, name="gather_elements",
                       checks=[te.IndexCheck(ind, [(-n, n - 1)], "GatherElements index")])]


register_op("gather_elements", infer_type=_ge_type, reference=_ge_ref, compute=_ge_compute,
            pattern=OpPattern.INJECTIVE, num_inputs=(2, 2), attrs={"axis": 0},
            doc="out[i] = data[i with axis replaced by indices[i]] (ONNX GatherElements)")


# gather_nd ---------------------------------------------------------------------------------------

def _gnd_geom(xshape, ishape, b):
    m = ishape[-1]
    if b + m > len(xshape):
        raise ShapeMismatchError(f"gather_nd: batch_dims {b} + index depth {m} > data rank "
                                 f"{len(xshape)}")
    if tuple(ishape[:b]) != tuple(xshape[:b]):
        raise ShapeMismatchError(f"gather_nd: batch dims of indices {ishape[:b]} != data "
                                 f"{xshape[:b]}")
    return m, tuple(ishape[:-1]) + tuple(xshape[b + m:])


def _gnd_type(types, attrs):
    x, ind = types
    _check_index(ind, "gather_nd indices")
    if ind.ndim < 1:
        raise ShapeMismatchError("gather_nd: indices must have rank >= 1")
    _, out = _gnd_geom(x.shape, ind.shape, attrs["batch_dims"])
    return [TensorType(out, x.dtype)]


def _gnd_ref(xs, attrs):
    x, ind = xs
    b = attrs["batch_dims"]
    m, oshape = _gnd_geom(x.shape, ind.shape, b)
    out = np.empty(oshape, x.dtype)
    for pos in np.ndindex(*ind.shape[:-1]):
        key = tuple(int(_np_norm(ind[pos + (k,)], x.shape[b + k], "gather_nd"))
                    for k in range(m))
        out[pos] = x[pos[:b] + key]
    return [out]


def _gnd_compute(inputs, attrs, out_types):
    x, ind = inputs
    b = attrs["batch_dims"]
    q = ind.ndim
    m, _ = _gnd_geom(x.shape, ind.shape, b)

    def f(*i):
        lead = i[:q - 1]
        key = [norm_index(ind[lead + (k,)], x.shape[b + k]) for k in range(m)]
        return x[tuple(i[:b]) + tuple(key) + tuple(i[q - 1:])]
    bounds = [(-x.shape[b + k], x.shape[b + k] - 1) for k in range(m)]
    return [te.compute(out_types[0].shape, f, name="gather_nd",
                       checks=[te.IndexCheck(ind, bounds, "GatherND index")])]


register_op("gather_nd", infer_type=_gnd_type, reference=_gnd_ref, compute=_gnd_compute,
            pattern=OpPattern.INJECTIVE, num_inputs=(2, 2), attrs={"batch_dims": 0},
            doc="gather slices of data at index tuples in the last dim of indices, after "
                "batch_dims leading batch dims (ONNX GatherND)")


# scatters ----------------------------------------------------------------------------------------

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _combine(kind: str, old: Expr, new: Expr) -> Expr:
    if kind == "none":
        return new
    if kind == "add":
        return old + new
    if kind == "mul":
        return old * new
    return te.maximum(old, new) if kind == "max" else te.minimum(old, new)


def _np_combine(kind, old, new):
    if kind == "none":
        return new
    return {"add": old + new, "mul": old * new, "max": max(old, new), "min": min(old, new)}[kind]


def _se_type(types, attrs):
    x, ind, upd = types
    _check_index(ind, "scatter_elements indices")
    if ind.shape != upd.shape or ind.ndim != x.ndim or upd.dtype != x.dtype:
        raise ShapeMismatchError(f"scatter_elements: indices {ind.shape} and updates {upd.shape} "
                                 f"must have one shape and data's rank {x.ndim}")
    normalize_axis(attrs["axis"], x.ndim, "scatter_elements: ")
    if attrs["reduction"] not in REDUCTIONS:
        raise ShapeMismatchError(f"scatter_elements: reduction {attrs['reduction']!r} not in "
                                 f"{REDUCTIONS}")
    return [x]


def _se_ref(xs, attrs):
    x, ind, upd = xs
    ax = normalize_axis(attrs["axis"], x.ndim)
    out = x.copy()
    idx = _np_norm(ind, x.shape[ax], "scatter_elements")
    for pos in np.ndindex(*ind.shape):
        t = pos[:ax] + (int(idx[pos]),) + pos[ax + 1:]
        out[t] = _np_combine(attrs["reduction"], out[t], upd[pos])
    return [out]


def _se_compute(inputs, attrs, out_types):
    ax = normalize_axis(attrs["axis"], inputs[0].ndim)
    kind = attrs["reduction"]

    def body(k):
        x, ind, upd = k.inputs
        y, = k.outputs

        def write(*i):
            j = norm_index(k.read(ind, i), y.shape[ax])
            t = tuple(j if a == ax else v for a, v in enumerate(i))
            return k.store(y, t, _combine(kind, k.read(y, t), k.read(upd, i)))
        return k.seq(k.copy(y, x), k.loop(inputs[1].shape, write))
    n = inputs[0].shape[ax]
    return imperative_kernel(inputs, out_types, body, "scatter_elements",
                             checks=[te.IndexCheck(inputs[1], [(-n, n - 1)],
                                                   "ScatterElements index")])


register_op("scatter_elements", infer_type=_se_type, reference=_se_ref, compute=_se_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(3, 3), attrs={"axis": 0, "reduction": "none"},
            doc="copy of data with updates[i] written (or combined by reduction add/mul/max/"
                "min) at i with axis replaced by indices[i], in index order (ONNX "
                "ScatterElements, Scatter)")


def _snd_type(types, attrs):
    x, ind, upd = types
    _check_index(ind, "scatter_nd indices")
    m = ind.shape[-1] if ind.ndim else 0
    want = tuple(ind.shape[:-1]) + tuple(x.shape[m:])
    if ind.ndim < 1 or m > x.ndim or tuple(upd.shape) != want or upd.dtype != x.dtype:
        raise ShapeMismatchError(f"scatter_nd: updates {upd.shape} must be {want} for data "
                                 f"{x.shape} and indices {ind.shape}")
    if attrs["reduction"] not in REDUCTIONS:
        raise ShapeMismatchError(f"scatter_nd: reduction {attrs['reduction']!r} not in "
                                 f"{REDUCTIONS}")
    return [x]


def _snd_ref(xs, attrs):
    x, ind, upd = xs
    out = x.copy()
    m = ind.shape[-1]
    for pos in np.ndindex(*ind.shape[:-1]):
        key = tuple(int(_np_norm(ind[pos + (k,)], x.shape[k], "scatter_nd")) for k in range(m))
        if attrs["reduction"] == "none":
            out[key] = upd[pos]
        else:
            f = {"add": np.add, "mul": np.multiply, "max": np.maximum,
                 "min": np.minimum}[attrs["reduction"]]
            out[key] = f(out[key], upd[pos])
    return [out]


def _snd_compute(inputs, attrs, out_types):
    x_t, ind_t, upd_t = inputs
    m = ind_t.shape[-1]
    q = ind_t.ndim
    kind = attrs["reduction"]

    def body(k):
        x, ind, upd = k.inputs
        y, = k.outputs

        def write(*i):
            lead, rest = i[:q - 1], i[q - 1:]
            key = tuple(norm_index(k.read(ind, lead + (a,)), x_t.shape[a]) for a in range(m))
            t = key + tuple(rest)
            return k.store(y, t, _combine(kind, k.read(y, t), k.read(upd, i)))
        return k.seq(k.copy(y, x), k.loop(upd_t.shape, write) if upd_t.shape else write())
    bounds = [(-x_t.shape[a], x_t.shape[a] - 1) for a in range(m)]
    return imperative_kernel(inputs, out_types, body, "scatter_nd",
                             checks=[te.IndexCheck(ind_t, bounds, "ScatterND index")])


register_op("scatter_nd", infer_type=_snd_type, reference=_snd_ref, compute=_snd_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(3, 3), attrs={"reduction": "none"},
            doc="copy of data with slices updates[j] written (or combined by reduction) at the "
                "index tuples indices[j] (ONNX ScatterND)")


# trilu -------------------------------------------------------------------------------------------

def _trilu_type(types, attrs):
    if types[0].ndim < 2:
        raise ShapeMismatchError(f"trilu: input must have rank >= 2, got {types[0].shape}")
    return [types[0]]


def _trilu_ref(xs, attrs):
    x = xs[0]
    f = np.triu if attrs["upper"] else np.tril
    return [f(x, attrs["k"]).astype(x.dtype)]


def _trilu_compute(inputs, attrs, out_types):
    x = inputs[0]
    k, upper = attrs["k"], attrs["upper"]

    def f(*i):
        d = i[-1] - i[-2]
        keep = te.ge(d, k) if upper else te.le(d, k)
        return te.select(keep, x[i], te.const(0, x.dtype))
    return [te.compute(x.shape, f, name="trilu")]


register_op("trilu", infer_type=_trilu_type, reference=_trilu_ref, compute=_trilu_compute,
            pattern=OpPattern.INJECTIVE, attrs={"k": 0, "upper": 1},
            doc="keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two "
                "dims, zero elsewhere (ONNX Trilu)")


# one_hot -----------------------------------------------------------------------------------------

def _oh_type(types, attrs):
    ind, vals = types
    if vals.ndim != 1 or vals.shape[0] != 2:
        raise ShapeMismatchError(f"one_hot: values must have shape (2,), got {vals.shape}")
    r = ind.ndim + 1
    ax = normalize_axis(attrs["axis"], r, "one_hot: ")
    depth = attrs["depth"]
    return [TensorType(ind.shape[:ax] + (depth,) + ind.shape[ax:], vals.dtype)]


def _oh_ref(xs, attrs):
    ind, vals = xs
    depth = attrs["depth"]
    ax = normalize_axis(attrs["axis"], ind.ndim + 1)
    i = np.asarray(ind).astype(np.int64)
    i = np.where(i < 0, i + depth, i)
    hot = np.expand_dims(i, ax) == np.arange(depth).reshape(
        [depth if a == ax else 1 for a in range(ind.ndim + 1)])
    return [np.where(hot, vals[1], vals[0]).astype(vals.dtype)]


def _oh_compute(inputs, attrs, out_types):
    ind, vals = inputs
    depth = attrs["depth"]
    ax = normalize_axis(attrs["axis"], ind.ndim + 1)

    def f(*i):
        raw = te.cast("int64", ind[i[:ax] + i[ax + 1:]])
        j = te.select(te.lt(raw, 0), raw + depth, raw)
        return te.select(te.eq(j, i[ax]), vals[1], vals[0])
    return [te.compute(out_types[0].shape, f, name="one_hot")]


register_op("one_hot", infer_type=_oh_type, reference=_oh_ref, compute=_oh_compute,
            pattern=OpPattern.INJECTIVE, num_inputs=(2, 2), attrs={"depth": REQUIRED, "axis": -1},
            doc="values[1] where the new axis position equals indices (negative counts from "
                "depth), values[0] elsewhere (ONNX OneHot)")


# tile --------------------------------------------------------------------------------------------

def _tile_type(types, attrs):
    x = types[0]
    reps = tuple(attrs["repeats"])
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise ShapeMismatchError(f"tile: repeats {reps} must be {x.ndim} non-negative ints")
    return [TensorType(tuple(d * r for d, r in zip(x.shape, reps)), x.dtype)]


register_op("tile", infer_type=_tile_type,
            reference=lambda xs, a: [np.tile(xs[0], tuple(a["repeats"]))],
            compute=lambda ins, a, ot: [te.compute(
                ot[0].shape, lambda *i: ins[0][tuple(v % d if d != 1 else 0
                                                     for v, d in zip(i, ins[0].shape))],
                name="tile")],
            pattern=OpPattern.INJECTIVE, attrs={"repeats": REQUIRED},
            doc="repeat x repeats[d] times along each dim d (ONNX Tile)")


# arg reductions, hardmax -------------------------------------------------------------------------

def _arg_type(types, attrs):
    x = types[0]
    ax = normalize_axis(attrs["axis"], x.ndim, "argmax/argmin: ")
    if x.shape[ax] == 0:
        raise ShapeMismatchError("argmax/argmin over an empty axis")
    shape = tuple(1 if i == ax else d for i, d in enumerate(x.shape)) if attrs["keepdims"] else \
        tuple(d for i, d in enumerate(x.shape) if i != ax)
    return [TensorType(shape, "int64")]


def _arg_ref(kind):
    def ref(xs, attrs):
        x = xs[0]
        ax = normalize_axis(attrs["axis"], x.ndim)
        f = np.argmax if kind == "max" else np.argmin
        if attrs["select_last_index"]:
            y = x.shape[ax] - 1 - f(np.flip(x, ax), axis=ax)
        else:
            y = f(x, axis=ax)
        y = np.asarray(y, np.int64)
        return [np.expand_dims(y, ax) if attrs["keepdims"] else y]
    return ref


def arg_extreme(x: te.Tensor, ax: int, kind: str, last: bool, keep_shape) -> te.Tensor:
    """Index (int64) of the first (or ``last``) max/min of ``x`` along ``ax``, as a tensor of
    shape ``keep_shape`` (``x.shape`` with ``ax`` set to 1)."""
    n = x.shape[ax]

    def at(i, v):
        return tuple(v if a == ax else e for a, e in enumerate(i))
    r1 = te.reduce_axis(n, "am")
    red = te.max if kind == "max" else te.min
    best = te.compute(keep_shape, lambda *i: red(x[at(i, r1.var)], axis=r1), name="arg_best")
    r2 = te.reduce_axis(n, "ai")
    pick = te.max if last else te.min

    def f(*i):
        v = x[at(i, r2.var)]
        hit = te.eq(v, best[i])
        return pick(te.cast("int64", r2.var), axis=r2, where=hit)
    return te.compute(keep_shape, f, name="arg_index")


def _arg_compute(kind):
    def compute(inputs, attrs, out_types):
        x = inputs[0]
        ax = normalize_axis(attrs["axis"], x.ndim)
        keep = tuple(1 if i == ax else d for i, d in enumerate(x.shape))
        idx = arg_extreme(x, ax, kind, bool(attrs["select_last_index"]), keep)
        if attrs["keepdims"]:
            return [idx]
        return [te.compute(out_types[0].shape,
                           lambda *i: idx[tuple(i[:ax]) + (0,) + tuple(i[ax:])], name="arg")]
    return compute


for _k in ("max", "min"):
    register_op(f"arg{_k}", infer_type=_arg_type, reference=_arg_ref(_k),
                compute=_arg_compute(_k), pattern=OpPattern.OPAQUE,
                attrs={"axis": 0, "keepdims": 1, "select_last_index": 0},
                doc=f"int64 index of the first (last with select_last_index) {_k}imum along axis "
                    f"(ONNX Arg{_k.capitalize()})")


def _hardmax_ref(xs, attrs):
    x = xs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    if x.size == 0:
        return [x.copy()]
    i = np.expand_dims(np.argmax(x, axis=ax), ax)
    return [(np.arange(x.shape[ax]).reshape([-1 if a == ax else 1 for a in range(x.ndim)])
             == i).astype(x.dtype)]


def _hardmax_compute(inputs, attrs, out_types):
    x = inputs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    keep = tuple(1 if i == ax else d for i, d in enumerate(x.shape))
    idx = arg_extreme(x, ax, "max", False, keep)
    return [te.compute(x.shape, lambda *i: te.select(
        te.eq(idx[tuple(0 if a == ax else v for a, v in enumerate(i))], te.cast("int64", i[ax])),
        te.const(1, x.dtype), te.const(0, x.dtype)), name="hardmax")]


register_op("nn.hardmax", infer_type=lambda t, a: [t[0]], reference=_hardmax_ref,
            compute=_hardmax_compute, pattern=OpPattern.OPAQUE, attrs={"axis": -1},
            doc="1 at the first maximum along axis, 0 elsewhere (ONNX Hardmax-13)")


# topk --------------------------------------------------------------------------------------------

def _topk_type(types, attrs):
    x = types[0]
    ax = normalize_axis(attrs["axis"], x.ndim, "topk: ")
    k = attrs["k"]
    if not 0 <= k <= x.shape[ax]:
        raise ShapeMismatchError(f"topk: k={k} is out of range for an axis of length "
                                 f"{x.shape[ax]}")
    shape = tuple(k if i == ax else d for i, d in enumerate(x.shape))
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _topk_ref(xs, attrs):
    x = xs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    k = attrs["k"]
    key = -x if attrs["largest"] else x
    if x.dtype.kind == "u" and attrs["largest"]:
        key = -x.astype(np.int64)
    idx = np.argsort(key, axis=ax, kind="stable")
    idx = np.take(idx, np.arange(k), axis=ax)
    return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]


def _topk_compute(inputs, attrs, out_types):
    x = inputs[0]
    ax = normalize_axis(attrs["axis"], x.ndim)
    n, k = x.shape[ax], attrs["k"]
    largest = bool(attrs["largest"])

    def at(i, v):
        return tuple(v if a == ax else e for a, e in enumerate(i))
    r = te.reduce_axis(n, "tr")

    def frank(*i):
        a, b = x[at(i, r.var)], x[i]
        better = te.gt(a, b) if largest else te.lt(a, b)
        before = better | (te.eq(a, b) & te.lt(r.var, i[ax]))
        return te.sum(te.cast("int64", before), axis=r)
    rank = te.compute(x.shape, frank, name="topk_rank")
    r2 = te.reduce_axis(n, "tj")
    idx = te.compute(out_types[1].shape, lambda *i: te.sum(
        te.cast("int64", r2.var), axis=r2, where=te.eq(rank[at(i, r2.var)], te.cast("int64", i[ax]))),
        name="topk_index")
    vals = te.compute(out_types[0].shape, lambda *i: x[at(i, te.minimum(te.maximum(idx[i], 0),
                                                                         n - 1))],
                      name="topk_values")
    return [vals, idx]


register_op("topk", infer_type=_topk_type, reference=_topk_ref, compute=_topk_compute,
            pattern=OpPattern.OPAQUE, attrs={"k": REQUIRED, "axis": -1, "largest": 1, "sorted": 1},
            doc="the k largest (smallest) values along axis, sorted, ties broken by lower index, "
                "and their int64 indices (ONNX TopK)")


# cumulative --------------------------------------------------------------------------------------

def _cum_ref(kind):
    def ref(xs, attrs):
        x = xs[0]
        ax = normalize_axis(attrs["axis"], x.ndim)
        y = np.flip(x, ax) if attrs["reverse"] else x
        f = np.cumsum if kind == "sum" else np.cumprod
        c = f(y, axis=ax, dtype=x.dtype)
        if attrs["exclusive"]:
            ident = np.zeros_like if kind == "sum" else np.ones_like
            first = ident(np.take(c, [0], axis=ax))
            c = np.concatenate([first, np.take(c, np.arange(x.shape[ax] - 1), axis=ax)], axis=ax)
        return [np.flip(c, ax) if attrs["reverse"] else c]
    return ref


def _cum_compute(kind):
    def compute(inputs, attrs, out_types):
        x_t = inputs[0]
        ax = normalize_axis(attrs["axis"], x_t.ndim)
        n = x_t.shape[ax]
        outer = [d for a, d in enumerate(x_t.shape) if a != ax]
        rev, excl = attrs["reverse"], attrs["exclusive"]

        def body(k):
            x, = k.inputs
            y, = k.outputs

            def row(*o):
                def with_ax(v):
                    return tuple(o[:ax]) + (v,) + tuple(o[ax:])

                def acc_body(acc):
                    def step(t):
                        tt = (n - 1 - t) if rev else t
                        upd = k.store(acc, (), (k.read(acc, ()) + k.read(x, with_ax(tt)))
                                      if kind == "sum" else
                                      (k.read(acc, ()) * k.read(x, with_ax(tt))))
                        out = k.store(y, with_ax(tt), k.read(acc, ()))
                        return k.seq(out, upd) if excl else k.seq(upd, out)
                    init = k.store(acc, (), te.const(0 if kind == "sum" else 1, x_t.dtype))
                    return k.seq(init, k.loop([n], step))
                return k.local((), x_t.dtype, acc_body, "acc")
            return k.loop(outer, row) if outer else row()
        return imperative_kernel(inputs, out_types, body, f"cum{kind}")
    return compute


for _k in ("sum", "prod"):
    register_op(f"cum{_k}", infer_type=lambda t, a: [t[0]], reference=_cum_ref(_k),
                compute=_cum_compute(_k), pattern=OpPattern.OPAQUE,
                attrs={"axis": REQUIRED, "exclusive": 0, "reverse": 0},
                doc=f"running {_k} along axis, optionally exclusive (shifted by one) and/or in "
                    f"reverse order (ONNX Cum{_k.capitalize()})")


# reverse_sequence --------------------------------------------------------------------------------

def _rs_type(types, attrs):
    x, lens = types
    b, t = attrs["batch_axis"], attrs["time_axis"]
    if x.ndim < 2 or {b, t} != {0, 1} or lens.shape != (x.shape[b],):
        raise ShapeMismatchError(f"reverse_sequence: batch/time axes must be 0 and 1 and "
                                 f"sequence_lens of shape ({x.shape[b] if x.ndim > 1 else '?'},)")
    return [x]


def _rs_ref(xs, attrs):
    x, lens = xs
    b, t = attrs["batch_axis"], attrs["time_axis"]
    y = x.copy()
    for i in range(x.shape[b]):
        n = int(lens[i])
        sl = [slice(None)] * x.ndim
        sl[b] = i
        sl[t] = slice(0, n)
        src = list(sl)
        src[t] = slice(n - 1, None, -1) if n > 0 else slice(0, 0)
        y[tuple(sl)] = x[tuple(src)]
    return [y]


def _rs_compute(inputs, attrs, out_types):
    x, lens = inputs
    b, t = attrs["batch_axis"], attrs["time_axis"]

    def f(*i):
        n = te.cast("int64", lens[(i[b],)])
        inside = te.lt(i[t], n)
        src = tuple((n - 1 - i[t]) if a == t else v for a, v in enumerate(i))
        return te.select(inside, x[tuple(te.minimum(te.maximum(s, 0), x.shape[a] - 1)
                                         for a, s in enumerate(src))], x[i])
    return [te.compute(x.shape, f, name="reverse_sequence")]


register_op("reverse_sequence", infer_type=_rs_type, reference=_rs_ref, compute=_rs_compute,
            pattern=OpPattern.INJECTIVE, num_inputs=(2, 2), attrs={"batch_axis": 1, "time_axis": 0},
            doc="reverse the first sequence_lens[b] steps along time_axis of each batch entry b "
                "(ONNX ReverseSequence)")


__all__ = ["norm_index", "arg_extreme", "binop"]


# tensor_scatter (KV-cache update) ----------------------------------------------------------------

def _ts_type(types, attrs):
    cache, upd = types[0], types[1]
    ax = normalize_axis(attrs["axis"], cache.ndim, "tensor_scatter: ")
    if upd.ndim != cache.ndim or any(a != b for k, (a, b) in enumerate(zip(cache.shape, upd.shape))
                                     if k != ax) or upd.shape[ax] > cache.shape[ax]:
        raise ShapeMismatchError(f"tensor_scatter: update {upd.shape} must match cache "
                                 f"{cache.shape} outside axis {ax} and be no longer along it")
    if ax == 0:
        raise ShapeMismatchError("tensor_scatter: the sequence axis cannot be the batch axis 0")
    if len(types) == 3:
        _check_index(types[2], "tensor_scatter write_indices")
    if attrs["mode"] not in ("linear", "circular"):
        raise ShapeMismatchError(f"tensor_scatter: mode {attrs['mode']!r} is not linear or "
                                 f"circular")
    return [cache]


def _ts_ref(xs, attrs):
    cache, upd = xs[0], xs[1]
    ax = normalize_axis(attrs["axis"], cache.ndim)
    wi = xs[2] if len(xs) == 3 else np.zeros(cache.shape[0], np.int64)
    out = cache.copy()
    n = cache.shape[ax]
    for prefix in np.ndindex(*cache.shape[:ax]):
        for s in range(upd.shape[ax]):
            c = int(wi[prefix[0]]) + s
            if attrs["mode"] == "circular":
                c %= n
            out[prefix + (c,)] = upd[prefix + (s,)]
    return [out]


def _ts_compute(inputs, attrs, out_types):
    cache_t, upd_t = inputs[0], inputs[1]
    ax = normalize_axis(attrs["axis"], cache_t.ndim)
    n = cache_t.shape[ax]
    circular = attrs["mode"] == "circular"

    def body(k):
        cache, upd = k.inputs[0], k.inputs[1]
        wi = k.inputs[2] if len(k.inputs) == 3 else None
        y, = k.outputs

        def write(*i):
            base = te.cast("int64", k.read(wi, (i[0],))) if wi is not None else 0
            c = base + i[ax]
            c = (c % n) if circular else te.minimum(te.maximum(c, 0), n - 1)
            return k.store(y, i[:ax] + (c,) + i[ax + 1:], k.read(upd, i))
        return k.seq(k.copy(y, cache), k.loop(upd_t.shape, write))
    return imperative_kernel(inputs, out_types, body, "tensor_scatter")


register_op("tensor_scatter", infer_type=_ts_type, reference=_ts_ref, compute=_ts_compute,
            pattern=OpPattern.OPAQUE, num_inputs=(2, 3), attrs={"axis": -2, "mode": "linear"},
            doc="copy of the cache with update written along axis from write_indices[batch] "
                "(0 when omitted), wrapping in mode 'circular' (ONNX TensorScatter)")
