"""CombineParallelConv2D: convolutions of one input with equal geometry (Inception branches)
become one convolution with the weights concatenated along the output channels, each branch
reading its channel slice of the result.

Candidates: ``nn.conv`` with ``group == 1``, constant weight (and bias, when present), the same
input, strides, pads, dilations and kernel size. At least ``CombineParallelConv2D.min_num_branches``
(config; default 3, as TVM) siblings are needed. When every branch is read only by the same
elementwise activation (relu...), the activation is applied once to the combined result before
slicing, so FuseOps makes the combined convolution and its activation one kernel.
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Function
from .combine_parallel import apply_follower, combine_siblings, slice_axis
from .pass_manager import function_pass, register_config

MIN_BRANCHES = register_config("CombineParallelConv2D.min_num_branches", int,
                               "fewest sibling convolutions CombineParallelConv2D combines")


def _key(b):
    c = b.call
    if c.op != "nn.conv" or c.attrs["group"] != 1 or not isinstance(c.args[1], Constant):
        return None
    if len(c.args) == 3 and not isinstance(c.args[2], Constant):
        return None
    x = c.args[0]
    return (id(x), tuple(c.args[1].type.shape[1:]), c.args[1].type.dtype,
            tuple(c.attrs["strides"] or ()), tuple(c.attrs["pads"] or ()),
            tuple(c.attrs["dilations"] or ()))


def _combine(rw, bs, args_list, follower=None):
    ws = [a[1].data for a in args_list]
    bias = [a[2].data if len(a) == 3 else np.zeros(w.shape[0], w.dtype)
            for a, w in zip(args_list, ws)]
    w = Constant(np.concatenate(ws, axis=0), "combined_conv_weight")
    b = Constant(np.concatenate(bias, axis=0))
    y = apply_follower(rw, rw.emit("nn.conv", [args_list[0][0], w, b], bs[0].call.attrs),
                       follower)
    outs, start = [], 0
    for wi in ws:
        outs.append(slice_axis(rw, y, 1, start, start + wi.shape[0]))
        start += wi.shape[0]
    return outs


def combine_function(func: Function, min_branches: int = 3) -> Function:
    """``func`` with every group of at least ``min_branches`` combinable sibling convolutions (see
    the module docstring) merged into one convolution plus per-branch channel slices."""
    return combine_siblings(func, _key, _combine, min_branches, with_followers=True)


@function_pass("CombineParallelConv2D", opt_level=3)
def CombineParallelConv2D(func, mod, ctx):
    """Combine sibling convolutions of one input into one."""
    return combine_function(func, ctx.get_config(MIN_BRANCHES, 3))
