"""Converters for ONNX shape and data-movement operators (Reshape, Shape, Gather, Slice...)."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from ...tir import symbolic as sym
from ...graph.ir import shape_str
from ...ops.registry import normalize_axis
from ..symbolic_fold import shape_value
from . import converter


def _const_input(ctx, node, k, what):
    v = node.input(k)
    if v is None:
        return None
    return ctx.require_constant(v, f"input {k} ({what})")


def reshape_target(in_shape, shape, allowzero: bool) -> list:
    """ONNX Reshape target: 0 copies the input dim (unless ``allowzero``), -1 is inferred.
    Dims may be symbolic (``ember.tir.symbolic``) in ``in_shape`` and ``shape``; a -1 is
    then the exact quotient of the element counts (``ShapeMismatchError`` when it is not
    provably whole)."""
    out = []
    for i, d in enumerate(sym.as_dim(v) for v in np.asarray(shape, dtype=object).reshape(-1)):
        if isinstance(d, int) and d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ShapeMismatchError(f"Reshape: 0 at position {i} but input rank is "
                                         f"{len(in_shape)}")
            out.append(in_shape[i])
        else:
            out.append(d)
    holes = [i for i, d in enumerate(out) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ShapeMismatchError(f"Reshape: more than one -1 in {shape_str(out)}")
    if holes:
        known = sym.prod(d for i, d in enumerate(out) if i != holes[0])
        total = sym.prod(in_shape)
        q = None if sym.dims_equal(known, 0) else \
            sym.as_dim(sym.as_expr(total) // sym.as_expr(known))
        if q is None or not sym.dims_equal(sym.prod([q, known]), total):
            raise ShapeMismatchError(f"Reshape: cannot infer -1 reshaping {shape_str(in_shape)} "
                                     f"to {shape_str(out)}: {sym.dim_str(total)} elements are "
                                     f"not {'provably ' if sym.is_symbolic(total) else ''}a "
                                     f"multiple of {sym.dim_str(known)}")
        out[holes[0]] = q
    return out


@converter("Reshape", since=1)
def reshape(ctx, node):
    """ONNX Reshape: ``reshape`` to ``reshape_target`` of the shape (attribute before opset 5,
    constant input 1 after; 0 copies a dim unless ``allowzero``, -1 is inferred).

    Raises:
        ShapeMismatchError: a bad 0 or -1.
        RuntimeValueError: the shape is only known at run time."""
    x = node.input(0)
    if node.opset < 5:
        shape = node.attr("shape")
    else:
        shape = _const_input(ctx, node, 1, "shape")
    target = reshape_target(x.type.shape, shape, bool(node.attr("allowzero", 0)))
    return [ctx.call("reshape", [x], {"newshape": target})]


@converter("Flatten", since=1)
def flatten(ctx, node):
    """ONNX Flatten: reshape to 2-D ``(prod(shape[:axis]), prod(shape[axis:]))`` (``axis`` default
    1)."""
    x = node.input(0)
    nd = x.type.ndim
    axis = node.attr("axis", 1)
    axis = axis + nd if axis < 0 else axis
    shape = x.type.shape
    return [ctx.call("reshape", [x], {"newshape": [sym.prod(shape[:axis]),
                                                   sym.prod(shape[axis:])]})]


@converter("Squeeze", since=1)
def squeeze(ctx, node):
    """ONNX Squeeze: drop the listed size-1 axes (attribute before opset 13, constant input 1
    after), or every size-1 axis.

    Raises:
        ShapeMismatchError: a listed axis is not of size 1.
        RuntimeValueError: axes only known at run time."""
    x = node.input(0)
    axes = node.attr("axes") if node.opset < 13 else _const_input(ctx, node, 1, "axes")
    shape = x.type.shape
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = {normalize_axis(int(a), len(shape)) for a in np.asarray(axes).reshape(-1)}
    for a in axes:
        if shape[a] != 1:
            raise ShapeMismatchError(f"Squeeze: axis {a} of {shape} is not 1")
    return [ctx.call("reshape", [x], {"newshape": [d for i, d in enumerate(shape)
                                                   if i not in axes]})]


@converter("Unsqueeze", since=1)
def unsqueeze(ctx, node):
    """ONNX Unsqueeze: insert size-1 axes at ``axes`` (of the output; attribute before opset 13,
    constant input 1 after).

    Raises:
        ShapeMismatchError: repeated axes.
        RuntimeValueError: axes only known at run time."""
    x = node.input(0)
    axes = node.attr("axes") if node.opset < 13 else _const_input(ctx, node, 1, "axes")
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    nd = x.type.ndim + len(axes)
    axes = sorted(normalize_axis(a, nd) for a in axes)
    if len(set(axes)) != len(axes):
        raise ShapeMismatchError(f"Unsqueeze: repeated axes {axes}")
    out, it = [], iter(x.type.shape)
    for i in range(nd):
        out.append(1 if i in axes else next(it))
    return [ctx.call("reshape", [x], {"newshape": out})]


@converter("Transpose", since=1)
def transpose(ctx, node):
    """ONNX Transpose: ``transpose(x, perm)`` (default: reverse the dims)."""
    perm = node.attr("perm")
    return [ctx.call("transpose", [node.input(0)], {"perm": list(perm) if perm is not None
                                                    else None})]


def _block_args(node, x) -> tuple[int, str]:
    """``(blocksize, mode)`` of a DepthToSpace/SpaceToDepth node on a 4-D NCHW input (``mode``
    ``"DCR"`` when absent, as in the ONNX operator spec).

    Raises:
        ShapeMismatchError: the input is not 4-D, the block size is below 1 or the mode is not
            DCR or CRD."""
    b = int(node.attr("blocksize", 0))
    if x.type.ndim != 4:
        raise ShapeMismatchError(f"{node.op_type}: input must be 4-D NCHW, got {x.type.shape}")
    if b < 1:
        raise ShapeMismatchError(f"{node.op_type}: blocksize must be >= 1, got {b}")
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ShapeMismatchError(f"{node.op_type}: mode must be DCR or CRD, got {mode!r}")
    return b, mode


@converter("DepthToSpace", since=1)
def depth_to_space(ctx, node):
    """ONNX DepthToSpace: ``(N, C, H, W) -> (N, C / b^2, H * b, W * b)`` as reshape -> transpose
    -> reshape; ``mode`` DCR (default: depth is split as ``(b, b, C / b^2)``) or CRD (as
    ``(C / b^2, b, b)``), as in the ONNX operator spec.

    Raises:
        ShapeMismatchError: C is not a multiple of ``blocksize ** 2``, a bad mode or input rank."""
    x = node.input(0)
    b, mode = _block_args(node, x)
    n, c, h, w = x.type.shape
    if c % (b * b):
        raise ShapeMismatchError(f"DepthToSpace: {c} channels are not a multiple of "
                                 f"blocksize^2 = {b * b}")
    if mode == "DCR":
        split, perm = [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
    else:  # CRD
        split, perm = [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
    t = ctx.call("transpose", [ctx.call("reshape", [x], {"newshape": split})], {"perm": perm})
    return [ctx.call("reshape", [t], {"newshape": [n, c // (b * b), h * b, w * b]})]


@converter("SpaceToDepth", since=1)
def space_to_depth(ctx, node):
    """ONNX SpaceToDepth: ``(N, C, H, W) -> (N, C * b^2, H / b, W / b)`` as reshape ->
    transpose -> reshape; ``mode`` (opset 28) DCR, the default and the inverse of DepthToSpace
    DCR (output channel ``(bh * b + bw) * C + c``), or CRD (``(c * b + bh) * b + bw``), as in
    the ONNX operator spec.

    Raises:
        ShapeMismatchError: H or W is not a multiple of ``blocksize``, a bad mode or input
            rank."""
    x = node.input(0)
    b, mode = _block_args(node, x)
    n, c, h, w = x.type.shape
    if h % b or w % b:
        raise ShapeMismatchError(f"SpaceToDepth: spatial size {h}x{w} is not a multiple of "
                                 f"blocksize {b}")
    perms = {"DCR": [0, 3, 5, 1, 2, 4], "CRD": [0, 1, 3, 5, 2, 4]}
    t = ctx.call("reshape", [x], {"newshape": [n, c, h // b, b, w // b, b]})
    t = ctx.call("transpose", [t], {"perm": perms[mode]})
    return [ctx.call("reshape", [t], {"newshape": [n, c * b * b, h // b, w // b]})]


@converter("Concat", since=1)
def concat(ctx, node):
    """ONNX Concat: ``concatenate`` of the present inputs along ``axis`` (default 1 before opset
    4)."""
    ins = [x for x in node.inputs if x is not None]
    return [ctx.call("concatenate", ins, {"axis": node.attr("axis", 1 if node.opset < 4 else 0)})]


@converter("Shape", since=1)
def shape(ctx, node):
    """ONNX Shape: the constant int64 shape of the input, sliced by ``start``/``end`` (15+;
    clamped); with symbolic dims a ``ShapeConstant`` of the dimension expressions, which
    shape arithmetic folds (``frontend.symbolic_fold``)."""
    shp = list(node.input(0).type.shape)
    n = len(shp)
    start, end = node.attr("start", 0), node.attr("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return [shape_value(shp[start:end])]


@converter("Size", since=1)
def size(ctx, node):
    """ONNX Size: the constant int64 element count of the input (symbolic for symbolic
    dims)."""
    t = node.input(0).type
    if t.symbols:
        return [shape_value([sym.prod(t.shape)], ())]
    return [ctx.const(np.array(t.size, dtype=np.int64))]


@converter("Gather", since=1)
def gather(ctx, node):
    """ONNX Gather: ``take(data, indices, axis)``; constant indices are range-checked at compile
    time.

    Raises:
        ShapeMismatchError: a constant index outside ``[-n, n - 1]``."""
    data, ind = node.input(0), node.input(1)
    axis = node.attr("axis", 0)
    c = ctx.constant_value(ind)
    if c is not None and c.size:
        n = data.type.shape[normalize_axis(axis, data.type.ndim)]
        if isinstance(n, int) and (c.min() < -n or c.max() >= n):
            raise ShapeMismatchError(f"Gather indices {c.reshape(-1).tolist()[:8]} are out of "
                                     f"range for axis {axis} of size {n} (valid: [-{n}, {n - 1}])")
    return [ctx.call("take", [data, ind], {"axis": axis})]


@converter("Slice", since=1)
def slice_(ctx, node):
    """ONNX Slice: ``strided_slice`` with starts/ends/axes/steps (attributes before opset 10,
    constant inputs after; clamped as the spec says); a full slice is the input itself.

    Raises:
        ShapeMismatchError: lists of different lengths, or a step of 0.
        RuntimeValueError: a slice parameter only known at run time."""
    x = node.input(0)
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        starts = _const_input(ctx, node, 1, "starts")
        ends = _const_input(ctx, node, 2, "ends")
        axes = _const_input(ctx, node, 3, "axes")
        steps = _const_input(ctx, node, 4, "steps")
    return _slice_clamped(ctx, x, starts, ends, axes, steps)


def _slice_clamped(ctx, x, starts, ends, axes, steps):
    """The ``strided_slice`` of ONNX Slice: negative starts/ends count from the end, then are
    clamped into the axis (``[0, d]``, or ``[-1, d - 1]`` for ends of a negative step). With
    symbolic axis sizes or bounds the clamping is ``min``/``max`` of dimension expressions,
    decided by the symbols' bounds where they prove it; static ones fold to ints."""
    shape = x.type.shape
    nd = len(shape)
    b_ = ctx.symbol_bounds
    flat = lambda v: [sym.as_dim(u) for u in np.asarray(v, dtype=object).reshape(-1)]  # noqa: E731
    starts, ends = flat(starts), flat(ends)
    axes = list(range(len(starts))) if axes is None else \
        [normalize_axis(int(a), nd) for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(v) for v in np.asarray(steps).reshape(-1)]
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        raise ShapeMismatchError("Slice: starts, ends, axes and steps differ in length")
    begin, end, stride = [0] * nd, list(shape), [1] * nd
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = shape[a]
        if st == 0:
            raise ShapeMismatchError("Slice: step 0")

        def wrap(v):  # a negative int counts from the end
            return sym.as_dim(sym.as_expr(v) + sym.as_expr(d)) if isinstance(v, int) and v < 0 \
                else v
        s, e = wrap(s), wrap(e)
        lo, hi = (0, d) if st > 0 else (0, sym.as_dim(sym.as_expr(d) - 1))
        elo = 0 if st > 0 else -1
        s = sym.dim_min(sym.dim_max(s, lo, b_), hi, b_)
        e = sym.dim_min(sym.dim_max(e, elo, b_), hi, b_)
        begin[a], end[a], stride[a] = s, e, st
    if all(sym.dims_equal(b, 0) and sym.dims_equal(e, d) and st == 1
           for b, e, st, d in zip(begin, end, stride, shape)):
        return [x]
    return [ctx.call("strided_slice", [x], {"begin": begin, "end": end, "strides": stride})]


