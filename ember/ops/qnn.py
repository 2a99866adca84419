"""The quantized graph form (QDQ): ``qnn.quantize`` and ``qnn.dequantize``.

Every quantized model in ember, imported (ONNX ``QuantizeLinear``/``DequantizeLinear``, the QDQ
format onnxruntime's ``quantize_static`` writes) or made by ember's own quantizer
(``ember.quantize``), is a float graph with explicit quantize/dequantize operators carrying the
scale, the zero point and the axis:

    %q = qnn.quantize(%x, %scale, %zp, axis=1, out_dtype="uint8")   # float32 -> (u)int8
    %y = qnn.dequantize(%q, %scale, %zp, axis=1)                    # (u)int8 -> float32

Semantics follow ONNX QuantizeLinear-13 / DequantizeLinear-13 (per tensor or per ``axis``):
``quantize(x) = saturate(round_half_even(x / scale) + zero_point)`` computed in float32, and
``dequantize(q) = (float32(q) - float32(zero_point)) * scale``. ``scale`` is a float32 scalar or
a 1-D vector of ``x.shape[axis]`` elements; ``zero_point`` has the same shape and the quantized
dtype (``int8`` or ``uint8``). Both are elementwise (fusable) operators.

This form is the input of the CPU's int8 lowering (``ember.graph.passes.realize_qnn``, which
rewrites ``dequantize -> conv -> quantize`` into ``qnn.conv2d``) and of other targets' own
lowerings; ``ember.quantize`` produces it.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from .registry import OpPattern, normalize_axis, register_op

QDTYPES = {"uint8": (0, 255), "int8": (-128, 127)}


def _check_param(p: TensorType, x: TensorType, axis: int, what: str, op: str) -> None:
    if p.ndim == 0 or p.size == 1:
        return
    ax = normalize_axis(axis, x.ndim, f"{op}: ")
    if p.ndim != 1 or p.shape[0] != x.shape[ax]:
        raise ShapeMismatchError(f"{op}: {what} of shape {p.shape} must be a scalar or a vector "
                                 f"of x.shape[{ax}] = {x.shape[ax]} elements (x: {x.shape})")


def _param_load(p, i, axis: int):
    """``p`` (scalar, one element or per-axis vector) at output index ``i``."""
    if p.ndim == 0:
        return p[()]
    if int(np.prod(p.shape)) == 1:
        return p[(0,) * p.ndim]
    return p[(i[axis],)]


def _axis(axis: int, ndim: int, p_shape) -> int:
    """The normalized ``axis`` when the parameter is per axis; 0 (unused) when it is one value."""
    return normalize_axis(axis, ndim) if int(np.prod(p_shape)) > 1 else 0


def _np_param(p: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    shape = [1] * ndim
    shape[axis] = p.size
    return p.reshape(shape)


def _quantize_type(types, attrs):
    x, s, z = types
    out = attrs["out_dtype"]
    if out not in QDTYPES:
        raise ShapeMismatchError(f"qnn.quantize: out_dtype must be int8 or uint8, got {out}")
    if x.dtype != "float32" or s.dtype != "float32":
        raise ShapeMismatchError(f"qnn.quantize: x and scale must be float32, got {x.dtype}, "
                                 f"{s.dtype}")
    if z.dtype != out:
        raise ShapeMismatchError(f"qnn.quantize: zero point dtype {z.dtype} must be the "
                                 f"out_dtype {out}")
    _check_param(s, x, attrs["axis"], "scale", "qnn.quantize")
    _check_param(z, x, attrs["axis"], "zero point", "qnn.quantize")
    return [TensorType(x.shape, out)]


def quantize_ref(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int = 1,
                 out_dtype: str = "uint8") -> np.ndarray:
    """NumPy reference of ``qnn.quantize``: ``x`` float32 (any shape) -> ``out_dtype``."""
    ax = _axis(axis, x.ndim, np.shape(scale))
    s = _np_param(np.asarray(scale, np.float32), x.ndim, ax)
    z = _np_param(np.asarray(zp), x.ndim, ax).astype(np.float32)
    lo, hi = QDTYPES[out_dtype]
    q = np.rint(x.astype(np.float32) / s) + z
    return np.clip(q, lo, hi).astype(out_dtype)


def dequantize_ref(q: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int = 1) -> np.ndarray:
    """NumPy reference of ``qnn.dequantize``: integer ``q`` -> float32."""
    ax = _axis(axis, q.ndim, np.shape(scale))
    s = _np_param(np.asarray(scale, np.float32), q.ndim, ax)
    z = _np_param(np.asarray(zp), q.ndim, ax).astype(np.float32)
    return ((q.astype(np.float32) - z) * s).astype(np.float32)


def _quantize_compute(inputs, attrs, out_types):
    x, s, z = inputs
    out = attrs["out_dtype"]
    ax = _axis(attrs["axis"], len(x.shape), s.shape)
    lo, hi = QDTYPES[out]

    def f(*i):
        v = te.round(x[i] / _param_load(s, i, ax)) + te.cast("float32", _param_load(z, i, ax))
        # max/min rather than selects: the expression of v is printed once, not four times
        v = te.minimum(te.maximum(v, te.const(float(lo), "float32")), te.const(float(hi), "float32"))
        return te.cast(out, v)
    return [te.compute(out_types[0].shape, f, name="q")]


def _dequantize_type(types, attrs):
    q, s, z = types
    if q.dtype not in QDTYPES and q.dtype != "int32":
        raise ShapeMismatchError(f"qnn.dequantize: x must be int8, uint8 or int32, got {q.dtype}")
    if s.dtype != "float32" or z.dtype != q.dtype:
        raise ShapeMismatchError(f"qnn.dequantize: scale must be float32 and the zero point "
                                 f"{q.dtype}, got {s.dtype}, {z.dtype}")
    _check_param(s, q, attrs["axis"], "scale", "qnn.dequantize")
    _check_param(z, q, attrs["axis"], "zero point", "qnn.dequantize")
    return [TensorType(q.shape, "float32")]


def _dequantize_compute(inputs, attrs, out_types):
    q, s, z = inputs
    ax = _axis(attrs["axis"], len(q.shape), s.shape)

    def f(*i):
        return (te.cast("float32", q[i]) - te.cast("float32", _param_load(z, i, ax))) * \
            _param_load(s, i, ax)
    return [te.compute(out_types[0].shape, f, name="dq")]


register_op("qnn.quantize", infer_type=_quantize_type,
            reference=lambda xs, a: [quantize_ref(xs[0], xs[1], xs[2], a["axis"], a["out_dtype"])],
            compute=_quantize_compute, pattern=OpPattern.ELEMWISE, num_inputs=(3, 3),
            attrs={"axis": 1, "out_dtype": "uint8"},
            doc="saturate(round_half_even(x / scale) + zero_point) to int8/uint8, per tensor or "
                "per axis (ONNX QuantizeLinear-13); see ember.ops.qnn")
register_op("qnn.dequantize", infer_type=_dequantize_type,
            reference=lambda xs, a: [dequantize_ref(xs[0], xs[1], xs[2], a["axis"])],
            compute=_dequantize_compute, pattern=OpPattern.ELEMWISE, num_inputs=(3, 3),
            attrs={"axis": 1},
            doc="(float32(x) - zero_point) * scale, per tensor or per axis (ONNX "
                "DequantizeLinear-13); see ember.ops.qnn")
