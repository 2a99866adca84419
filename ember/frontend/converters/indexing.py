"""Converters for ONNX indexing and shape-generating operators: GatherElements, GatherND,
Scatter/ScatterElements/ScatterND, Trilu, OneHot, Tile, ArgMax/ArgMin, Hardmax, TopK,
CumSum/CumProd, ReverseSequence, Split, Range, EyeLike.

Inputs that fix an output shape (Tile ``repeats``, TopK ``k``, OneHot ``depth``, Split ``split``,
Range bounds, CumSum ``axis``, Trilu ``k``) are read with ``ctx.require_constant``: a run-time
value makes the staged executor specialize the kernel on it.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError
from ...ops.registry import normalize_axis
from ..dtypes import onnx_dtype
from . import converter


def _scalar(ctx, node, k, what, default=None):
    v = node.input(k)
    if v is None:
        return default
    c = ctx.require_constant(v, f"input {k} ({what})")
    return c.reshape(-1)[0].item() if c.size else default


@converter("GatherElements", since=11)
def gather_elements(ctx, node):
    """ONNX GatherElements-11: ``gather_elements(data, indices, axis)`` (output has the shape of
    ``indices``)."""
    return [ctx.call("gather_elements", [node.input(0), node.input(1)],
                     {"axis": node.attr("axis", 0)})]


@converter("GatherND", since=11)
def gather_nd(ctx, node):
    """ONNX GatherND-11/12: ``gather_nd(data, indices, batch_dims)``."""
    return [ctx.call("gather_nd", [node.input(0), node.input(1)],
                     {"batch_dims": node.attr("batch_dims", 0)})]


@converter("ScatterElements", since=11)
@converter("Scatter", since=9, until=10)
def scatter_elements(ctx, node):
    """ONNX ScatterElements-11+ (and the deprecated Scatter-9/10): ``scatter_elements(data,
    indices, updates, axis, reduction)``."""
    return [ctx.call("scatter_elements", [node.input(0), node.input(1), node.input(2)],
                     {"axis": node.attr("axis", 0), "reduction": node.attr("reduction", "none")})]


@converter("ScatterND", since=11)
def scatter_nd(ctx, node):
    """ONNX ScatterND-11+: ``scatter_nd(data, indices, updates, reduction)``."""
    return [ctx.call("scatter_nd", [node.input(0), node.input(1), node.input(2)],
                     {"reduction": node.attr("reduction", "none")})]


@converter("Trilu", since=14)
def trilu(ctx, node):
    """ONNX Trilu-14: upper (``upper=1``) or lower triangle of the last two dims, diagonal offset
    ``k`` (input 1, default 0).

    Raises:
        RuntimeValueError: ``k`` is only known at run time."""
    k = int(_scalar(ctx, node, 1, "k", 0))
    return [ctx.call("trilu", [node.input(0)], {"k": k, "upper": node.attr("upper", 1)})]


@converter("OneHot", since=9)
def one_hot(ctx, node):
    """ONNX OneHot-9: ``one_hot(indices, values, depth, axis)``; ``depth`` (input 1) must be a
    compile-time constant (a float depth is floored).

    Raises:
        ShapeMismatchError: ``depth < 1``.
        RuntimeValueError: ``depth`` is only known at run time."""
    ind, depth, values = node.input(0), node.input(1), node.input(2)
    d = ctx.require_constant(depth, "input 1 (depth)").reshape(-1)[0]
    d = int(np.floor(d)) if np.asarray(d).dtype.kind == "f" else int(d)
    if d < 1:
        raise ShapeMismatchError(f"OneHot depth must be positive, got {d}")
    return [ctx.call("one_hot", [ind, values], {"depth": d, "axis": node.attr("axis", -1)})]


@converter("Tile", since=6)
def tile(ctx, node):
    """ONNX Tile-6: ``tile(x, repeats)`` with constant ``repeats`` (input 1, one per dim).

    Raises:
        RuntimeValueError: ``repeats`` is only known at run time."""
    reps = ctx.require_constant(node.input(1), "input 1 (repeats)")
    return [ctx.call("tile", [node.input(0)], {"repeats": [int(r) for r in reps.reshape(-1)]})]


def _arg(op):
    def convert(ctx, node):
        return [ctx.call(op, [node.input(0)], {
            "axis": node.attr("axis", 0), "keepdims": node.attr("keepdims", 1),
            "select_last_index": node.attr("select_last_index", 0)})]
    return convert


converter("ArgMax", since=1)(_arg("argmax"))
converter("ArgMin", since=1)(_arg("argmin"))


@converter("Hardmax", since=1)
def hardmax(ctx, node):
    """ONNX Hardmax: one-hot of the first maximum along ``axis``; before opset 13 the input is
    coerced to 2-D at ``axis`` (default 1) as the old spec says."""
    x = node.input(0)
    if node.opset >= 13:
        return [ctx.call("nn.hardmax", [x], {"axis": node.attr("axis", -1)})]
    nd = x.type.ndim
    axis = node.attr("axis", 1)
    axis = axis + nd if axis < 0 else axis
    shape = x.type.shape
    rows = int(np.prod(shape[:axis])) if axis else 1
    flat = ctx.call("reshape", [x], {"newshape": [rows, int(np.prod(shape[axis:]))]})
    y = ctx.call("nn.hardmax", [flat], {"axis": -1})
    return [ctx.call("reshape", [y], {"newshape": list(shape)})]


@converter("TopK", since=1)
def topk(ctx, node):
    """ONNX TopK: ``(values, indices)`` of the ``k`` largest (``largest=1``) or smallest along
    ``axis``; ``k`` from the attribute (opset < 10) or constant input 1; indices int64.

    Raises:
        RuntimeValueError: ``K`` is only known at run time."""
    x = node.input(0)
    if node.opset < 10:
        k = int(node.attr("k"))
    else:
        k = int(_scalar(ctx, node, 1, "K"))
    vals, idx = ctx.call("topk", [x], {"k": k, "axis": node.attr("axis", -1),
                                       "largest": node.attr("largest", 1),
                                       "sorted": node.attr("sorted", 1)})
    return [vals, idx]


def _cum(op):
    def convert(ctx, node):
        axis = int(_scalar(ctx, node, 1, "axis"))
        return [ctx.call(op, [node.input(0)], {"axis": axis,
                                               "exclusive": node.attr("exclusive", 0),
                                               "reverse": node.attr("reverse", 0)})]
    return convert


converter("CumSum", since=11)(_cum("cumsum"))
converter("CumProd", since=26)(_cum("cumprod"))


@converter("ReverseSequence", since=10)
def reverse_sequence(ctx, node):
    """ONNX ReverseSequence-10: reverse the first ``sequence_lens[b]`` elements along ``time_axis``
    for each batch entry ``b`` along ``batch_axis``."""
    return [ctx.call("reverse_sequence", [node.input(0), node.input(1)],
                     {"batch_axis": node.attr("batch_axis", 1),
                      "time_axis": node.attr("time_axis", 0)})]


@converter("Split", since=1)
def split(ctx, node):
    """ONNX Split: one ``strided_slice`` per output along ``axis``; sizes from input 1 (opset 13+),
    the ``split`` attribute, ``num_outputs`` (18+, last chunk smaller) or equal parts.

    Raises:
        ShapeMismatchError: sizes that do not sum to the axis length or count the outputs, or an
            axis that does not divide equally.
        RuntimeValueError: ``split`` is only known at run time."""
    x = node.input(0)
    shape = x.type.shape
    axis = normalize_axis(node.attr("axis", 0), len(shape))
    n = shape[axis]
    nout = len(node.outputs)
    if node.opset >= 13:
        sizes = node.input(1)
        sizes = None if sizes is None else ctx.require_constant(sizes, "input 1 (split)")
    elif node.opset == 1 and node.input(1) is not None:
        sizes = ctx.require_constant(node.input(1), "input 1 (split)")
    else:
        sizes = node.attr("split")
    if sizes is not None and len(np.asarray(sizes).reshape(-1)):
        sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
    elif node.opset >= 18 and node.attr("num_outputs") is not None:
        k = int(node.attr("num_outputs"))
        chunk = -(-n // k)
        sizes = [min(chunk, n - chunk * i) for i in range(k)]
        sizes = [s for s in sizes if s > 0] + [0] * (k - len([s for s in sizes if s > 0]))
    else:
        if n % nout:
            raise ShapeMismatchError(f"Split: axis of length {n} does not divide into {nout} "
                                     f"equal outputs")
        sizes = [n // nout] * nout
    if sum(sizes) != n or len(sizes) != nout:
        raise ShapeMismatchError(f"Split: sizes {sizes} must be {nout} values summing to {n}")
    outs, start = [], 0
    for s in sizes:
        begin, end = [0] * len(shape), list(shape)
        begin[axis], end[axis] = start, start + s
        outs.append(ctx.call("strided_slice", [x], {"begin": begin, "end": end,
                                                    "strides": [1] * len(shape)}))
        start += s
    return outs


@converter("Range", since=11)
def range_(ctx, node):
    """ONNX Range-11: the constant ``start, start + delta, ...`` below ``limit`` (``ceil((limit -
    start) / delta)`` elements, floats accumulated as the spec does), in start's dtype.

    Raises:
        ShapeMismatchError: ``delta == 0``.
        RuntimeValueError: a bound is only known at run time."""
    vals = [ctx.require_constant(node.input(k), f"input {k} ({w})")
            for k, w in enumerate(("start", "limit", "delta"))]
    dt = vals[0].dtype
    s, lim, d = (v.reshape(-1)[0] for v in vals)
    if d == 0:
        raise ShapeMismatchError("Range delta is 0")
    n = max(int(np.ceil((float(lim) - float(s)) / float(d))), 0)
    out = (s + np.arange(n, dtype=np.float64 if dt.kind == "f" else np.int64) * d).astype(dt)
    if dt.kind == "f":  # accumulate like the spec: start, start + delta, ...
        acc, vals_ = np.asarray(s, dt), []
        for _ in range(n):
            vals_.append(acc)
            acc = np.asarray(acc + np.asarray(d, dt), dt)
        out = np.array(vals_, dt).reshape(n)
    return [ctx.const(out)]


@converter("EyeLike", since=9)
def eye_like(ctx, node):
    """ONNX EyeLike-9: a constant 2-D identity of input's shape with diagonal offset ``k``, in
    ``dtype`` (default the input's).

    Raises:
        ShapeMismatchError: the input is not 2-D.
        UnsupportedOpError: an unsupported ``dtype``."""
    x = node.input(0)
    if x.type.ndim != 2:
        raise ShapeMismatchError(f"EyeLike input must be 2-D, got {x.type.shape}")
    dt = node.attr("dtype")
    dtype = onnx_dtype(dt, "EyeLike dtype: ") if dt is not None else x.type.dtype
    from ...ops.registry import np_dtype
    return [ctx.const(np.eye(*x.type.shape, k=node.attr("k", 0), dtype=np_dtype(dtype)))]


@converter("TensorScatter", since=24)
def tensor_scatter(ctx, node):
    """ONNX TensorScatter-24: ``tensor_scatter(past_cache, update[, write_indices], axis, mode)``
    (KV-cache update, ``mode`` linear or circular)."""
    ins = [node.input(0), node.input(1)] + ([node.input(2)] if node.input(2) is not None else [])
    return [ctx.call("tensor_scatter", ins, {"axis": node.attr("axis", -2),
                                             "mode": node.attr("mode", "linear")})]