@converter("Expand", since=8)
def expand(ctx, node):
    """ONNX Expand-8: ``broadcast_to`` the constant shape (input 1) under multidirectional
    broadcasting.

    Raises:
        RuntimeValueError: the shape is only known at run time."""
    shp = _const_input(ctx, node, 1, "shape")
    return [ctx.call("broadcast_to", [node.input(0)],
                     {"shape": [sym.as_dim(v) for v in np.asarray(shp, dtype=object).reshape(-1)]})]


@converter("ConstantOfShape", since=9)
def constant_of_shape(ctx, node):
    """ONNX ConstantOfShape-9: a constant of the shape in input 1 filled with ``value`` (default
    float32 0).

    Raises:
        RuntimeValueError: the shape is only known at run time."""
    shp = _const_input(ctx, node, 0, "shape")
    value = node.attr("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    return [ctx.const(np.full([int(v) for v in shp.reshape(-1)], value.reshape(-1)[0],
                              dtype=value.dtype))]


@converter("Constant", since=1)
def constant(ctx, node):
    """ONNX Constant: the constant of ``value`` or ``value_float(s)``/``value_int(s)``
    (float32/int64).

    Raises:
        UnsupportedOpError: ``sparse_value`` or any other attribute (``value_string(s)``)."""
    a = node.attrs
    if "value" in a:
        return [ctx.const(a["value"])]
    if "value_float" in a:
        return [ctx.const(np.array(a["value_float"], np.float32))]
    if "value_floats" in a:
        return [ctx.const(np.array(a["value_floats"], np.float32))]
    if "value_int" in a:
        return [ctx.const(np.array(a["value_int"], np.int64))]
    if "value_ints" in a:
        return [ctx.const(np.array(a["value_ints"], np.int64))]
    if "sparse_value" in a:
        raise UnsupportedOpError("Constant with sparse_value is not supported")
    raise UnsupportedOpError(f"Constant with attributes {sorted(a)} is not supported")



