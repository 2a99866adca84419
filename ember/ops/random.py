"""Random-number operators (ONNX RandomUniform/RandomNormal[Like], Bernoulli) as native kernels.

Numbers come from a counter-based generator: element ``i`` of a tensor drawn with key ``k`` is
``fmix64(k * GOLDEN + i)`` (MurmurHash3's 64-bit finalizer, a bijection with full avalanche),
whose top 53 bits give a uniform double in ``[0, 1)``. There is no generator state: a kernel is
a pure function of its key and the element index, so it vectorizes and parallelizes like any
elementwise kernel, and the NumPy reference reproduces it bit for bit. Normal draws use the
Box-Muller transform of two such uniforms (streams ``2i`` and ``2i + 1``). The frontend derives
the key from the ONNX ``seed`` attribute (or a random one per compiled graph when absent).
"""

from __future__ import annotations

import math

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import binop, is_float
from .registry import REQUIRED, OpPattern, np_dtype, register_op
from .transform import ravel

GOLDEN = 0x9E3779B97F4A7C15
M1, M2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
MASK = (1 << 64) - 1


def key_of(seed: float) -> int:
    """The generator key of an ONNX float ``seed``."""
    return int(np.float64(seed).view(np.uint64)) ^ 0x5DEECE66D


# the generator, twice: NumPy (reference) and tensor expressions (kernels) -------------------------

def np_uniform01(key: int, counters: np.ndarray) -> np.ndarray:
    """Uniform doubles in [0, 1) for uint64 ``counters``."""
    with np.errstate(over="ignore"):
        x = np.uint64((key * GOLDEN) & MASK) + counters.astype(np.uint64)
        x ^= x >> np.uint64(33)
        x *= np.uint64(M1)
        x ^= x >> np.uint64(33)
        x *= np.uint64(M2)
        x ^= x >> np.uint64(33)
    return (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def te_uniform01(key: int, counter):
    """Uniform double in [0, 1) for an int64 ``counter`` expression."""
    x = te.cast("uint64", counter) + te.const((key * GOLDEN) & MASK, "uint64")
    for mult in (M1, M2):
        x = binop("bitxor", x, binop("shr", x, te.const(33, "uint64")))
        x = x * te.const(mult, "uint64")
    x = binop("bitxor", x, binop("shr", x, te.const(33, "uint64")))
    return te.cast("float64", binop("shr", x, te.const(11, "uint64"))) * 2.0 ** -53


def _np_normal(key, n):
    i = np.arange(n, dtype=np.uint64)
    u1 = np_uniform01(key, 2 * i)
    u2 = np_uniform01(key, 2 * i + 1)
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2 * math.pi * u2)


def _te_normal(key, flat):
    u1 = te_uniform01(key, flat * 2)
    u2 = te_uniform01(key, flat * 2 + 1)
    return te.sqrt(te.log(1.0 - u1) * -2.0) * te.cos(u2 * (2 * math.pi))


# random.uniform / random.normal -----------------------------------------------------------------

def _gen_type(types, attrs):
    if not is_float(attrs["dtype"]):
        raise ShapeMismatchError(f"random: dtype {attrs['dtype']} is not floating point")
    return [TensorType(tuple(int(d) for d in attrs["shape"]), attrs["dtype"])]


def _gen_ref(kind):
    def ref(xs, attrs):
        shape = tuple(attrs["shape"])
        n = int(np.prod(shape))
        a, b = float(attrs["a"]), float(attrs["b"])
        if kind == "uniform":
            v = a + (b - a) * np_uniform01(attrs["key"], np.arange(n, dtype=np.uint64))
        else:
            v = a + b * _np_normal(attrs["key"], n)
        return [v.reshape(shape).astype(np_dtype(attrs["dtype"]))]
    return ref


def _gen_compute(kind):
    def compute(inputs, attrs, out_types):
        shape = out_types[0].shape
        a, b = float(attrs["a"]), float(attrs["b"])

        def f(*i):
            flat = ravel(i, shape) if i else te.const(0, "int64")
            if kind == "uniform":
                v = te_uniform01(attrs["key"], flat) * (b - a) + a
            else:
                v = _te_normal(attrs["key"], flat) * b + a
            return te.cast(attrs["dtype"], v)
        return [te.compute(shape, f, name=f"random_{kind}")]
    return compute


for _kind, _doc in (("uniform", "uniform in [a, b) (ONNX RandomUniform[Like]: a=low, b=high)"),
                    ("normal", "normal with mean a and scale b (ONNX RandomNormal[Like])")):
    register_op(f"random.{_kind}", infer_type=_gen_type, reference=_gen_ref(_kind),
                compute=_gen_compute(_kind), pattern=OpPattern.ELEMWISE, num_inputs=(0, 0),
                attrs={"shape": REQUIRED, "dtype": "float32", "a": 0.0,
                       "b": 1.0, "key": REQUIRED},
                doc=f"counter-based random tensor of `shape`, {_doc}, stream `key`")


# random.bernoulli -------------------------------------------------------------------------------

def _bern_type(types, attrs):
    p = types[0]
    if not is_float(p.dtype):
        raise ShapeMismatchError(f"random.bernoulli: probabilities must be floating point, got "
                                 f"{p.dtype}")
    return [TensorType(p.shape, attrs["dtype"] or p.dtype)]


def _bern_ref(xs, attrs):
    p = xs[0]
    u = np_uniform01(attrs["key"], np.arange(p.size, dtype=np.uint64)).reshape(p.shape)
    return [(u < p.astype(np.float64)).astype(np_dtype(attrs["dtype"] or str(p.dtype)))]


def _bern_compute(inputs, attrs, out_types):
    p = inputs[0]
    shape = out_types[0].shape

    def f(*i):
        flat = ravel(i, shape) if i else te.const(0, "int64")
        draw = te.lt(te_uniform01(attrs["key"], flat), te.cast("float64", p[i]))
        return te.cast(out_types[0].dtype, draw)
    return [te.compute(shape, f, name="bernoulli")]


register_op("random.bernoulli", infer_type=_bern_type, reference=_bern_ref,
            compute=_bern_compute, pattern=OpPattern.ELEMWISE,
            attrs={"dtype": None, "key": REQUIRED},
            doc="1 where a uniform draw (stream `key`, one per element) is below the element's "
                "probability, else 0, in `dtype` (default: the input's) (ONNX Bernoulli)")
