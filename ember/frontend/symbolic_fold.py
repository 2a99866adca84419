"""Compile-time shape values over symbolic dimensions (the ONNX frontend's symbolic folding).

ONNX exporters compute target shapes in the graph: ``Shape -> Gather -> Unsqueeze -> Concat
-> Reshape``. When the input's dimensions are symbolic, ``Shape`` is still known at compile
time: it is the vector of the input's dimension expressions. A ``ShapeConstant`` holds such a
vector (an ``int64`` tensor whose elements are ``int``s or ``ember.tir.symbolic`` dims), and
``fold`` evaluates the shape arithmetic exporters emit on it (gather, concatenate, reshape,
slice, + - * / min max, cast to an integer type, equal and where when decided), so Reshape,
Expand and Slice get symbolic targets. A ShapeConstant never becomes a graph value: an
operator outside that set on one raises ``SymbolicShapeError`` naming it.
"""

from __future__ import annotations

import numpy as np

from ..tir import symbolic as sym
from ..graph.ir import Constant, TensorType
from ..ops.registry import normalize_axis


class ShapeConstant(Constant):
    """A compile-time integer tensor with symbolic elements (``data``: object ndarray of
    normalized dims); its type is ``int64`` of ``data``'s (static) shape."""

    def __init__(self, data):
        self.data = np.asarray(data, dtype=object)
        self.type = TensorType(self.data.shape, "int64")
        self.name_hint = None

    def __repr__(self):
        return f"ShapeConstant({[sym.dim_str(d) for d in self.data.reshape(-1)]})"


def shape_value(values, shape=None) -> Constant:
    """A ``Constant`` (all elements static) or a ``ShapeConstant`` of ``values`` (dims)."""
    arr = np.empty(len(values) if shape is None else int(np.prod(shape, dtype=np.int64)),
                   dtype=object)
    for k, v in enumerate(values):
        arr[k] = sym.as_dim(v)
    arr = arr.reshape(shape if shape is not None else (len(values),))
    if all(isinstance(v, int) for v in arr.reshape(-1)):
        return Constant(arr.astype(np.int64))
    return ShapeConstant(arr)


def _obj(c: Constant) -> np.ndarray:
    if isinstance(c, ShapeConstant):
        return c.data
    if c.data.dtype.kind not in "iub":
        return None
    return c.data.astype(object)


def _ints(a: np.ndarray):
    return a if all(isinstance(v, (int, np.integer)) for v in a.reshape(-1)) else None


_ARITH = {"add": lambda a, b: sym.as_expr(a) + sym.as_expr(b),
          "subtract": lambda a, b: sym.as_expr(a) - sym.as_expr(b),
          "multiply": lambda a, b: sym.as_expr(a) * sym.as_expr(b),
          # ONNX Div on integers truncates; dims are non-negative, where it is floor division
          "divide": lambda a, b: sym.as_expr(a) // sym.as_expr(b)}


def fold(op: str, args: list, attrs: dict, out_types: list, bounds: dict):
    """The folded value of ``op(args)`` when an argument is a ``ShapeConstant``, or ``None``
    when ``op`` is not shape arithmetic that can be decided at compile time."""
    xs = [_obj(a) for a in args]
    if any(x is None for x in xs):
        return None
    out_shape = out_types[0].shape if out_types else None

    def result(arr):
        arr = np.asarray(arr, dtype=object)
        return shape_value(list(arr.reshape(-1)), arr.shape)

    if op == "take":
        ind = _ints(xs[1])
        if ind is None:
            return None
        ax = normalize_axis(attrs["axis"], xs[0].ndim)
        ind = np.asarray(ind, np.int64)
        ind = np.where(ind < 0, ind + xs[0].shape[ax], ind)
        return result(np.take(xs[0], ind, axis=ax))
    if op == "concatenate":
        return result(np.concatenate(xs, axis=attrs["axis"]))
    if op == "reshape":
        return result(xs[0].reshape(tuple(int(d) for d in out_shape)))
    if op == "broadcast_to":
        return result(np.broadcast_to(xs[0], tuple(int(d) for d in out_shape)))
    if op == "copy":
        return result(xs[0])
    if op == "strided_slice":
        sl = tuple(slice(b, e if e >= 0 else None, s)
                   for b, e, s in zip(attrs["begin"], attrs["end"], attrs["strides"]))
        return result(xs[0][sl])
    if op == "cast":
        if not attrs["dtype"].startswith(("int", "uint")):
            return None
        return result(xs[0])
    if op in _ARITH or op in ("maximum", "minimum"):
        a, b = np.broadcast_arrays(xs[0], xs[1])
        if op in _ARITH:
            vals = [sym.as_dim(_ARITH[op](u, v)) for u, v in zip(a.reshape(-1), b.reshape(-1))]
        else:
            f = sym.dim_max if op == "maximum" else sym.dim_min
            vals = [f(u, v, bounds) for u, v in zip(a.reshape(-1), b.reshape(-1))]
        return shape_value(vals, a.shape)
    if op == "equal":
        a, b = np.broadcast_arrays(xs[0], xs[1])
        out = []
        for u, v in zip(a.reshape(-1), b.reshape(-1)):
            if sym.dims_equal(u, v):
                out.append(True)
                continue
            (ulo, uhi), (vlo, vhi) = sym.bounds_of(u, bounds), sym.bounds_of(v, bounds)
            if uhi < vlo or vhi < ulo:
                out.append(False)
            else:
                return None
        return Constant(np.array(out, dtype=bool).reshape(a.shape))
    if op == "where":
        cond = _ints(xs[0])
        if cond is None:
            return None
        c, a, b = np.broadcast_arrays(np.asarray(cond, dtype=bool), xs[1], xs[2])
        return result(np.where(c, a, b))
    return None