@converter("Pad", since=1)
def pad(ctx, node):
    """ONNX Pad: pads as attribute (opset 1: ``paddings``, 2-10: ``pads``) or input (11+),
    optional ``constant_value`` input and ``axes`` input (18+); modes constant/reflect/edge
    (wrap from 19)."""
    x = node.input(0)
    nd = x.type.ndim
    mode = node.attr("mode", "constant")
    if node.opset < 11:
        pads = list(node.attr("pads" if node.opset >= 2 else "paddings", [0] * (2 * nd)))
        value = float(node.attr("value", 0.0))
    else:
        pads = [int(p) for p in _const_input(ctx, node, 1, "pads").reshape(-1)]
        cv = _const_input(ctx, node, 2, "constant_value")
        value = cv.reshape(-1)[0].item() if cv is not None and cv.size else 0.0
        axes = _const_input(ctx, node, 3, "axes")
        if axes is not None:
            axes = [normalize_axis(int(a), nd) for a in axes.reshape(-1)]
            if len(pads) != 2 * len(axes):
                raise ShapeMismatchError(f"Pad: {len(pads)} pads for {len(axes)} axes")
            full = [0] * (2 * nd)
            for k, a in enumerate(axes):
                full[a], full[nd + a] = pads[k], pads[len(axes) + k]
            pads = full
    if len(pads) != 2 * nd:
        raise ShapeMismatchError(f"Pad: {len(pads)} pads for an input of rank {nd}")
    if mode == "wrap" and node.opset < 19:
        raise UnsupportedOpError(f"Pad mode 'wrap' needs opset 19 (model has {node.opset})")
    if x.type.dtype.startswith("float"):
        value = float(value)
    return [ctx.call("nn.pad", [x], {"pads": pads, "mode": mode, "value": value})]
