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


def finfo_max(name: str) -> float:
    """Largest finite value of a floating type."""
    import ml_dtypes
    return float(ml_dtypes.finfo(np_dtype(name)).max)
