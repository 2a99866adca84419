"""FuseLayerNorm: the decomposed layer normalization that exporters emit before opset 17,

    m = mean(x, trailing axes, keepdims)      d = x - m
    v = mean(d ** 2 (or d * d), same axes)    y = d / sqrt(v + eps)  [* gamma] [+ beta]

becomes one ``nn.layer_norm(x, gamma, beta, axis, epsilon)`` (ONNX LayerNormalization-17
semantics, the same arithmetic). One kernel instead of four (mean, subtract, variance,
normalize: four passes over memory and four thread-pool dispatches), scheduled per row by the
row-reduction rule. The intermediate values stay when something else reads them.

Matched only for floating-point ``x`` with a scalar constant ``eps`` and exponent 2, reductions
over the same trailing axes, and ``gamma``/``beta`` that broadcast over the normalized dims only
(missing ones become 1 and 0).
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant
from ...errors import EmberError
from ..mutator import rewrite_function, users
from .pass_manager import function_pass


def _scalar(v):
    if isinstance(v, Constant) and v.data.size == 1:
        return float(np.asarray(v.data).reshape(-1)[0])
    return None


def _trailing_axes(b, ndim):
    axes = b.call.attrs.get("axes")
    if not b.call.attrs.get("keepdims", 1) or axes is None:
        return None
    ax = sorted(a % ndim for a in axes)
    if ax != list(range(ax[0], ndim)):
        return None
    return ax[0]


def fuse_layer_norm_function(func):
    """``func`` with each decomposed layer normalization chain (see the module docstring) replaced
    by one ``nn.layer_norm`` binding (ONNX LayerNormalization-17); chains whose shapes
    ``nn.layer_norm`` refuses are kept."""
    used_by = users(func)

    def tail_continues(b):
        """The value of ``b`` feeds exactly one ``multiply`` (after a divide) or ``add`` (after
        a multiply): the match is made there, on the whole chain."""
        us = used_by.get(id(b.outputs[0]), [])
        nxt = {"divide": ("multiply",), "multiply": ("add",)}.get(b.call.op, ())
        return len(us) == 1 and us[0] is not None and us[0].call.op in nxt

    def visit(b, args, rw):
        if b.call.op not in ("add", "multiply", "divide") or tail_continues(b):
            return None
        P = rw.producer

        def prod(v, *ops):
            p = P(v)
            return p if p is not None and p.call.op in ops else None

        def split(bb, op, pred):
            """Operands ``(match, other)`` of a commutative ``op`` binding where ``pred(match)``
            holds, else None."""
            if bb is None or bb.call.op != op:
                return None
            a0, a1 = (rw.lookup(a) for a in bb.call.args)
            for m, o in ((a0, a1), (a1, a0)):
                if pred(m):
                    return m, o
            return None

        # peel "+ beta" and "* gamma" off the end
        beta, gamma = None, None
        cur = b
        cur_args = args
        if cur.call.op == "add":
            s = split(cur, "add", lambda m: prod(m, "multiply", "divide") is not None)
            if s is None:
                return None
            inner, beta = s
            cur = P(inner)
            cur_args = tuple(rw.lookup(a) for a in cur.call.args)
        if cur.call.op == "multiply":
            s = split(cur, "multiply", lambda m: prod(m, "divide") is not None)
            if s is None:
                return None
            inner, gamma = s
            cur = P(inner)
            cur_args = tuple(rw.lookup(a) for a in cur.call.args)
        if cur.call.op != "divide":
            return None
        d, std = cur_args
        sq = prod(std, "sqrt")
        if sq is None:
            return None
        s = split(P(rw.lookup(sq.call.args[0])), "add",
                  lambda m: prod(m, "mean") is not None)
        if s is None or _scalar(s[1]) is None:
            return None
        var_v, eps_v = s
        var_b = P(var_v)
        sq_in = rw.lookup(var_b.call.args[0])
        pb = prod(sq_in, "power", "multiply")
        if pb is None:
            return None
        pa = [rw.lookup(a) for a in pb.call.args]
        if pb.call.op == "power":
            if pa[0] is not d or _scalar(pa[1]) != 2.0:
                return None
        elif not (pa[0] is d and pa[1] is d):
            return None
        sub = prod(d, "subtract")
        if sub is None:
            return None
        x, m = (rw.lookup(a) for a in sub.call.args)
        mb = prod(m, "mean")
        if mb is None or rw.lookup(mb.call.args[0]) is not x:
            return None
        nd = x.type.ndim
        if not x.type.dtype.startswith("float") or x.type.ndim < 1:
            return None
        a1, a2 = _trailing_axes(mb, nd), _trailing_axes(var_b, nd)
        if a1 is None or a1 != a2:
            return None
        out_t = b.outputs[0].type
        if out_t.shape != x.type.shape or out_t.dtype != x.type.dtype:
            return None
        norm = x.type.shape[a1:]
        for t in (gamma, beta):
            if t is not None and (t.type.ndim > len(norm) or t.type.dtype != x.type.dtype):
                return None
        dt = np.dtype(x.type.dtype)
        if gamma is None:
            gamma = Constant(np.ones(norm, dt))
        lnargs = [x, gamma] + ([beta] if beta is not None else [])
        eps = _scalar(eps_v)
        try:
            y = rw.emit("nn.layer_norm", lnargs, {"axis": a1, "epsilon": eps})
        except EmberError:  # shapes that layer_norm refuses: keep the graph
            return None
        return [y]
    return rewrite_function(func, visit)


@function_pass("FuseLayerNorm", opt_level=1)
def FuseLayerNorm(func, mod, ctx):
    """Rewrite decomposed layer normalizations (mean, subtract, square, mean, add eps, sqrt,
    divide, scale, shift) into one ``nn.layer_norm``."""
    return fuse_layer_norm_function(func)
