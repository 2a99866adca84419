"""Activation functions and extra elementwise math: trigonometric and hyperbolic functions, IsInf,
and the parameterised activations of ONNX (Elu, Selu, LeakyRelu, HardSigmoid, HardSwish,
Softplus, Softsign, Gelu, Mish, Celu, ThresholdedRelu, Shrink, Swish) plus PRelu.

Every operator is elementwise: its NumPy reference computes in float64 and rounds to the input
dtype; its compute is one scalar expression per element (float16/bfloat16 evaluate in float32).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import is_float
from .elemwise import broadcast_load
from .registry import OpPattern, broadcast_shapes, register_op


def _c(v, dt):
    return te.const(v, dt)


def _mish_tanh_softplus(e):
    """``tanh(softplus(x))`` without cancellation: with ``t = exp(-|x|)`` it is
    ``(1 + 2t) / (1 + 2t + 2t^2)`` for ``x > 0`` and ``t(t + 2) / (t(t + 2) + 2)`` otherwise
    (``(1 + e^x)^2 = ...`` expanded), so no ``log(1 + tiny)`` and no ``tanh`` of a tiny
    argument (both lose the low bits in float32 for ``x < -7``) and no overflow."""
    one, two = _c(1, e.dtype), _c(2, e.dtype)
    t = te.exp(-te.abs(e))
    u = t * (t + two)
    return te.select(te.gt(e, _c(0, e.dtype)),
                     (one + two * t) / (one + two * t + two * t * t), u / (u + two))


def _f64(x):
    return np.asarray(x, np.float64)


_erf64 = np.vectorize(math.erf, otypes=[np.float64])


# name: (reference on float64 x with attrs, te fn (e, attrs), attrs with defaults, doc)
ACTIVATIONS: dict[str, tuple[Callable, Callable, dict, str]] = {
    "tan": (lambda x, a: np.tan(x), lambda e, a: te.tan(e), {}, "tangent (ONNX Tan)"),
    "asin": (lambda x, a: np.arcsin(x), lambda e, a: te.asin(e), {}, "arc sine (ONNX Asin)"),
    "acos": (lambda x, a: np.arccos(x), lambda e, a: te.acos(e), {}, "arc cosine (ONNX Acos)"),
    "atan": (lambda x, a: np.arctan(x), lambda e, a: te.atan(e), {}, "arc tangent (ONNX Atan)"),
    "sinh": (lambda x, a: np.sinh(x), lambda e, a: te.sinh(e), {}, "hyperbolic sine (ONNX Sinh)"),
    "cosh": (lambda x, a: np.cosh(x), lambda e, a: te.cosh(e), {}, "hyperbolic cosine (ONNX Cosh)"),
    "asinh": (lambda x, a: np.arcsinh(x), lambda e, a: te.asinh(e), {}, "inverse hyperbolic sine (ONNX Asinh)"),
    "acosh": (lambda x, a: np.arccosh(x), lambda e, a: te.acosh(e), {}, "inverse hyperbolic cosine (ONNX Acosh)"),
    "atanh": (lambda x, a: np.arctanh(x), lambda e, a: te.atanh(e), {}, "inverse hyperbolic tangent (ONNX Atanh)"),
    "nn.elu": (lambda x, a: np.where(x > 0, x, a["alpha"] * (np.exp(x) - 1)),
               lambda e, a: te.select(te.gt(e, _c(0, e.dtype)), e,
                                      _c(a["alpha"], e.dtype) * (te.exp(e) - _c(1, e.dtype))),
               {"alpha": 1.0}, "x if x > 0 else alpha * (exp(x) - 1) (ONNX Elu)"),
    "nn.selu": (lambda x, a: a["gamma"] * np.where(x > 0, x, a["alpha"] * (np.exp(x) - 1)),
                lambda e, a: _c(a["gamma"], e.dtype) * te.select(
                    te.gt(e, _c(0, e.dtype)), e,
                    _c(a["alpha"], e.dtype) * (te.exp(e) - _c(1, e.dtype))),
                {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
                "gamma * (x if x > 0 else alpha * (exp(x) - 1)) (ONNX Selu)"),
    "nn.leaky_relu": (lambda x, a: np.where(x >= 0, x, a["alpha"] * x),
                      lambda e, a: te.select(te.ge(e, _c(0, e.dtype)), e,
                                             _c(a["alpha"], e.dtype) * e),
                      {"alpha": 0.01}, "x if x >= 0 else alpha * x (ONNX LeakyRelu)"),
    "nn.hard_sigmoid": (lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1),
                        lambda e, a: te.maximum(_c(0, e.dtype), te.minimum(
                            _c(1, e.dtype), _c(a["alpha"], e.dtype) * e + _c(a["beta"], e.dtype))),
                        {"alpha": 0.2, "beta": 0.5},
                        "max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid)"),
    "nn.hard_swish": (lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1),
                      lambda e, a: e * te.maximum(_c(0, e.dtype), te.minimum(
                          _c(1, e.dtype), e * _c(1 / 6, e.dtype) + _c(0.5, e.dtype))),
                      {}, "x * max(0, min(1, x / 6 + 1/2)) (ONNX HardSwish)"),
    "nn.softplus": (lambda x, a: np.logaddexp(0, x),
                    lambda e, a: te.select(te.gt(e, _c(0, e.dtype)),
                                           e + te.log(_c(1, e.dtype) + te.exp(-e)),
                                           te.log(_c(1, e.dtype) + te.exp(e))),
                    {}, "log(1 + exp(x)), overflow-safe (ONNX Softplus)"),
    "nn.softsign": (lambda x, a: x / (1 + np.abs(x)),
                    lambda e, a: e / (_c(1, e.dtype) + te.abs(e)), {}, "x / (1 + |x|) (ONNX Softsign)"),
    "nn.gelu": (lambda x, a: (0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))))
                if a["approximate"] == "tanh" else 0.5 * x * (1 + _erf64(x / math.sqrt(2))),
                lambda e, a: _c(0.5, e.dtype) * e * (_c(1, e.dtype) + (
                    te.tanh(_c(math.sqrt(2 / math.pi), e.dtype) *
                            (e + _c(0.044715, e.dtype) * e * e * e))
                    if a["approximate"] == "tanh" else te.erf(e * _c(1 / math.sqrt(2), e.dtype)))),
                {"approximate": "none"},
                "x * Phi(x); approximate='tanh' uses the tanh formula (ONNX Gelu)"),
    "nn.mish": (lambda x, a: x * np.tanh(np.logaddexp(0, x)),
                lambda e, a: e * _mish_tanh_softplus(e),
                {}, "x * tanh(softplus(x)) (ONNX Mish)"),
    "nn.celu": (lambda x, a: np.maximum(0, x) + np.minimum(0, a["alpha"] * (np.exp(x / a["alpha"]) - 1)),
                lambda e, a: te.maximum(_c(0, e.dtype), e) + te.minimum(
                    _c(0, e.dtype), _c(a["alpha"], e.dtype) *
                    (te.exp(e / _c(a["alpha"], e.dtype)) - _c(1, e.dtype))),
                {"alpha": 1.0}, "max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) (ONNX Celu)"),
    "nn.thresholded_relu": (lambda x, a: np.where(x > a["alpha"], x, 0),
                            lambda e, a: te.select(te.gt(e, _c(a["alpha"], e.dtype)), e,
                                                   _c(0, e.dtype)),
                            {"alpha": 1.0}, "x if x > alpha else 0 (ONNX ThresholdedRelu)"),
    "nn.shrink": (lambda x, a: np.where(x < -a["lambd"], x + a["bias"],
                                        np.where(x > a["lambd"], x - a["bias"], 0)),
                  lambda e, a: te.select(te.lt(e, _c(-a["lambd"], e.dtype)), e + _c(a["bias"], e.dtype),
                                         te.select(te.gt(e, _c(a["lambd"], e.dtype)),
                                                   e - _c(a["bias"], e.dtype), _c(0, e.dtype))),
                  {"bias": 0.0, "lambd": 0.5},
                  "x + bias if x < -lambd, x - bias if x > lambd, else 0 (ONNX Shrink)"),
    "nn.swish": (lambda x, a: x / (1 + np.exp(-a["alpha"] * x)),
                 lambda e, a: e * te.sigmoid(_c(a["alpha"], e.dtype) * e),
                 {"alpha": 1.0}, "x * sigmoid(alpha * x) (ONNX Swish)"),
}

# operators that also accept integer inputs (computed exactly in the input dtype)
_INT_OK = {"nn.leaky_relu", "nn.thresholded_relu", "nn.shrink"}


def _act_type(name):
    def infer(types, attrs):
        t = types[0]
        if name not in _INT_OK and not is_float(t.dtype):
            raise ShapeMismatchError(f"{name} needs a floating-point input, got {t.dtype}")
        return [t]
    return infer


def _act_ref(ref):
    def f(xs, attrs):
        x = xs[0]
        with np.errstate(all="ignore"):
            y = ref(_f64(x), attrs)
        if x.dtype.kind in "iu":
            y = np.trunc(y)
        return [np.asarray(y).astype(x.dtype)]
    return f


def _act_compute(fn):
    def compute(inputs, attrs, out_types):
        x = inputs[0]
        return [te.compute(x.shape, lambda *i: te.cast(x.dtype, fn(_up(x[i]), attrs)), name="act")]
    return compute


def _up(e):
    """Evaluate narrow floats in float32."""
    return te.cast("float32", e) if e.dtype in ("float16", "bfloat16") else e


for _name, (_ref, _fn, _attrs, _doc) in ACTIVATIONS.items():
    register_op(_name, infer_type=_act_type(_name), reference=_act_ref(_ref),
                compute=_act_compute(_fn), pattern=OpPattern.ELEMWISE, attrs=dict(_attrs),
                doc=_doc)


# isinf -----------------------------------------------------------------------------------------

def _isinf_ref(xs, attrs):
    x = xs[0]
    pos, neg = attrs["detect_positive"], attrs["detect_negative"]
    return [(np.isposinf(x) & bool(pos)) | (np.isneginf(x) & bool(neg))]


def _isinf_compute(inputs, attrs, out_types):
    x = inputs[0]
    pos, neg = attrs["detect_positive"], attrs["detect_negative"]

    def f(*i):
        e = _up(x[i])
        inf = te.const(np.inf, e.dtype)
        conds = []
        if pos:
            conds.append(te.eq(e, inf))
        if neg:
            conds.append(te.eq(e, -inf))
        if not conds:
            return te.const(False, "bool")
        return conds[0] if len(conds) == 1 else conds[0] | conds[1]
    return [te.compute(x.shape, f, name="isinf")]


register_op("isinf", infer_type=lambda t, a: [TensorType(t[0].shape, "bool")],
            reference=_isinf_ref, compute=_isinf_compute, pattern=OpPattern.ELEMWISE,
            attrs={"detect_positive": 1, "detect_negative": 1},
            doc="x is +inf (detect_positive) or -inf (detect_negative) (ONNX IsInf)")


# prelu ------------------------------------------------------------------------------------------

def _prelu_type(types, attrs):
    x, s = types
    shape = broadcast_shapes(x.shape, s.shape, where="nn.prelu: ")
    if shape != tuple(x.shape):
        raise ShapeMismatchError(f"nn.prelu: slope {s.shape} must broadcast to x {x.shape}")
    return [x]


def _prelu_ref(xs, attrs):
    x, s = xs
    return [np.where(x < 0, x * s, x).astype(x.dtype)]


def _prelu_compute(inputs, attrs, out_types):
    x, s = inputs
    return [te.compute(x.shape, lambda *i: te.select(
        te.lt(x[i], te.const(0, x.dtype)), x[i] * broadcast_load(s, i), x[i]), name="prelu")]


register_op("nn.prelu", infer_type=_prelu_type, reference=_prelu_ref, compute=_prelu_compute,
            pattern=OpPattern.BROADCAST, num_inputs=(2, 2),
            doc="x if x >= 0 else slope * x, slope broadcast to x (ONNX PRelu)")
