"""Reductions over a set of axes: sum, mean, max, min, prod (ONNX ReduceSum/Mean/Max/Min/Prod).

``axes`` is a tuple of axes (negative allowed) or ``None`` for all axes; ``keepdims`` keeps the
reduced axes as size 1. An empty ``axes`` tuple is the identity (the frontend maps ONNX's
``noop_with_empty_axes``)."""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.ir import TensorType
from .registry import OpPattern, normalize_axis, register_op


def reduce_axes(attrs, ndim) -> tuple:
    """Normalized, sorted axes to reduce."""
    axes = attrs["axes"]
    if axes is None:
        return tuple(range(ndim))
    return tuple(sorted({normalize_axis(a, ndim, "reduce: ") for a in axes}))


def _reduce_type(types, attrs):
    x = types[0]
    axes = reduce_axes(attrs, x.ndim)
    if attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorType(shape, x.dtype)]


_NP = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def _reduce_ref(kind):
    def ref(xs, attrs):
        x = xs[0]
        axes = reduce_axes(attrs, x.ndim)
        kd = bool(attrs["keepdims"])
        if not axes:
            return [x.copy()]
        if kind in ("max", "min") and any(x.shape[a] == 0 for a in axes):
            shape = _reduce_type([TensorType(x.shape, str(x.dtype))], attrs)[0].shape
            fill = -np.inf if kind == "max" else np.inf
            if x.dtype.kind in "iu":
                info = np.iinfo(x.dtype)
                fill = info.min if kind == "max" else info.max
            return [np.full(shape, fill, x.dtype)]
        if kind == "mean" and x.dtype.kind in "iu" and any(x.shape[a] == 0 for a in axes):
            # an integer mean over nothing: the kernel's 0 / 0 is 0 (see codegen's ember_div)
            shape = _reduce_type([TensorType(x.shape, str(x.dtype))], attrs)[0].shape
            return [np.zeros(shape, x.dtype)]
        acc = np.float64 if (x.dtype.kind == "f" and kind in ("sum", "mean", "prod")) else None
        y = _NP[kind](x, axis=axes, keepdims=kd, dtype=acc) if acc else \
            _NP[kind](x, axis=axes, keepdims=kd)
        return [np.asarray(y).astype(x.dtype)]
    return ref


def _reduce_compute(kind):
    def compute(inputs, attrs, out_types):
        x = inputs[0]
        axes = reduce_axes(attrs, x.ndim)
        kd = bool(attrs["keepdims"])
        oshape = out_types[0].shape
        if not axes:
            return [te.compute(x.shape, lambda *i: x[i], name="reduce_noop")]
        rk = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
        red = {"sum": te.sum, "mean": te.sum, "max": te.max, "min": te.min,
               "prod": te.prod}[kind]

        def f(*i):
            src, j = [], 0
            for a in range(x.ndim):
                if a in rk:
                    src.append(rk[a].var)
                    if kd:
                        j += 1
                else:
                    src.append(i[j])
                    j += 1
            return red(x[tuple(src)], axis=list(rk.values()))
        y = te.compute(oshape, f, name=f"reduce_{kind}")
        if kind == "mean":
            dims = [x.shape[a] for a in axes]
            if all(isinstance(d, int) for d in dims):
                n = te.const(int(np.prod(dims)), x.dtype)
            else:  # a symbolic count (a mean over a symbolic axis): the kernel's argument
                n = 1
                for d in dims:
                    n = d * n
                n = te.cast(x.dtype, n)
            y = te.compute(oshape, lambda *i: y[i] / n, name="reduce_mean_div")
        return [y]
    return compute


for _k in _NP:
    register_op(_k, infer_type=_reduce_type, reference=_reduce_ref(_k), compute=_reduce_compute(_k),
                pattern=OpPattern.COMM_REDUCE, attrs={"axes": None, "keepdims": 1},
                doc=f"{_k} over axes (ONNX Reduce{_k.capitalize()})")
