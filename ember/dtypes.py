"""Tensor element types beyond numpy's own, through ``ml_dtypes``.

ember names a dtype by its numpy name (``"float32"``, ``"int64"``, ``"bool"``...) or, for the
narrow types of ONNX, by its ``ml_dtypes`` name: ``bfloat16``, the float8 variants
``float8_e4m3fn``, ``float8_e4m3fnuz``, ``float8_e5m2``, ``float8_e5m2fnuz``, ``float8_e8m0fnu``,
``float4_e2m1fn``, and the sub-byte integers ``int4``, ``uint4``, ``int2``, ``uint2``. In memory
each element takes one byte (two for bfloat16), as ml_dtypes stores them; the sub-byte integers
keep their value in the low bits. Kernels compute narrow floats in float32 and narrow ints in
8-bit integers, converting on load and store (``ember.codegen.dtype_support``).

Note: ``np.dtype("int4")`` is numpy's int32, so these names must go through ``np_dtype``.
"""

from __future__ import annotations

import numpy as np

EXT_FLOAT = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
             "float8_e8m0fnu", "float4_e2m1fn")
EXT_INT = ("int4", "uint4", "int2", "uint2")
EXT_DTYPES = EXT_FLOAT + EXT_INT


def is_ext(name: str) -> bool:
    """True for the ml_dtypes-backed narrow types."""
    return name in EXT_DTYPES


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype object of an ember dtype name."""
    if name in EXT_DTYPES:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def dtype_name(dt) -> str:
    """The ember name of a numpy dtype (or name)."""
    if isinstance(dt, str) and dt in EXT_DTYPES:
        return dt
    d = np.dtype(dt)
    if d.name in EXT_DTYPES:
        return d.name
    return str(d)


def itemsize(name: str) -> int:
    """Bytes per element in memory."""
    return np_dtype(name).itemsize


def is_ext_float(name: str) -> bool:
    """True for the ml_dtypes narrow floats (``EXT_FLOAT``: bfloat16, float8 and float4
    variants)."""
    return name in EXT_FLOAT


def is_ext_int(name: str) -> bool:
    """True for the sub-byte integers (``EXT_INT``: int4, uint4, int2, uint2)."""
    return name in EXT_INT


def ext_int_bits(name: str) -> tuple[int, bool]:
    """``(bits, signed)`` of a sub-byte integer type."""
    return (4 if name.endswith("4") else 2), not name.startswith("u")


def to_sub_byte_int(x, name: str) -> np.ndarray:
    """``x`` converted to the sub-byte integer type ``name`` (int4, uint4, int2, uint2) by
    ember's own rule, the same as the compiled kernels' (``codegen.dtype_support``), so the
    result does not depend on the installed ml_dtypes version (0.5 wraps out-of-range floats,
    0.7 makes them 0).

    The rule follows ONNX Cast (onnx/docs/Operators.md, "Cast"): an integer (or bool) is
    reduced to the type's bits, discarding the higher ones and reinterpreting in two's
    complement for the signed types ("fixed point: when OOR, discard higher bits and
    reinterpret", e.g. 9 -> int4 -7); a float is truncated toward zero to an integer first and
    then reduced the same way. The specification leaves a float out of the type's range
    undefined; ember gives it that wrap-around value, and 0 for NaN, infinities and magnitudes
    from 9.2e18 (beyond int64). Shape is kept; dtype is ``np_dtype(name)``.
    """
    bits, signed = ext_int_bits(name)
    a = np.asarray(x)
    src = dtype_name(a.dtype)
    if a.dtype.kind == "f" or is_ext_float(src):
        f = a.astype(np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(f) | (np.abs(f) >= 9.2e18)
        i = np.trunc(np.where(bad, 0.0, f)).astype(np.int64)
    else:
        i = a.astype(np.int64)  # bool, numpy ints (uint64 wraps to int64: same low bits)
    u = i & ((1 << bits) - 1)
    if signed:
        u = np.where(u >= 1 << (bits - 1), u - (1 << bits), u)
    # every value is now in the type's range, where ml_dtypes' conversion is exact
    return u.astype(np.int8 if signed else np.uint8).astype(np_dtype(name)).reshape(a.shape)


def convert(x, name: str) -> np.ndarray:
    """``np.asarray(x).astype(np_dtype(name))``, except that the sub-byte integers convert by
    ember's own rule (``to_sub_byte_int``) instead of ml_dtypes' version-dependent one."""
    if name in EXT_INT:
        return to_sub_byte_int(x, name)
    return np.asarray(x).astype(np_dtype(name))


def finfo_max(name: str) -> float:
    """Largest finite value of a floating type."""
    import ml_dtypes
    return float(ml_dtypes.finfo(np_dtype(name)).max)
