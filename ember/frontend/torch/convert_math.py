"""ATen converters: elementwise arithmetic, comparisons, activations and reductions.

Arithmetic follows torch's type promotion: the node's recorded output dtype (or, for
comparisons, ``torch.result_type`` of the operands) is the dtype both operands are cast to;
Python scalars become constants of that dtype.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedOpError
from .registry import aten
from .values import as_value, axes_of, cast, is_value, promoted

_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide",
           "pow": "power", "maximum": "maximum", "minimum": "minimum",
           "remainder": "mod", "fmod": "mod", "bitwise_and": "bitwise_and",
           "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
           "logical_and": "logical_and", "logical_or": "logical_or",
           "logical_xor": "logical_xor"}
_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal"}


def _binary(op: str, torch_name: str):
    def convert(ctx, node, a, b, alpha=1, rounding_mode=None):
        dt = "bool" if op.startswith("logical_") else node.dtype
        x, y = as_value(ctx, a, dt), as_value(ctx, b, dt)
        if rounding_mode is not None and not dt.startswith(("float", "bfloat")):
            return _int_div(ctx, x, y, rounding_mode)
        if alpha != 1:
            y = ctx.call("multiply", [y, as_value(ctx, alpha, dt)])
        out = ctx.call(op, [x, y], {"fmod": 1} if torch_name == "fmod" else {})
        if rounding_mode == "floor":
            out = ctx.call("floor", [out])
        elif rounding_mode == "trunc":
            out = _trunc(ctx, out)
        return out
    return convert


def _int_div(ctx, x, y, mode: str):
    """Integer division: ``divide`` truncates toward zero; ``floor`` steps the quotient down
    where the remainder is non-zero and its sign differs from the divisor's."""
    q = ctx.call("divide", [x, y])
    if mode != "floor":
        return q
    zero = ctx.const(np.zeros((), dtype=x.type.dtype))
    r = ctx.call("subtract", [x, ctx.call("multiply", [q, y])])
    nonzero = ctx.call("logical_not", [ctx.call("equal", [r, zero])])
    signs = ctx.call("logical_xor", [ctx.call("less", [r, zero]), ctx.call("less", [y, zero])])
    step = ctx.call("cast", [ctx.call("logical_and", [nonzero, signs])], {"dtype": x.type.dtype})
    return ctx.call("subtract", [q, step])


def _trunc(ctx, x):
    """Round toward zero: ``sign(x) * floor(|x|)``."""
    return ctx.call("multiply", [ctx.call("sign", [x]),
                                 ctx.call("floor", [ctx.call("abs", [x])])])


for _t, _op in _BINARY.items():
    aten(*(f"aten.{_t}.{o}" for o in ("Tensor", "Scalar", "default", "Tensor_Scalar",
                                      "Tensor_Tensor", "Tensor_mode", "Scalar_Tensor")))(
        _binary(_op, _t))


