"""Converters for ONNX linear algebra: Einsum (12) and Det (11)."""

from __future__ import annotations

from . import converter


@converter("Einsum", since=12)
def einsum(ctx, node):
    return [ctx.call("einsum", [x for x in node.inputs if x is not None],
                     {"equation": node.attr("equation")})]


@converter("Det", since=11)
def det(ctx, node):
    return [ctx.call("det", [node.input(0)])]
