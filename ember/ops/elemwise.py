"""Elementwise and broadcasting operators: unary math, binary arithmetic and comparison, ``where``,
``clip``, ``cast``. Binary and ternary operators broadcast as NumPy does (the ONNX
"multidirectional broadcasting" rule, ONNX Operators.md "Broadcasting in ONNX")."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..dtypes import EXT_FLOAT, convert, finfo_max
from ..tir.expr import Call, Expr, binop, cast, is_float
from .registry import REQUIRED, OpPattern, broadcast_shapes, np_dtype, register_op


def broadcast_load(t: te.Tensor, out_idx: Sequence[Expr]) -> Expr:
    """Read ``t`` at the output index ``out_idx`` of a broadcast (size-1 dims read index 0)."""
    nd = len(out_idx)
    idx = [0 if d == 1 else out_idx[nd - t.ndim + j] for j, d in enumerate(t.shape)]
    return t[tuple(idx)]


def _same_type(types, attrs):
    return [types[0]]


# unary ------------------------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _np_erf(x):
    return _erf(x).astype(x.dtype) if x.size else x.copy()


def _round_half_even(x):
    return np.round(x)


UNARY: dict[str, tuple[Callable, Callable, bool, str]] = {
    # name: (numpy reference, te compute of one element, float only, doc)
    "nn.relu": (lambda x: np.maximum(x, np.zeros((), x.dtype)),
                lambda e: te.maximum(e, te.const(0, e.dtype)), False, "max(x, 0) (ONNX Relu)"),
    "negative": (np.negative, lambda e: -e, False, "-x (ONNX Neg)"),
    "abs": (np.abs, te.abs, False, "|x| (ONNX Abs)"),
    "sign": (np.sign, te.sign, False, "sign of x (ONNX Sign)"),
    "exp": (np.exp, te.exp, True, "e**x (ONNX Exp)"),
    "log": (np.log, te.log, True, "natural log (ONNX Log)"),
    "sqrt": (np.sqrt, te.sqrt, True, "square root (ONNX Sqrt)"),
    "tanh": (np.tanh, te.tanh, True, "hyperbolic tangent (ONNX Tanh)"),
    "erf": (_np_erf, te.erf, True, "Gauss error function (ONNX Erf)"),
    "sigmoid": (lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype), te.sigmoid, True,
                "1 / (1 + e**-x) (ONNX Sigmoid)"),
    "floor": (np.floor, te.floor, True, "round down (ONNX Floor)"),
    "ceil": (np.ceil, te.ceil, True, "round up (ONNX Ceil)"),
    "round": (_round_half_even, te.round, True, "round half to even (ONNX Round)"),
    "reciprocal": (lambda x: (1 / x).astype(x.dtype), lambda e: te.const(1, e.dtype) / e, True,
                   "1 / x (ONNX Reciprocal)"),
    "sin": (np.sin, te.sin, True, "sine (ONNX Sin)"),
    "cos": (np.cos, te.cos, True, "cosine (ONNX Cos)"),
    "logical_not": (np.logical_not, lambda e: ~e, False, "not x on bool (ONNX Not)"),
    "isnan": (np.isnan, te.isnan, True, "x is NaN (ONNX IsNaN)"),
    "copy": (lambda x: x.copy(), lambda e: e, False, "identity copy (ONNX Identity)"),
}


def _unary_type(name, float_only):
    def infer(types, attrs):
        t = types[0]
        if float_only and not is_float(t.dtype):
            raise ShapeMismatchError(f"{name} needs a floating-point input, got {t.dtype}")
        dt = "bool" if name == "isnan" else t.dtype
        return [TensorType(t.shape, dt)]
    return infer


def _unary_compute(fn):
    def compute(inputs, attrs, out_types):
        x = inputs[0]
        return [te.compute(x.shape, lambda *i: fn(x[i]), name="y")]
    return compute


for _name, (_ref, _fn, _fo, _doc) in UNARY.items():
    register_op(_name, infer_type=_unary_type(_name, _fo),
                reference=(lambda r: lambda xs, a: [np.asarray(r(xs[0]))])(_ref),
                compute=_unary_compute(_fn), pattern=OpPattern.ELEMWISE, doc=_doc)


# binary -----------------------------------------------------------------------------------------

def _np_div(a, b):
    if a.dtype.kind in "iu":
        # C semantics: truncate toward zero (what ONNX Div means for integers); where C is
        # undefined, ember's kernels give x / 0 = 0 and MIN / -1 = MIN (wrapping) instead of
        # trapping, and so does this reference
        a, b = np.broadcast_arrays(a, b.astype(a.dtype))
        safe = np.where(b == 0, 1, b)
        with np.errstate(all="ignore"):
            q = a // safe
            q = q + ((q * safe != a) & ((a < 0) != (safe < 0))).astype(a.dtype)
        return np.where(b == 0, 0, q).astype(a.dtype)
    return np.divide(a, b)


def _np_pow(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.power(a, b.astype(a.dtype))
    return np.power(a, b.astype(a.dtype) if a.dtype.kind == "f" else b).astype(a.dtype)


BINARY: dict[str, tuple[Callable, Callable, bool, str]] = {
    # name: (numpy reference, te compute, result is bool, doc)
    "add": (np.add, lambda a, b: a + b, False, "a + b (ONNX Add, Sum)"),
    "subtract": (np.subtract, lambda a, b: a - b, False, "a - b (ONNX Sub)"),
    "multiply": (np.multiply, lambda a, b: a * b, False, "a * b (ONNX Mul)"),
    "divide": (_np_div, lambda a, b: binop("div", a, b), False,
               "a / b; integers truncate toward zero (ONNX Div)"),
    "power": (_np_pow, lambda a, b: te.power(a, cast(a.dtype, b)), False,
              "a ** b with the dtype of a (ONNX Pow)"),
    "maximum": (np.maximum, te.maximum, False, "elementwise max, NaN-propagating (ONNX Max)"),
    "minimum": (np.minimum, te.minimum, False, "elementwise min, NaN-propagating (ONNX Min)"),
    "equal": (np.equal, te.eq, True, "a == b (ONNX Equal)"),
    "less": (np.less, te.lt, True, "a < b (ONNX Less)"),
    "less_equal": (np.less_equal, te.le, True, "a <= b (ONNX LessOrEqual)"),
    "greater": (np.greater, te.gt, True, "a > b (ONNX Greater)"),
    "greater_equal": (np.greater_equal, te.ge, True, "a >= b (ONNX GreaterOrEqual)"),
    "logical_and": (np.logical_and, lambda a, b: a & b, True, "a and b (ONNX And)"),
    "logical_or": (np.logical_or, lambda a, b: a | b, True, "a or b (ONNX Or)"),
    "logical_xor": (np.logical_xor, te.ne, True, "a xor b (ONNX Xor)"),
}


def _binary_type(name, is_bool):
    def infer(types, attrs):
        a, b = types
        if a.dtype != b.dtype and name != "power":
            raise ShapeMismatchError(f"{name}: input dtypes differ ({a.dtype} vs {b.dtype})")
        shape = broadcast_shapes(a.shape, b.shape, where=f"{name}: ")
        return [TensorType(shape, "bool" if is_bool else a.dtype)]
    return infer


def _binary_compute(fn):
    def compute(inputs, attrs, out_types):
        a, b = inputs
        shape = out_types[0].shape
        return [te.compute(shape, lambda *i: fn(broadcast_load(a, i), broadcast_load(b, i)),
                           name="y")]
    return compute


for _name, (_ref, _fn, _isb, _doc) in BINARY.items():
    register_op(_name, infer_type=_binary_type(_name, _isb),
                reference=(lambda r: lambda xs, a: [np.asarray(r(xs[0], xs[1]))])(_ref),
                compute=_binary_compute(_fn), pattern=OpPattern.BROADCAST, num_inputs=(2, 2),
                doc=_doc)


# where, clip, cast ------------------------------------------------------------------------------

def _where_type(types, attrs):
    c, x, y = types
    if c.dtype != "bool":
        raise ShapeMismatchError(f"where: condition must be bool, got {c.dtype}")
    if x.dtype != y.dtype:
        raise ShapeMismatchError(f"where: branch dtypes differ ({x.dtype} vs {y.dtype})")
    return [TensorType(broadcast_shapes(c.shape, x.shape, y.shape, where="where: "), x.dtype)]


def _where_compute(inputs, attrs, out_types):
    c, x, y = inputs
    return [te.compute(out_types[0].shape,
                       lambda *i: te.select(broadcast_load(c, i), broadcast_load(x, i),
                                            broadcast_load(y, i)), name="y")]


register_op("where", infer_type=_where_type,
            reference=lambda xs, a: [np.where(xs[0], xs[1], xs[2])],
            compute=_where_compute, pattern=OpPattern.BROADCAST, num_inputs=(3, 3),
            doc="cond ? x : y with broadcasting (ONNX Where)")


def _clip_ref(xs, attrs):
    x = xs[0]
    lo, hi = attrs["min"], attrs["max"]
    y = x
    if lo is not None:
        y = np.where(y < np.asarray(lo, x.dtype), np.asarray(lo, x.dtype), y)
    if hi is not None:
        y = np.where(y > np.asarray(hi, x.dtype), np.asarray(hi, x.dtype), y)
    return [y.astype(x.dtype)]


def _clip_compute(inputs, attrs, out_types):
    x = inputs[0]
    lo, hi = attrs["min"], attrs["max"]

    def f(*i):
        e = x[i]
        if lo is not None:
            e = te.select(te.lt(e, te.const(lo, x.dtype)), te.const(lo, x.dtype), e)
        if hi is not None:
            e = te.select(te.gt(e, te.const(hi, x.dtype)), te.const(hi, x.dtype), e)
        return e
    return [te.compute(x.shape, f, name="y")]


register_op("clip", infer_type=_same_type, reference=_clip_ref, compute=_clip_compute,
            pattern=OpPattern.ELEMWISE, attrs={"min": None, "max": None},
            doc="clamp x to [min, max]; None means unbounded; NaN passes through (ONNX Clip)")


def _cast_type(types, attrs):
    return [TensorType(types[0].shape, attrs["dtype"])]


def _cast_ref(xs, attrs):
    x, to = xs[0], attrs["dtype"]
    sat, mode = attrs.get("saturate", 1), attrs.get("round_mode", "up")
    if to == "float8_e8m0fnu":
        return [_to_e8m0(x, sat, mode)]
    if sat and to.startswith("float8"):  # clamp to the finite range first
        m = finfo_max(to)
        f = np.asarray(x).astype(np.float32)
        with np.errstate(invalid="ignore"):
            x = np.where(np.isnan(f), f, np.clip(f, -m, m))
    return [convert(x, to)]


def _to_e8m0(x, saturate, mode):
    """ONNX Cast to float8_e8m0fnu: the float32 exponent, rounded up/down/nearest."""
    f = np.asarray(x, np.float32)
    u = f.view(np.uint32)
    e = ((u >> 23) & 0xFF).astype(np.uint32)
    special = e == 0xFF
    if mode == "up":
        up = (u & 0x7FFFFF) > 0
    elif mode == "nearest":
        g, r, st = (u & 0x400000) > 0, (u & 0x200000) > 0, (u & 0x1FFFFF) > 0
        up = g & (r | st | (e > 0))
    else:
        up = np.zeros(e.shape, bool)
    if saturate:
        up &= e != 0xFE
    out = np.where(special, 0xFF, (e + up) & 0xFF).astype(np.uint8)
    return out.view(np_dtype("float8_e8m0fnu"))


def _cast_compute(inputs, attrs, out_types):
    x = inputs[0]
    return [te.compute(x.shape, lambda *i: cast(attrs["dtype"], x[i]), name="y")]


register_op("cast", infer_type=_cast_type, reference=_cast_ref, compute=_cast_compute,
            pattern=OpPattern.ELEMWISE, attrs={"dtype": REQUIRED},
            doc="convert to attrs['dtype'] with C conversion rules; to float8 types saturate "
                "(clamp to the finite range), to float8_e8m0fnu round the exponent up (ONNX Cast "
                "with its default saturate=1, round_mode='up')")


def _narrow_cast_type(types, attrs):
    if attrs["dtype"] not in EXT_FLOAT:
        raise ShapeMismatchError(f"narrow_cast converts to a narrow float type, not "
                                 f"{attrs['dtype']}")
    if attrs["round_mode"] not in ("up", "down", "nearest"):
        raise ShapeMismatchError(f"narrow_cast round_mode {attrs['round_mode']!r} is not up, "
                                 f"down or nearest")
    return [TensorType(types[0].shape, attrs["dtype"])]


def _narrow_cast_compute(inputs, attrs, out_types):
    x = inputs[0]
    sat = te.const(int(attrs["saturate"]), "int32")
    mode = te.const({"up": 0, "down": 1, "nearest": 2}[attrs["round_mode"]], "int32")
    return [te.compute(x.shape, lambda *i: Call("cvt", [x[i], sat, mode], attrs["dtype"]),
                       name="y")]


register_op("narrow_cast", infer_type=_narrow_cast_type, reference=_cast_ref,
            compute=_narrow_cast_compute, pattern=OpPattern.ELEMWISE,
            attrs={"dtype": REQUIRED, "saturate": 1, "round_mode": "up"},
            doc="convert to a narrow float type (float8/float4/bfloat16) with ONNX Cast's "
                "saturate (0: overflow gives inf/NaN) and round_mode (float8_e8m0fnu: up, down, "
                "nearest) (ONNX Cast, saturate=0 or round_mode != 'up')")
