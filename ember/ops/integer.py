"""Integer and bit operators: bitwise and/or/xor/not, shifts, and the two ONNX remainders.

``mod`` with ``fmod=0`` is the floored remainder (the result has the divisor's sign, Python's
``%``); with ``fmod=1`` it is C's ``fmod``/``%`` (the dividend's sign). Shifts move bits of
unsigned integers; a shift by the bit width or more gives 0.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeMismatchError
from ..graph.ir import TensorType
from ..tir.expr import binop, is_float
from .elemwise import broadcast_load
from .registry import OpPattern, broadcast_shapes, register_op


def _int_binary_type(name, allow_float=False):
    def infer(types, attrs):
        a, b = types
        if a.dtype != b.dtype:
            raise ShapeMismatchError(f"{name}: input dtypes differ ({a.dtype} vs {b.dtype})")
        if not allow_float and (is_float(a.dtype) or a.dtype == "bool"):
            raise ShapeMismatchError(f"{name} needs integer inputs, got {a.dtype}")
        return [TensorType(broadcast_shapes(a.shape, b.shape, where=f"{name}: "), a.dtype)]
    return infer


def _binary(fn):
    def compute(inputs, attrs, out_types):
        a, b = inputs
        return [te.compute(out_types[0].shape,
                           lambda *i: fn(broadcast_load(a, i), broadcast_load(b, i), attrs),
                           name="y")]
    return compute


def _shift(direction):
    def fn(a, b, attrs):
        bits = np.dtype(a.dtype).itemsize * 8
        signed = a.dtype.startswith("int")
        ok = te.lt(b, te.const(bits, b.dtype))
        if signed:
            ok = te.all_of(te.ge(b, te.const(0, b.dtype)), ok)
        if direction == "left":
            if signed:  # shift the bit pattern (a signed left shift may overflow in C)
                u = "u" + a.dtype
                val = te.cast(a.dtype, binop("shl", te.cast(u, a), te.cast(u, b)))
            else:
                val = binop("shl", a, b)
            return te.select(ok, val, te.const(0, a.dtype))
        out = te.select(te.lt(a, te.const(0, a.dtype)), te.const(-1, a.dtype),
                        te.const(0, a.dtype)) if signed else te.const(0, a.dtype)
        return te.select(ok, binop("shr", a, b), out)
    return fn


def _shift_ref(direction):
    def ref(xs, attrs):
        a, b = xs
        bits = a.dtype.itemsize * 8
        bad = (b >= bits) | (b < 0)
        bb = np.where(bad, 0, b).astype(a.dtype)
        if direction == "left":
            y = np.left_shift(a, bb)
            return [np.where(bad, 0, y).astype(a.dtype)]
        y = np.right_shift(a, bb)
        return [np.where(bad, np.where(a < 0, -1, 0), y).astype(a.dtype)]
    return ref


for _name, _np, _op in (("bitwise_and", np.bitwise_and, "bitand"),
                        ("bitwise_or", np.bitwise_or, "bitor"),
                        ("bitwise_xor", np.bitwise_xor, "bitxor")):
    register_op(_name, infer_type=_int_binary_type(_name),
                reference=(lambda f: lambda xs, a: [f(xs[0], xs[1])])(_np),
                compute=_binary((lambda o: lambda a, b, at: binop(o, a, b))(_op)),
                pattern=OpPattern.BROADCAST, num_inputs=(2, 2),
                doc=f"elementwise {_name.replace('_', ' ')} (ONNX Bitwise{_name[8:].capitalize()})")

for _d in ("left", "right"):
    register_op(f"{_d}_shift", infer_type=_int_binary_type(f"{_d}_shift"),
                reference=_shift_ref(_d), compute=_binary(_shift(_d)),
                pattern=OpPattern.BROADCAST, num_inputs=(2, 2),
                doc=f"{_d} shift; a shift count outside [0, bit width) gives 0 (-1 for a right shift "
                    f"of a negative value) (ONNX BitShift)")

def _bitnot_type(types, attrs):
    if is_float(types[0].dtype):
        raise ShapeMismatchError(f"bitwise_not needs integer/bool input, got {types[0].dtype}")
    return [types[0]]


register_op("bitwise_not", infer_type=_bitnot_type,
            reference=lambda xs, a: [np.invert(xs[0])],
            compute=lambda ins, a, ot: [te.compute(ins[0].shape, lambda *i: (
                ~ins[0][i]) if ins[0].dtype == "bool" else _bitnot(ins[0][i]), name="bnot")],
            pattern=OpPattern.ELEMWISE, doc="bitwise complement (ONNX BitwiseNot)")


def _bitnot(e):
    from ..tir.expr import Unary
    return Unary("bitnot", e)


def _mod_ref(xs, attrs):
    a, b = xs
    with np.errstate(all="ignore"):
        if attrs["fmod"]:
            if a.dtype.kind == "f":
                return [np.fmod(a, b)]
            return [np.fmod(a, b).astype(a.dtype)]
        if a.dtype.kind == "f":
            return [np.mod(a, b)]
        safe = np.where(b == 0, 1, b)
        return [np.where(b == 0, 0, np.mod(a, safe)).astype(a.dtype)]


def _mod_fn(a, b, attrs):
    zero = te.const(0, b.dtype)
    if attrs["fmod"]:
        if is_float(a.dtype):
            return te.cast(a.dtype, te.fmod(_up(a), _up(b)))
        return te.select(te.eq(b, zero), te.const(0, a.dtype), binop("mod", a, b))
    if is_float(a.dtype):
        return te.cast(a.dtype, binop("floormod", _up(a), _up(b)))
    return te.select(te.eq(b, zero), te.const(0, a.dtype), binop("floormod", a, b))


def _up(e):
    return te.cast("float32", e) if e.dtype in ("float16", "bfloat16") else e


register_op("mod", infer_type=_int_binary_type("mod", allow_float=True), reference=_mod_ref,
            compute=_binary(_mod_fn), pattern=OpPattern.BROADCAST, num_inputs=(2, 2),
            attrs={"fmod": 0},
            doc="remainder: fmod=0 floored (sign of the divisor), fmod=1 truncated (sign of the "
                "dividend); integer division by zero gives 0 (ONNX Mod)")
# bitcast ----------------------------------------------------------------------------------------

def _bitcast_type(types, attrs):
    from ..dtypes import is_ext, itemsize
    x, to = types[0], attrs["dtype"]
    if is_ext(x.dtype) or is_ext(to):
        raise ShapeMismatchError(f"bitcast between {x.dtype} and {to} (narrow types) is not "
                                 f"supported")
    if itemsize(x.dtype) != itemsize(to):
        raise ShapeMismatchError(f"bitcast needs types of one width: {x.dtype} -> {to}")
    return [TensorType(x.shape, to)]


def _bitcast_compute(inputs, attrs, out_types):
    from ..tir.expr import Call
    x = inputs[0]
    return [te.compute(x.shape, lambda *i: Call("reinterpret", [x[i]], attrs["dtype"]),
                       name="bitcast")]


register_op("bitcast", infer_type=_bitcast_type,
            reference=lambda xs, a: [np.ascontiguousarray(xs[0]).view(np.dtype(a["dtype"]))
                                     .reshape(xs[0].shape).copy()],
            compute=_bitcast_compute, pattern=OpPattern.ELEMWISE, attrs={"dtype": None},
            doc="reinterpret the bits of each element as attrs['dtype'] of the same width "
                "(ONNX BitCast)")
