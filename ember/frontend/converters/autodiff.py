"""ai.onnx.preview.training Gradient: reverse-mode differentiation of the graph that computes
``y``, expanded into ordinary (compiled) graph operators.

The converter walks the ONNX nodes that lead from the ``xs``/``zs`` tensors to ``y`` and
accumulates adjoints backwards, starting from ``dy = 1``. Broadcasting operands get their adjoint
summed over the broadcast axes. Differentiable operators: Add, Sub, Mul, Div, Neg, Identity.
Anything else on the path raises ``UnsupportedOpError`` naming it.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from . import converter

DOMAIN = "ai.onnx.preview.training"


def _unbroadcast(ctx, g, shape):
    """``g`` summed down to ``shape`` (the adjoint of NumPy broadcasting)."""
    gs = list(g.type.shape)
    lead = len(gs) - len(shape)
    axes = list(range(lead)) + [lead + k for k, d in enumerate(shape) if d == 1 and gs[lead + k] != 1]
    if axes:
        g = ctx.call("sum", [g], {"axes": axes, "keepdims": 1})
    if list(g.type.shape) != list(shape):
        g = ctx.call("reshape", [g], {"newshape": list(shape)})
    return g


def _vjp(ctx, op, ins, out, g):
    """Adjoints of ``ins`` of one node given the adjoint ``g`` of its output."""
    a = ins[0]
    if op == "Identity":
        return [g]
    if op == "Neg":
        return [ctx.call("negative", [g])]
    b = ins[1]
    if op == "Add":
        return [g, g]
    if op == "Sub":
        return [g, ctx.call("negative", [g])]
    if op == "Mul":
        return [ctx.call("multiply", [g, b]), ctx.call("multiply", [g, a])]
    if op == "Div":
        ga = ctx.call("divide", [g, b])
        gb = ctx.call("negative", [ctx.call("divide", [ctx.call("multiply", [g, out]), b])])
        return [ga, gb]
    raise UnsupportedOpError(f"Gradient through operator {op} is not supported (supported: Add, "
                             f"Sub, Mul, Div, Neg, Identity)", op="Gradient")


@converter("Gradient", since=1, domain=DOMAIN)
def gradient(ctx, node):
    """ONNX preview.training Gradient: reverse-mode gradients of ``y`` with respect to each of
    ``xs``, built from the nodes between them (adjoints summed over uses and un-broadcast to each
    input's shape; an ``x`` that ``y`` does not depend on gets zeros).

    Raises:
        UnsupportedOpError: an operator on the path without a vector-Jacobian product here."""
    xs = list(node.attr("xs"))
    y = node.attr("y")
    env = ctx.values
    producers = {o: n for n in ctx.graph.node for o in n.output}
    # the nodes between the independent tensors and y, in graph order
    needed, stack = set(), [y]
    while stack:
        v = stack.pop()
        if v in xs or v in needed or v not in producers:
            continue
        needed.add(v)
        stack.extend(i for i in producers[v].input if i)
    order = [n for n in ctx.graph.node if any(o in needed for o in n.output)]
    adj = {y: ctx.const(np.ones(env[y].type.shape, dtype=env[y].type.dtype))}
    for n in reversed(order):
        out = n.output[0]
        if out not in adj:
            continue
        ins = [env[i] for i in n.input]
        for name, val, gi in zip(n.input, ins, _vjp(ctx, n.op_type, ins, env[out], adj[out])):
            gi = _unbroadcast(ctx, gi, val.type.shape)
            adj[name] = gi if name not in adj else ctx.call("add", [adj[name], gi])
    outs = []
    for x in xs:
        g = adj.get(x)
        outs.append(g if g is not None else ctx.const(np.zeros(env[x].type.shape,
                                                               env[x].type.dtype)))
    return outs
