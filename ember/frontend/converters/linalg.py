"""Converters for ONNX linear algebra: Einsum (12) and Det (11)."""

from __future__ import annotations

from . import converter


@converter("Einsum", since=12)
def einsum(ctx, node):
    """ONNX Einsum-12: ``einsum(inputs..., equation)``."""
    return [ctx.call("einsum", [x for x in node.inputs if x is not None],
                     {"equation": node.attr("equation")})]


@converter("Det", since=11)
def det(ctx, node):
    """ONNX Det-11: determinant of the trailing ``(M, M)`` matrices (output shape
    ``x.shape[:-2]``)."""
    return [ctx.call("det", [node.input(0)])]
