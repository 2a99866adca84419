"""SimplifyExpr: algebraic clean-ups that remove work without changing values.

- ``reshape(reshape(x))`` => ``reshape(x)``; a reshape to the input's own shape => ``x``;
- ``transpose(transpose(x, p), q)`` => ``transpose(x, p∘q)`` (or ``x`` for the identity);
  an identity transpose => ``x``; a transpose that moves only unit dims (the other dims keep
  their order, so the data does not move) => ``reshape(x)``;
- ``cast(x, dtype of x)`` => ``x``;
- ``nn.pad`` with all-zero pads, a ``strided_slice`` taking every element in order, a
  ``broadcast_to`` that does not change the shape, a one-input ``concatenate`` => their input;
- ``x * 1``, ``x + 0``, ``x - 0``, ``x / 1`` with a constant that does not broadcast x => ``x``.
"""

from __future__ import annotations

import numpy as np

from ...ops.transform import slice_len
from ..ir import Constant, Function
from ..mutator import rewrite_function
from .pass_manager import function_pass

_NEUTRAL = {"multiply": (1, "either"), "add": (0, "either"), "subtract": (0, "right"),
            "divide": (1, "right")}


def _perm(attrs, nd):
    p = attrs["perm"]
    return tuple(range(nd))[::-1] if p is None else tuple(a % nd for a in p)


def _neutral_operand(b, args):
    """The operand equal to the result when the other is the neutral constant, else None."""
    val, side = _NEUTRAL[b.call.op]
    out = b.outputs[0].type
    cands = [(0, 1), (1, 0)] if side == "either" else [(0, 1)]
    for keep, cst in cands:
        c, x = args[cst], args[keep]
        if isinstance(c, Constant) and x.type == out and c.data.size > 0 and \
                np.all(c.data == val):
            return x
    return None


def simplify_function(func: Function) -> Function:
    """``func`` with the algebraic simplifications of the module docstring applied (no-op reshapes,
    transposes, casts, pads, slices, broadcasts, neutral arithmetic removed; chains collapsed)."""
    def producer_of(v, rw):
        return rw.producer(v)

    def visit(b, args, rw):
        op, a = b.call.op, b.call.attrs
        out = b.outputs[0].type if b.outputs else None
        x = args[0] if args else None
        if op == "reshape":
            if x.type.shape == out.shape:
                return [x]
            pb = producer_of(x, rw)
            if pb is not None and pb.call.op == "reshape":
                inner = rw.lookup(pb.call.args[0])
                if inner.type.shape == out.shape:
                    return [inner]
                return [rw.emit("reshape", [inner], {"newshape": list(out.shape)})]
        elif op == "transpose":
            p = _perm(a, x.type.ndim)
            if p == tuple(range(len(p))):
                return [x]
            big = [d for d in p if x.type.shape[d] != 1]
            if big == sorted(big) and all(isinstance(n, int) for n in out.shape):
                return [rw.emit("reshape", [x], {"newshape": list(out.shape)})]
            pb = producer_of(x, rw)
            if pb is not None and pb.call.op == "transpose":
                inner = rw.lookup(pb.call.args[0])
                q = _perm(pb.call.attrs, inner.type.ndim)
                comp = tuple(q[i] for i in p)
                if comp == tuple(range(len(comp))):
                    return [inner]
                return [rw.emit("transpose", [inner], {"perm": list(comp)})]
        elif op == "cast":
            if x.type.dtype == out.dtype:
                return [x]
        elif op == "nn.pad":
            if not any(a["pads"]):
                return [x]
        elif op == "strided_slice":
            full = all(bb == 0 and s == 1 and slice_len(bb, e, s) == n
                       for bb, e, s, n in zip(a["begin"], a["end"], a["strides"], x.type.shape))
            if full:
                return [x]
        elif op == "broadcast_to":
            if x.type.shape == out.shape:
                return [x]
        elif op == "concatenate":
            if len(args) == 1:
                return [x]
        elif op in _NEUTRAL:
            y = _neutral_operand(b, args)
            if y is not None:
                return [y]
        return None
    return rewrite_function(func, visit)


@function_pass("SimplifyExpr", opt_level=1)
def SimplifyExpr(func, mod, ctx):
    """Collapse reshape/transpose chains and remove no-op casts, pads, slices, broadcasts and
    neutral arithmetic."""
    return simplify_function(func)
