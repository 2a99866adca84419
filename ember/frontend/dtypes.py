"""ONNX tensor element types and their ember dtype names."""

from __future__ import annotations

import onnx

from ..errors import UnsupportedOpError

ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
    17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz",
    21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu", 25: "uint2", 26: "int2",
}


def onnx_dtype(elem_type: int, where: str = "") -> str:
    """ember dtype name of an ONNX ``TensorProto.DataType``."""
    try:
        return ONNX_DTYPES[elem_type]
    except KeyError:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
            onnx.TensorProto.DataType.values() else str(elem_type)
        raise UnsupportedOpError(f"{where}tensor element type {name} is not supported") from None


