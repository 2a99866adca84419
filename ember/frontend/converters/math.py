"""Converters for ONNX elementwise math, comparison, logic, Clip, Cast, Where and reductions."""

from __future__ import annotations

from ...errors import ShapeMismatchError, UnsupportedOpError
from . import converter
from ...dtypes import EXT_FLOAT
from ..dtypes import onnx_dtype


def _legacy_broadcast(ctx, node, a, b):
    """Opset < 7 ``broadcast=1, axis=k``: align b's dims with a's starting at axis k."""
    if node.opset >= 7 or not node.attr("broadcast", 0):
        return b
    axis = node.attr("axis")
    if axis is None:
        return b
    na, nb = a.type.ndim, b.type.ndim
    axis = axis + na if axis < 0 else axis
    trailing = na - axis - nb
    if trailing > 0:
        b = ctx.call("reshape", [b], {"newshape": list(b.type.shape) + [1] * trailing})
    return b


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
           "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
           "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
           "Xor": "logical_xor"}


def _binary(op):
    def convert(ctx, node):
        a, b = node.input(0), node.input(1)
        b = _legacy_broadcast(ctx, node, a, b)
        return [ctx.call(op, [a, b])]
    return convert


for _onnx, _op in _BINARY.items():
    converter(_onnx, since=1)(_binary(_op))


def _variadic(op, mean=False):
    def convert(ctx, node):
        ins = [x for x in node.inputs if x is not None]
        if not ins:
            raise ShapeMismatchError("needs at least one input")
        acc = ins[0]
        if len(ins) == 1:
            return [ctx.call("copy", [acc])]
        for x in ins[1:]:
            acc = ctx.call(op, [acc, x])
        if mean:
            acc = ctx.call("divide", [acc, ctx.const(len(ins), acc.type.dtype)])
        return [acc]
    return convert


converter("Sum", since=1)(_variadic("add"))
converter("Mean", since=1)(_variadic("add", mean=True))
converter("Max", since=1)(_variadic("maximum"))
converter("Min", since=1)(_variadic("minimum"))

_UNARY = {"Relu": "nn.relu", "Neg": "negative", "Abs": "abs", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Tanh": "tanh", "Erf": "erf", "Sigmoid": "sigmoid", "Floor": "floor",
          "Ceil": "ceil", "Round": "round", "Reciprocal": "reciprocal", "Sin": "sin", "Cos": "cos",
          "Not": "logical_not", "IsNaN": "isnan", "Sign": "sign"}


def _unary(op):
    def convert(ctx, node):
        return [ctx.call(op, [node.input(0)])]
    return convert


for _onnx, _op in _UNARY.items():
    converter(_onnx, since=1)(_unary(_op))


@converter("Identity", since=1)
def identity(ctx, node):
    """ONNX Identity: the input value itself (no binding)."""
    return [node.input(0)]


@converter("Clip", since=1)
def clip(ctx, node):
    """ONNX Clip: ``clip(x, min, max)``; bounds are attributes before opset 11, optional inputs
    from 11 (a run-time bound becomes ``maximum``/``minimum``; no bound gives a copy).

    Raises:
        ShapeMismatchError: a constant bound that is not a scalar."""
    x = node.input(0)
    if node.opset < 11:
        lo = node.attr("min", None)
        hi = node.attr("max", None)
        return [ctx.call("clip", [x], {"min": lo, "max": hi})]
    lo_v, hi_v = node.input(1), node.input(2)
    attrs = {"min": None, "max": None}
    for key, v in (("min", lo_v), ("max", hi_v)):
        if v is None:
            continue
        c = ctx.constant_value(v)
        if c is None:
            # a run-time bound: clamp with maximum/minimum against the scalar tensor
            x = ctx.call("maximum" if key == "min" else "minimum", [x, v])
        else:
            if c.size != 1:
                raise ShapeMismatchError(f"Clip {key} must be a scalar, got shape {c.shape}")
            attrs[key] = c.reshape(()).item()
    if attrs["min"] is None and attrs["max"] is None:
        return [x if x is not node.input(0) else ctx.call("copy", [x])]
    return [ctx.call("clip", [x], attrs)]


@converter("Cast", since=1)
def cast(ctx, node):
    """ONNX Cast: ``x`` converted to dtype ``to`` (``cast_to``: ONNX Cast semantics, saturation for
    float8).

    Raises:
        UnsupportedOpError: ``to`` is not a supported dtype."""
    to = node.attr("to")
    if isinstance(to, str):
        to = {"FLOAT": 1, "INT64": 7, "INT32": 6, "BOOL": 9, "FLOAT16": 10,
              "DOUBLE": 11}.get(to.upper(), -1)
    dtype = onnx_dtype(to, "Cast to: ")
    return [cast_to(ctx, node, node.input(0), dtype)]


def cast_to(ctx, node, x, dtype: str):
    """``cast`` of ``x`` to ``dtype``; ``narrow_cast`` when the node asks for non-default
    float8 conversion (saturate=0, round_mode other than 'up')."""
    sat, mode = node.attr("saturate", 1), node.attr("round_mode", "up")
    if dtype in EXT_FLOAT and (not sat or mode != "up"):
        return ctx.call("narrow_cast", [x], {"dtype": dtype, "saturate": sat, "round_mode": mode})
    return ctx.call("cast", [x], {"dtype": dtype})


@converter("Where", since=9)
def where(ctx, node):
    """ONNX Where-9: ``where(condition, x, y)`` with multidirectional broadcasting."""
    return [ctx.call("where", [node.input(0), node.input(1), node.input(2)])]


# reductions -------------------------------------------------------------------------------------

_REDUCE = {"ReduceSum": ("sum", 13), "ReduceMean": ("mean", 18), "ReduceMax": ("max", 18),
           "ReduceMin": ("min", 18), "ReduceProd": ("prod", 18)}


def _reduce(op, axes_input_since):
    def convert(ctx, node):
        x = node.input(0)
        keepdims = node.attr("keepdims", 1)
        if node.opset >= axes_input_since:
            a = node.input(1)
            if a is None:
                axes = None
            else:
                c = ctx.require_constant(a, "input 1 (axes)")
                axes = [int(v) for v in c.reshape(-1)]
            if (axes is None or axes == []) and node.attr("noop_with_empty_axes", 0):
                return [ctx.call("copy", [x])]
            if axes == []:
                axes = None
        else:
            axes = node.attr("axes")
            axes = list(axes) if axes is not None else None
        return [ctx.call(op, [x], {"axes": axes, "keepdims": keepdims})]
    return convert


for _onnx, (_op, _since) in _REDUCE.items():
    converter(_onnx, since=1)(_reduce(_op, _since))