@aten("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(ctx, node, a, b, alpha=1):
    """``b - alpha * a``."""
    dt = node.dtype
    x = as_value(ctx, a, dt)
    if alpha != 1:
        x = ctx.call("multiply", [x, as_value(ctx, alpha, dt)])
    return ctx.call("subtract", [as_value(ctx, b, dt), x])


def _compare(op: str):
    def convert(ctx, node, a, b):
        dt = promoted(node, 0, 1)
        x, y = as_value(ctx, a, dt), as_value(ctx, b, dt)
        if op == "not_equal":
            return ctx.call("logical_not", [ctx.call("equal", [x, y])])
        return ctx.call(op, [x, y])
    return convert


for _t, _op in _COMPARE.items():
    aten(f"aten.{_t}.Tensor", f"aten.{_t}.Scalar")(_compare(_op))


@aten("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def where(ctx, node, cond, a, b):
    """``cond ? a : b`` with a and b promoted to the output dtype."""
    dt = node.dtype
    return ctx.call("where", [cast(ctx, cond, "bool"), as_value(ctx, a, dt), as_value(ctx, b, dt)])


# unary ------------------------------------------------------------------------------------------

_UNARY = {"relu": "nn.relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
          "sqrt": "sqrt", "neg": "negative", "abs": "abs", "erf": "erf", "sin": "sin",
          "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
          "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
          "floor": "floor", "ceil": "ceil", "round": "round", "sign": "sign",
          "reciprocal": "reciprocal", "logical_not": "logical_not",
          "bitwise_not": "bitwise_not", "silu": "nn.swish", "hardswish": "nn.hard_swish",
          "mish": "nn.mish", "isnan": "isnan", "isinf": "isinf"}


def _unary(op: str):
    def convert(ctx, node, x):
        if op == "logical_not":
            x = cast(ctx, x, "bool")
        elif op not in ("isnan", "isinf", "bitwise_not"):
            x = cast(ctx, x, node.dtype)
        return ctx.call(op, [x])
    return convert


for _t, _op in _UNARY.items():
    aten(f"aten.{_t}.default")(_unary(_op))


@aten("aten.rsqrt.default")
def rsqrt(ctx, node, x):
    """``1 / sqrt(x)``."""
    return ctx.call("reciprocal", [ctx.call("sqrt", [cast(ctx, x, node.dtype)])])


@aten("aten.log1p.default", "aten.expm1.default", "aten.log2.default", "aten.log10.default",
      "aten.exp2.default")
def log_family(ctx, node, x):
    """``log(1 + x)``, ``exp(x) - 1``, ``log(x) / log(2|10)``, ``2 ** x`` in graph ops."""
    x = cast(ctx, x, node.dtype)
    dt = node.dtype
    kind = node.op_type.split(".")[1]
    if kind == "log1p":
        return ctx.call("log", [ctx.call("add", [x, as_value(ctx, 1, dt)])])
    if kind == "expm1":
        return ctx.call("subtract", [ctx.call("exp", [x]), as_value(ctx, 1, dt)])
    if kind == "exp2":
        return ctx.call("power", [as_value(ctx, 2, dt), x])
    base = 2.0 if kind == "log2" else 10.0
    return ctx.call("multiply", [ctx.call("log", [x]), as_value(ctx, 1 / math.log(base), dt)])


@aten("aten.gelu.default")
def gelu(ctx, node, x, approximate="none"):
    """GELU, exact (erf) or ``approximate="tanh"`` (``nn.gelu``)."""
    return ctx.call("nn.gelu", [x], {"approximate": approximate})


@aten("aten.hardsigmoid.default")
def hardsigmoid(ctx, node, x):
    """``clip(x / 6 + 1/2, 0, 1)`` (``nn.hard_sigmoid`` alpha 1/6)."""
    return ctx.call("nn.hard_sigmoid", [x], {"alpha": 1 / 6, "beta": 0.5})


@aten("aten.leaky_relu.default")
def leaky_relu(ctx, node, x, negative_slope=0.01):
    """``nn.leaky_relu`` with torch's ``negative_slope``."""
    return ctx.call("nn.leaky_relu", [x], {"alpha": float(negative_slope)})


@aten("aten.elu.default")
def elu(ctx, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """``nn.elu``; torch's ``scale``/``input_scale`` (SELU's form) through multiplies."""
    dt = node.dtype
    if input_scale != 1:
        x = ctx.call("multiply", [x, as_value(ctx, input_scale, dt)])
    y = ctx.call("nn.elu", [x], {"alpha": float(alpha)})
    if scale != 1:
        y = ctx.call("multiply", [y, as_value(ctx, scale, dt)])
    return y


@aten("aten.softplus.default")
def softplus(ctx, node, x, beta=1, threshold=20):
    """``log(1 + exp(beta x)) / beta`` (``nn.softplus``; torch's linear region above
    ``threshold`` differs from it by less than float32 rounding)."""
    dt = node.dtype
    if beta != 1:
        x = ctx.call("multiply", [x, as_value(ctx, beta, dt)])
    y = ctx.call("nn.softplus", [x])
    if beta != 1:
        y = ctx.call("divide", [y, as_value(ctx, beta, dt)])
    return y


@aten("aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default",
      "aten.hardtanh.default")
def clamp(ctx, node, x, lo=None, hi=None):
    """``clip(x, min, max)`` with scalar bounds (hardtanh's default [-1, 1])."""
    kind = node.op_type.split(".")[1]
    if kind == "clamp_max":
        lo, hi = None, lo
    elif kind == "hardtanh":
        lo = -1.0 if lo is None else lo
        hi = 1.0 if hi is None else hi
    if is_value(lo) or is_value(hi):
        raise UnsupportedOpError("clamp with tensor bounds is not supported", op=node.op_type)
    return ctx.call("clip", [cast(ctx, x, node.dtype)], {"min": lo, "max": hi})


@aten("aten.clamp.Tensor")
def clamp_tensor(ctx, node, x, lo=None, hi=None):
    """``minimum(maximum(x, lo), hi)`` with tensor bounds."""
    dt = node.dtype
    y = cast(ctx, x, dt)
    if lo is not None:
        y = ctx.call("maximum", [y, as_value(ctx, lo, dt)])
    if hi is not None:
        y = ctx.call("minimum", [y, as_value(ctx, hi, dt)])
    return y


# reductions -------------------------------------------------------------------------------------

def _reduce(op: str):
    def convert(ctx, node, x, dim=None, keepdim=False, dtype=None):
        axes = axes_of(dim, x.type.ndim)
        if op in ("sum", "prod", "mean"):
            x = cast(ctx, x, node.dtype)
        return ctx.call(op, [x], {"axes": axes, "keepdims": int(bool(keepdim))})
    return convert


aten("aten.mean.dim", "aten.mean.default")(_reduce("mean"))
aten("aten.sum.dim_IntList", "aten.sum.default")(_reduce("sum"))
aten("aten.prod.dim_int", "aten.prod.default")(_reduce("prod"))
aten("aten.amax.default")(_reduce("max"))
aten("aten.amin.default")(_reduce("min"))


@aten("aten.any.dim", "aten.any.dims", "aten.any.default", "aten.all.dim", "aten.all.dims",
      "aten.all.default")
def any_all(ctx, node, x, dim=None, keepdim=False):
    """any/all as max/min over an int32 copy of the truth values."""
    op = "max" if node.op_type.startswith("aten.any") else "min"
    xi = cast(ctx, cast(ctx, x, "bool"), "int32")
    y = ctx.call(op, [xi], {"axes": axes_of(dim, x.type.ndim), "keepdims": int(bool(keepdim))})
    return cast(ctx, y, "bool")


@aten("aten.max.dim", "aten.min.dim")
def max_dim(ctx, node, x, dim, keepdim=False):
    """``(values, indices)`` along ``dim`` (first index of the extreme, as torch on CPU)."""
    op = "max" if node.op_type.startswith("aten.max") else "min"
    ax = dim % x.type.ndim
    v = ctx.call(op, [x], {"axes": [ax], "keepdims": int(bool(keepdim))})
    i = ctx.call("arg" + op, [x], {"axis": ax, "keepdims": int(bool(keepdim))})
    return v, i


@aten("aten.argmax.default", "aten.argmin.default")
def argmax(ctx, node, x, dim=None, keepdim=False):
    """Index of the extreme along ``dim`` (over the flattened tensor when ``dim`` is None)."""
    op = "argmax" if "argmax" in node.op_type else "argmin"
    if dim is None:
        flat = ctx.call("reshape", [x], {"newshape": [int(np.prod(x.type.shape))]})
        y = ctx.call(op, [flat], {"axis": 0, "keepdims": 0})
        return ctx.call("reshape", [y], {"newshape": list(node.shape)}) if keepdim else y
    return ctx.call(op, [x], {"axis": dim % x.type.ndim, "keepdims": int(bool(keepdim))})


@aten("aten.var.correction", "aten.std.correction", "aten.var.dim", "aten.std.dim")
def var(ctx, node, x, dim=None, *args, correction=None, keepdim=False, unbiased=None):
    """Variance (standard deviation) ``sum((x - mean)^2) / (N - correction)``."""
    if args:  # var.dim(x, dim, unbiased, keepdim)
        unbiased = args[0]
        keepdim = args[1] if len(args) > 1 else keepdim
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    dt = node.dtype
    axes = axes_of(dim, x.type.ndim)
    n = int(np.prod([x.type.shape[a] for a in (axes if axes is not None
                                                else range(x.type.ndim))]))
    m = ctx.call("mean", [x], {"axes": axes, "keepdims": 1})
    d = ctx.call("subtract", [x, m])
    s = ctx.call("sum", [ctx.call("multiply", [d, d])], {"axes": axes,
                                                        "keepdims": int(bool(keepdim))})
    v = ctx.call("divide", [s, as_value(ctx, max(n - correction, 0), dt)])
    return ctx.call("sqrt", [v]) if node.op_type.startswith("aten.std") else v


@aten("aten.cumsum.default")
def cumsum(ctx, node, x, dim, dtype=None):
    """Inclusive prefix sum along ``dim``."""
    return ctx.call("cumsum", [cast(ctx, x, node.dtype)], {"axis": dim % max(x.type.ndim, 1)})


@aten("aten._softmax.default", "aten._log_softmax.default")
def softmax(ctx, node, x, dim, half_to_float=False):
    """``nn.softmax`` / ``nn.log_softmax`` along ``dim``."""
    op = "nn.log_softmax" if "log_softmax" in node.op_type else "nn.softmax"
    return ctx.call(op, [x], {"axis": dim})


@aten("aten.cumprod.default")
def cumprod(ctx, node, x, dim, dtype=None):
    """Inclusive prefix product along ``dim``."""
    return ctx.call("cumprod", [cast(ctx, x, node.dtype)], {"axis": dim % max(x.type.ndim, 1)})


@aten("aten.topk.default")
def topk(ctx, node, x, k, dim=-1, largest=True, sorted=True):
    """``(values, int64 indices)`` of the ``k`` largest (smallest) along ``dim``, sorted (ONNX
    TopK: ties by lower index)."""
    return tuple(ctx.call("topk", [x], {"k": int(k), "axis": dim % x.type.ndim,
                                        "largest": int(bool(largest)), "sorted": 1}))


@aten("aten.sort.default", "aten.sort.stable")
def sort(ctx, node, x, *args, dim=-1, descending=False, stable=None):
    """``(values, indices)`` sorted along ``dim``: ``topk`` with ``k`` = the dim's size (ties
    by lower index, so also what ``stable=True`` asks for)."""
    if node.op_type == "aten.sort.default":  # sort(x, dim=-1, descending=False)
        dim = args[0] if args else dim
        descending = args[1] if len(args) > 1 else descending
    else:  # sort.stable(x, *, stable, dim, descending)
        pass
    ax = dim % x.type.ndim
    return tuple(ctx.call("topk", [x], {"k": int(x.type.shape[ax]), "axis": ax,
                                        "largest": int(bool(descending)), "sorted": 1}))


@aten("aten.linalg_vector_norm.default")
def vector_norm(ctx, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    """``||x||_ord`` over ``dim``: ord 2 ``sqrt(sum x^2)``, 1 ``sum |x|``, inf / -inf
    ``max / min |x|``, 0 the count of non-zeros, other p ``(sum |x|^p)^(1/p)``."""
    dt = node.dtype
    x = cast(ctx, x, dt)
    axes = axes_of(dim, x.type.ndim)
    kd = {"axes": axes, "keepdims": int(bool(keepdim))}
    a = ctx.call("abs", [x])
    p = float(ord)
    if p == 2:
        return ctx.call("sqrt", [ctx.call("sum", [ctx.call("multiply", [x, x])], kd)])
    if p == 1:
        return ctx.call("sum", [a], kd)
    if p in (float("inf"), float("-inf")):
        return ctx.call("max" if p > 0 else "min", [a], kd)
    if p == 0:
        nz = cast(ctx, ctx.call("logical_not", [ctx.call("equal", [x, as_value(ctx, 0, dt)])]),
                  dt)
        return ctx.call("sum", [nz], kd)
    s = ctx.call("sum", [ctx.call("power", [a, as_value(ctx, p, dt)])], kd)
    return ctx.call("power", [s, as_value(ctx, 1.0 / p, dt)])
