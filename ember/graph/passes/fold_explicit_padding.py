"""FoldExplicitPadding: an ``nn.pad`` feeding a convolution or pooling becomes that operator's
own ``pads``.

- ``nn.conv(nn.pad(x, constant 0, spatial pads >= 0), w)`` => ``nn.conv(x, w, pads + pad)``;
- ``nn.max_pool(nn.pad(x, constant value <= -max float...))``: pooling skips padded positions,
  which equals padding with -inf, so only a ``-inf`` pad value folds;
- ``nn.avg_pool(nn.pad(x, constant 0))`` when the pool has no pads of its own or already counts
  them (``count_include_pad=1``): folds with ``count_include_pad=1``.

The pad must not touch the batch and channel axes, and must be read only by that operator.
"""

from __future__ import annotations

import math

from ..ir import Function
from ..mutator import producers, rewrite_function, users
from .pass_manager import function_pass


def _spatial_pads(pad_attrs, ndim):
    pads = pad_attrs["pads"]
    if pad_attrs["mode"] != "constant" or any(p < 0 for p in pads):
        return None
    if pads[0] or pads[1] or pads[ndim] or pads[ndim + 1]:
        return None
    return list(pads[2:ndim]) + list(pads[ndim + 2:])


def fold_function(func: Function) -> Function:
    """``func`` with each foldable ``nn.pad`` merged into the ``pads`` of the convolution or
    pooling reading it (rules in the module docstring)."""
    prod = producers(func)
    use = users(func)

    def visit(b, args, rw):
        op = b.call.op
        if op not in ("nn.conv", "nn.max_pool", "nn.avg_pool"):
            return None
        x = b.call.args[0]
        pb = prod.get(id(x))
        if pb is None or pb.call.op != "nn.pad" or len(use.get(id(x), [])) != 1:
            return None
        ndim = x.type.ndim
        extra = _spatial_pads(pb.call.attrs, ndim)
        if extra is None:
            return None
        value = pb.call.attrs["value"]
        a = dict(b.call.attrs)
        if op == "nn.conv" and value != 0:
            return None
        if op == "nn.max_pool" and not (isinstance(value, float) and math.isinf(value)
                                        and value < 0):
            return None
        if op == "nn.avg_pool":
            if value != 0 or (any(a["pads"] or ()) and not a["count_include_pad"]):
                return None
            a["count_include_pad"] = 1
        nsp = ndim - 2
        old = list(a["pads"]) if a["pads"] is not None else [0] * (2 * nsp)
        a["pads"] = [o + e for o, e in zip(old, extra)]
        return [rw.emit(op, [rw.lookup(pb.call.args[0]), *args[1:]], a)]
    return rewrite_function(func, visit)


@function_pass("FoldExplicitPadding", opt_level=1)
def FoldExplicitPadding(func, mod, ctx):
    """Fold constant pads into the pads of the convolution or pooling reading them."""
    return fold_function(func)
