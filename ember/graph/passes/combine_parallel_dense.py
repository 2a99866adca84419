"""CombineParallelDense: dense layers of one input (attention's Q, K, V projections) become one
with the weights concatenated along the output features, each branch reading its slice.

Candidates: ``nn.gemm`` with ``trans_a == 0`` and equal ``alpha``/``beta``, or ``matmul`` with a
2-D weight; constant weights (and ``C``); the same input. Transposed weights are transposed at
compile time. At least ``CombineParallelDense.min_num_branches`` (config; default 3) siblings.
"""

from __future__ import annotations

import numpy as np

from ..ir import Constant, Function
from .combine_parallel import combine_siblings, slice_axis
from .pass_manager import function_pass, register_config

MIN_BRANCHES = register_config("CombineParallelDense.min_num_branches", int,
                               "fewest sibling dense layers CombineParallelDense combines")


def _key(b):
    c = b.call
    if c.op == "nn.gemm":
        if c.attrs["trans_a"] or not isinstance(c.args[1], Constant):
            return None
        if len(c.args) == 3 and not isinstance(c.args[2], Constant):
            return None
        return ("gemm", id(c.args[0]), c.attrs["alpha"], c.attrs["beta"],
                c.args[1].type.dtype)
    if c.op == "matmul" and isinstance(c.args[1], Constant) and c.args[1].type.ndim == 2 \
            and c.args[0].type.ndim >= 2:
        return ("matmul", id(c.args[0]), c.args[1].type.dtype)
    return None


def _combine(rw, bs, args_list, follower=None):
    op = bs[0].call.op
    x = args_list[0][0]
    ws = []
    for b, a in zip(bs, args_list):
        w = a[1].data
        ws.append(w.T if op == "nn.gemm" and b.call.attrs["trans_b"] else w)
    W = Constant(np.ascontiguousarray(np.concatenate(ws, axis=1)), "combined_dense_weight")
    if op == "matmul":
        y = rw.emit("matmul", [x, W])
    else:
        m = bs[0].outputs[0].type.shape[0]
        cs = []
        for a, w in zip(args_list, ws):
            n = w.shape[1]
            c = a[2].data if len(a) == 3 else np.zeros((n,), w.dtype)
            cs.append(c)
        rank2 = any(c.ndim == 2 and c.shape[0] != 1 for c in cs)
        cs = [np.broadcast_to(c, (m, w.shape[1]) if rank2 else (w.shape[1],))
              for c, w in zip(cs, ws)]
        C = Constant(np.ascontiguousarray(np.concatenate(cs, axis=-1)))
        y = rw.emit("nn.gemm", [x, W, C], dict(bs[0].call.attrs, trans_b=0))
    axis = y.type.ndim - 1
    outs, start = [], 0
    for w in ws:
        outs.append(slice_axis(rw, y, axis, start, start + w.shape[1]))
        start += w.shape[1]
    return outs


def combine_function(func: Function, min_branches: int = 3) -> Function:
    """``func`` with every group of at least ``min_branches`` combinable sibling dense layers (see
    the module docstring) merged into one plus per-branch slices."""
    return combine_siblings(func, _key, _combine, min_branches)


@function_pass("CombineParallelDense", opt_level=3)
def CombineParallelDense(func, mod, ctx):
    """Combine sibling dense layers of one input into one."""
    return combine_function(func, ctx.get_config(MIN_BRANCHES, 3))
