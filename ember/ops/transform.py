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


def _reshape_compute(inputs, attrs, out_types):
    x = inputs[0]
    shape = out_types[0].shape
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
            reference=lambda xs, a: [np.ascontiguousarray(np.transpose(xs[0], _perm(a, xs[0].ndim)))],
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
        return e
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
    return [te.compute(out_types[0].shape, f, name="take")]


register_op("take", infer_type=_take_type, reference=_take_ref, compute=_take_compute,
            pattern=OpPattern.INJECTIVE, num_inputs=(2, 2), attrs={"axis": 0},
            doc="gather slices of x along axis at indices; negative indices count from the end "
                "(ONNX Gather)")


# strided_slice ---------------------------------------------------------------------------------

def slice_len(begin: int, end: int, step: int) -> int:
    """Number of elements of ``range(begin, end, step)``."""
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
