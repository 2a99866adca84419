"""ONNX equivalents of the linear-algebra operators for ``test_op_references.py`` (imported at
its end)."""

from __future__ import annotations

from test_op_references import ONNX_DTYPE, ONNX_OPS

ONNX_OPS["einsum"] = ("Einsum", 12, lambda xs, a: (xs, {"equation": a["equation"]}))
ONNX_OPS["det"] = ("Det", 11, lambda xs, a: (xs, {}))

__all__ = ["ONNX_OPS", "ONNX_DTYPE"]
