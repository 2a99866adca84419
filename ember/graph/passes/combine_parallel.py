"""Shared machinery of CombineParallelConv2D and CombineParallelDense: find sibling bindings
that read the same input with constant weights, compute them as one wider operator, and give
each branch its slice of the result."""

from __future__ import annotations

from typing import Callable

from ..ir import Function
from ..mutator import rewrite_function


def combine_siblings(func: Function, key_of: Callable, combine: Callable,
                     min_branches: int) -> Function:
    """Rewrite ``func`` combining bindings with equal ``key_of(binding)`` (``None``: not a
    candidate). ``combine(rw, bindings, args_list)`` emits the combined op and returns one value
    per branch, or ``None`` to leave the branches alone."""
    groups: dict = {}
    for b in func.bindings:
        k = key_of(b)
        if k is not None:
            groups.setdefault(k, []).append(b)
    lead = {id(bs[0]): bs for bs in groups.values() if len(bs) >= min_branches}
    member = {id(b) for bs in lead.values() for b in bs}
    results: dict[int, object] = {}

    def visit(b, args, rw):
        if id(b) in lead:
            bs = lead[id(b)]
            vals = combine(rw, bs, [[rw.lookup(a) for a in x.call.args] for x in bs])
            if vals is None:
                for x in bs:
                    member.discard(id(x))
                return None
            for x, v in zip(bs, vals):
                results[id(x)] = v
            return [results[id(b)]]
        if id(b) in member:
            return [results[id(b)]]
        return None
    return rewrite_function(func, visit)


def slice_axis(rw, value, axis: int, begin: int, end: int):
    """``value[..., begin:end, ...]`` along ``axis`` as a ``strided_slice``."""
    shape = value.type.shape
    b = [0] * len(shape)
    e = list(shape)
    b[axis], e[axis] = begin, end
    return rw.emit("strided_slice", [value], {"begin": b, "end": e, "strides": [1] * len(shape)})
