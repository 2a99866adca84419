"""Data-movement operators: reshape, transpose, concatenate, strided_slice, take (gather),
broadcast_to (expand), split, pad. All attributes are static; the ONNX frontend resolves
shape-valued inputs (Reshape ``shape``, Slice ``starts``...) before building these."""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import Expr
from .elemwise import broadcast_load
from .registry import REQUIRED, OpPattern, broadcast_shapes, normalize_axis, register_op


def _strides(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return list(reversed(st))


def unravel(flat: Expr, shape) -> list:
    """Row-major multi-index of a flat offset into ``shape``."""
    idx = []
    for s in _strides(shape):
        idx.append(flat // s if s != 1 else flat)
        flat = flat % s if s != 1 else 0
    # the modulo by the dim size keeps the outermost index in range for the simplifier
    return [i % d if k > 0 else i for k, (i, d) in enumerate(zip(idx, shape))]


def ravel(idx, shape) -> Expr:
    """Flat row-major offset of a multi-index."""
    flat = 0
    for i, s in zip(idx, _strides(shape)):
        flat = flat + i * s
    return flat


# reshape --------------------------------------------------------------------------------------

def _reshape_type(types, attrs):
    x = types[0]
    shape = tuple(attrs["newshape"])
    if any((not isinstance(d, int)) or d < 0 for d in shape):
        raise ShapeMismatchError(f"reshape: newshape {shape} must be resolved non-negative ints")
    if int(np.prod(shape)) != x.size:
        raise ShapeMismatchError(f"reshape: cannot reshape {x.shape} ({x.size} elements) to "
                                 f"{shape}")
    return [TensorType(shape, x.dtype)]


def reshape_groups(src, dst) -> list | None:
    """Axis groups of a reshape from shape ``src`` to ``dst``: ``[(src_axes, dst_axes), ...]``
    (consecutive ranges covering both shapes) whose dimension products are equal, the finest
    such split found greedily (``(batch, seq, 64) -> (batch, seq, 4, 16)``: ``batch``,
    ``seq``, ``64 -> 4 x 16``); ``None`` when there are fewer than two groups. Dimensions may
    be symbolic: products are compared in the symbolic normal form (``dims_equal``) and the
    side to grow is the one whose product is smaller at a sample point of the symbols."""
    from ..tir.symbolic import dims_equal, evaluate, prod, symbols_of
    names = symbols_of(tuple(src) + tuple(dst))
    env = {n: 1009 + 7 * k for k, n in enumerate(names)}  # a point where no product ties

    def size(axes, shape):
        return evaluate(prod(shape[k] for k in axes), env)

    groups, i, j = [], 0, 0
    while i < len(src) and j < len(dst):
        gi, gj = [i], [j]
        i, j = i + 1, j + 1
        while not dims_equal(prod(src[k] for k in gi), prod(dst[k] for k in gj)):
            if size(gi, src) < size(gj, dst) and i < len(src):
                gi.append(i)
                i += 1
            elif size(gi, src) > size(gj, dst) and j < len(dst):
                gj.append(j)
                j += 1
            else:
                return None
        groups.append((gi, gj))
    if not groups:
        return None
    # what is left on one side are unit dims: they join the last group
    if any(not dims_equal(src[k], 1) for k in range(i, len(src))) or \
            any(not dims_equal(dst[k], 1) for k in range(j, len(dst))):
        return None
    groups[-1] = (groups[-1][0] + list(range(i, len(src))),
                  groups[-1][1] + list(range(j, len(dst))))
    return groups if len(groups) > 1 else None


def _reshape_compute(inputs, attrs, out_types):
    x = inputs[0]
    shape = out_types[0].shape
    from ..tir.symbolic import is_symbolic
    groups = reshape_groups(x.shape, shape) if any(
        is_symbolic(d) for d in tuple(x.shape) + tuple(shape)) else None
    if groups is not None:
        # a symbolic reshape maps index groups separately: a flat offset over symbolic dims
        # becomes nested floordiv/floormod by symbolic products the simplifier cannot undo
        def f(*i):
            idx = [None] * x.ndim
            for gi, gj in groups:
                sub = unravel(ravel([i[k] for k in gj], [shape[k] for k in gj]),
                              [x.shape[k] for k in gi])
                for k, e in zip(gi, sub):
                    idx[k] = e
            return x[tuple(idx)]
        return [te.compute(shape, f, name="reshape")]
    return [te.compute(shape, lambda *i: x[tuple(unravel(ravel(i, shape), x.shape))]
                       if x.ndim else x[()], name="reshape")]


register_op("reshape", infer_type=_reshape_type,
            reference=lambda xs, a: [xs[0].reshape(a["newshape"]).copy()],
            compute=_reshape_compute, pattern=OpPattern.INJECTIVE, attrs={"newshape": REQUIRED},
            doc="same elements in row-major order, new static shape (ONNX Reshape, Flatten, "
                "Squeeze, Unsqueeze)")


# transpose ------------------------------------------------------------------------------------

def _perm(attrs, nd):
    p = attrs["perm"]
    return tuple(range(nd))[::-1] if p is None else tuple(normalize_axis(a, nd) for a in p)


def _transpose_type(types, attrs):
    x = types[0]
    p = _perm(attrs, x.ndim)
    if sorted(p) != list(range(x.ndim)):
        raise ShapeMismatchError(f"transpose: perm {p} is not a permutation of rank {x.ndim}")
    return [TensorType(tuple(x.shape[a] for a in p), x.dtype)]


def _transpose_compute(inputs, attrs, out_types):
    x = inputs[0]
    p = _perm(attrs, x.ndim)

    def f(*i):
        src = [None] * x.ndim
        for out_axis, in_axis in enumerate(p):
            src[in_axis] = i[out_axis]
        return x[tuple(src)]
    return [te.compute(out_types[0].shape, f, name="transpose")]


register_op("transpose", infer_type=_transpose_type,
            reference=lambda xs, a: [np.transpose(xs[0], _perm(a, xs[0].ndim)).copy(order="C")],
            compute=_transpose_compute, pattern=OpPattern.INJECTIVE, attrs={"perm": None},
            doc="permute axes; perm None reverses them (ONNX Transpose)")


# concatenate ----------------------------------------------------------------------------------

def _concat_type(types, attrs):
    x = types[0]
    ax = normalize_axis(attrs["axis"], x.ndim, "concatenate: ")
    total = 0
    for t in types:
        if t.ndim != x.ndim or t.dtype != x.dtype or any(
                a != b for k, (a, b) in enumerate(zip(t.shape, x.shape)) if k != ax):
            raise ShapeMismatchError(f"concatenate: inputs {[tt.shape for tt in types]} differ "
                                     f"outside axis {ax} (or in dtype)")
        total += t.shape[ax]
    return [TensorType(x.shape[:ax] + (total,) + x.shape[ax + 1:], x.dtype)]


def _concat_compute(inputs, attrs, out_types):
    ax = normalize_axis(attrs["axis"], inputs[0].ndim)
    offsets, acc = [], 0
    for t in inputs:
        offsets.append(acc)
        acc += t.shape[ax]

    def f(*i):
        e = None
        for t, off in zip(inputs, offsets):
            if t.shape[ax] == 0:
                continue
            idx = tuple(v - off if k == ax else v for k, v in enumerate(i))
            val = t[idx]
            e = val if e is None else te.select(te.ge(i[ax], off), val, e)
        # every input empty along axis: the output is empty too, its body never runs
        return e if e is not None else te.const(0, out_types[0].dtype)
    return [te.compute(out_types[0].shape, f, name="concat")]


register_op("concatenate", infer_type=_concat_type,
            reference=lambda xs, a: [np.concatenate(xs, axis=a["axis"])],
            compute=_concat_compute, pattern=OpPattern.INJECTIVE, num_inputs=(1, None),
            attrs={"axis": REQUIRED}, doc="join tensors along axis (ONNX Concat)")


# broadcast_to ---------------------------------------------------------------------------------

def _bcast_type(types, attrs):
    x = types[0]
    shape = broadcast_shapes(x.shape, tuple(attrs["shape"]), where="broadcast_to: ")
    return [TensorType(shape, x.dtype)]


register_op("broadcast_to", infer_type=_bcast_type,
            reference=lambda xs, a: [np.broadcast_to(
                xs[0], broadcast_shapes(xs[0].shape, tuple(a["shape"]))).copy()],
            compute=lambda ins, a, ot: [te.compute(ot[0].shape,
                                                   lambda *i: broadcast_load(ins[0], i),
                                                   name="expand")],
            pattern=OpPattern.BROADCAST, attrs={"shape": REQUIRED},
            doc="broadcast x against shape, NumPy rules (ONNX Expand)")


# take (gather) ---------------------------------------------------------------------------------

def _take_type(types, attrs):
    x, ind = types
    ax = normalize_axis(attrs["axis"], x.ndim, "take: ")
    if ind.dtype not in ("int32", "int64"):
        raise ShapeMismatchError(f"take: indices must be int32/int64, got {ind.dtype}")
    return [TensorType(x.shape[:ax] + ind.shape + x.shape[ax + 1:], x.dtype)]


def _take_ref(xs, attrs):
    x, ind = xs
    ax = normalize_axis(attrs["axis"], x.ndim)
    ind = np.where(ind < 0, ind + x.shape[ax], ind)
    return [np.take(x, ind, axis=ax)]


def _take_compute(inputs, attrs, out_types):
    x, ind = inputs
    ax = normalize_axis(attrs["axis"], x.ndim)
    n = x.shape[ax]
    ni = ind.ndim

    def f(*i):
        raw = te.cast("int64", ind[i[ax:ax + ni]])
        j = te.select(te.lt(raw, 0), raw + n, raw)
        j = te.minimum(te.maximum(j, 0), n - 1)  # out-of-range indices never read out of bounds
        return x[i[:ax] + (j,) + i[ax + ni:]]
    return [te.compute(out_types[0].shape, f, name="take",
                       checks=[te.IndexCheck(ind, [(-n, n - 1)], "Gather index")])]


register_op("take", infer_type=_take_type, reference=_take_ref, compute=_take_compute,
            pattern=OpPattern.INJECTIVE, num_inputs=(2, 2), attrs={"axis": 0},
            doc="gather slices of x along axis at indices; negative indices count from the end "
                "(ONNX Gather)")


# strided_slice ---------------------------------------------------------------------------------

def slice_len(begin: int, end: int, step: int) -> int:
    """Number of elements of ``range(begin, end, step)`` (a symbolic dimension when
    ``begin`` or ``end`` is one: ``ops.shape_funcs.strided_slice_shape``'s count)."""
    if isinstance(begin, Expr) or isinstance(end, Expr):
        from .shape_funcs import slice_count
        return slice_count(begin, end, step)
    return max(0, -(-(end - begin) // step)) if step > 0 else max(0, -(-(begin - end) // -step))


def _slice_type(types, attrs):
    x = types[0]
    b, e, s = attrs["begin"], attrs["end"], attrs["strides"]
    if not (len(b) == len(e) == len(s) == x.ndim):
        raise ShapeMismatchError(f"strided_slice: begin/end/strides must have rank {x.ndim}")
    return [TensorType(tuple(slice_len(*t) for t in zip(b, e, s)), x.dtype)]


def _slice_ref(xs, attrs):
    sl = tuple(slice(b, e if e >= 0 else None, s)
               for b, e, s in zip(attrs["begin"], attrs["end"], attrs["strides"]))
    return [xs[0][sl].copy()]


def _slice_compute(inputs, attrs, out_types):
    x = inputs[0]
    b, s = attrs["begin"], attrs["strides"]
    return [te.compute(out_types[0].shape,
                       lambda *i: x[tuple(bb + ii * ss for bb, ii, ss in zip(b, i, s))],
                       name="slice")]


register_op("strided_slice", infer_type=_slice_type, reference=_slice_ref,
            compute=_slice_compute, pattern=OpPattern.INJECTIVE,
            attrs={"begin": REQUIRED, "end": REQUIRED, "strides": REQUIRED},
            doc="x[begin:end:strides] per axis with normalized, clamped bounds (end -1 means "
                "'before index 0' for negative strides) (ONNX Slice)")


# pad ------------------------------------------------------------------------------------------

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_geom(shape, attrs, where="nn.pad: "):
    pads = tuple(attrs["pads"])
    nd = len(shape)
    if len(pads) != 2 * nd:
        raise ShapeMismatchError(f"{where}pads {pads} must have 2 x rank = {2 * nd} entries "
                                 f"(all begins, then all ends)")
    if attrs["mode"] not in PAD_MODES:
        raise ShapeMismatchError(f"{where}mode {attrs['mode']!r} is not one of {PAD_MODES}")
    # negative pads crop first; the cropped extent is what reflect/edge/wrap read from
    crop = [(max(0, -pads[a]), max(0, -pads[nd + a])) for a in range(nd)]
    inner = [shape[a] - crop[a][0] - crop[a][1] for a in range(nd)]
    out = [inner[a] + max(0, pads[a]) + max(0, pads[nd + a]) for a in range(nd)]
    for a in range(nd):
        if inner[a] < 0 or out[a] < 0:
            raise ShapeMismatchError(f"{where}pads {pads} crop more than axis {a} of {shape} holds")
        grow = max(pads[a], pads[nd + a], 0)
        if grow and attrs["mode"] != "constant" and inner[a] == 0:
            raise ShapeMismatchError(f"{where}mode {attrs['mode']} cannot pad an empty axis {a}")
        if grow and attrs["mode"] == "reflect" and grow > inner[a] - 1:
            raise ShapeMismatchError(f"{where}reflect pad {grow} on axis {a} needs an axis longer "
                                     f"than the pad (length {inner[a]})")
    return pads, crop, inner, out


def _pad_type(types, attrs):
    _, _, _, out = _pad_geom(types[0].shape, attrs)
    return [TensorType(tuple(out), types[0].dtype)]


def _pad_ref(xs, attrs):
    x = xs[0]
    pads, crop, inner, _ = _pad_geom(x.shape, attrs)
    nd = x.ndim
    x = x[tuple(slice(c0, x.shape[a] - c1) for a, (c0, c1) in enumerate(crop))]
    widths = [(max(0, pads[a]), max(0, pads[nd + a])) for a in range(nd)]
    mode = attrs["mode"]
    if mode == "constant":
        return [np.pad(x, widths, mode="constant", constant_values=np.asarray(attrs["value"])
                       .astype(x.dtype))]
    return [np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _pad_compute(inputs, attrs, out_types):
    x = inputs[0]
    pads, crop, inner, out = _pad_geom(x.shape, attrs)
    nd = x.ndim
    mode = attrs["mode"]

    def f(*i):
        conds, src = [], []
        for a in range(nd):
            j = i[a] - max(0, pads[a])  # index into the cropped axis
            n = inner[a]
            grow = pads[a] > 0 or pads[nd + a] > 0
            if grow and mode == "constant":
                if pads[a] > 0:
                    conds.append(te.ge(j, 0))
                if pads[nd + a] > 0:
                    conds.append(te.lt(j, n))
            elif grow and mode == "edge":
                j = te.minimum(te.maximum(j, 0), n - 1)
            elif grow and mode == "reflect":
                j = te.select(te.lt(j, 0), -j, j)
                j = te.select(te.ge(j, n), 2 * (n - 1) - j, j)
            elif grow and mode == "wrap":
                j = j % n
            src.append(j + crop[a][0])
        val = x[tuple(src)]
        if conds:
            val = te.select(te.all_of(*conds), val, te.const(attrs["value"], x.dtype))
        return val
    return [te.compute(out_types[0].shape, f, name="pad")]


register_op("nn.pad", infer_type=_pad_type, reference=_pad_ref, compute=_pad_compute,
            pattern=OpPattern.INJECTIVE,
            attrs={"pads": REQUIRED, "mode": "constant", "value": 0.0},
            doc="pad every axis by pads = [begin_0..begin_n-1, end_0..end_n-1]; negative pads "
                "crop; mode constant (fill value), reflect (mirror without the edge), edge "
                "(repeat the edge) or wrap (periodic) (ONNX Pad)")
