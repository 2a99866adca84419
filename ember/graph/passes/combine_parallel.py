"""Shared machinery of CombineParallelConv2D and CombineParallelDense: find sibling bindings
that read the same input with constant weights, compute them as one wider operator, and give
each branch its slice of the result."""

from __future__ import annotations

from typing import Callable

from ..ir import Function
import json

from ..mutator import rewrite_function, users


FOLLOWERS = frozenset({"nn.relu", "sigmoid", "tanh", "clip"})


def combine_siblings(func: Function, key_of: Callable, combine: Callable,
                     min_branches: int, with_followers: bool = False) -> Function:
    """Rewrite ``func`` combining bindings with equal ``key_of(binding)`` (``None``: not a
    candidate). ``combine(rw, bindings, args_list)`` emits the combined op and returns
    ``(combined value, [one value per branch])``, or ``None`` to leave the branches alone.

    With ``with_followers``, when every branch is read only by the same one-input elementwise
    op (``FOLLOWERS``, equal attributes), that op is applied once to the combined value and the
    branches read their slices of its result (TVM's "combine parallel op batch" extension).
    """
    groups: dict = {}
    for b in func.bindings:
        k = key_of(b)
        if k is not None:
            groups.setdefault(k, []).append(b)
    lead = {id(bs[0]): bs for bs in groups.values() if len(bs) >= min_branches}
    member = {id(b) for bs in lead.values() for b in bs}
    use = users(func)
    follower_of: dict[int, list] = {}
    if with_followers:
        for bs in lead.values():
            fs = [use.get(id(b.outputs[0]), []) for b in bs]
            if all(len(f) == 1 and f[0] is not None and f[0].call.op in FOLLOWERS and
                   len(f[0].call.args) == 1 for f in fs) and \
                    len({(f[0].call.op, json.dumps(f[0].call.attrs, sort_keys=True))
                         for f in fs}) == 1:
                follower_of[id(bs[0])] = [f[0] for f in fs]
    followers = {id(f): None for fl in follower_of.values() for f in fl}
    results: dict[int, object] = {}

    def visit(b, args, rw):
        if id(b) in lead:
            bs = lead[id(b)]
            fl = follower_of.get(id(b))
            done = combine(rw, bs, [[rw.lookup(a) for a in x.call.args] for x in bs],
                           fl[0] if fl else None)
            if done is None:
                for x in bs:
                    member.discard(id(x))
                for f in fl or []:
                    followers.pop(id(f), None)
                return None
            for x, v in zip(fl or bs, done):
                results[id(x)] = v
            return [] if fl else [results[id(b)]]
        if id(b) in member:
            return [] if id(b) not in results else [results[id(b)]]
        if id(b) in followers and id(b) in results:
            return [results[id(b)]]
        return None
    return rewrite_function(func, visit)


def apply_follower(rw, value, follower):
    """``follower``'s operator (with its attributes) applied to ``value``."""
    if follower is None:
        return value
    return rw.emit(follower.call.op, [value], follower.call.attrs)


def slice_axis(rw, value, axis: int, begin: int, end: int):
    """``value[..., begin:end, ...]`` along ``axis`` as a ``strided_slice``."""
    shape = value.type.shape
    b = [0] * len(shape)
    e = list(shape)
    b[axis], e[axis] = begin, end
    return rw.emit("strided_slice", [value], {"begin": b, "end": e, "strides": [1] * len(shape)})
