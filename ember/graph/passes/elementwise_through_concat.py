"""ElementwiseThroughConcat: a one-input elementwise operator after a concatenation is applied
to each input instead, so the concatenation can be written in place.

    f(concatenate(x1, ..., xn, axis))  =>  concatenate(f(x1), ..., f(xn), axis)

for ``f`` a one-input elementwise operator (ReLU, clip, sigmoid...; ``ELEMWISE`` pattern, its
attributes kept; not a ``random.*`` draw, whose values depend on the element's index), when
``f`` is the concatenation's only reader and every ``xi`` is computed by an operator call (not
a parameter or a constant). Element by element the two sides compute the same ``f(x)``. The
point is fusion: each ``f(xi)`` fuses into the epilogue of ``xi``'s producer (a convolution, a
pooling), and the concatenation, now with kernel outputs for inputs, runs no kernel
(``driver.concat_in_place``: the producers store into their slices). Before, ``f`` fused with
the concatenation into one copy kernel over the whole tensor (ShuffleNet's stride-2 units:
``relu(concat(gconv(..), avg_pool(..)))``).
"""

from __future__ import annotations

from ..ir import Var
from ..mutator import rewrite_function, users
from .pass_manager import function_pass


def _elementwise_unary(b) -> bool:
    from ...ops.registry import OpPattern, get_op
    if b is None or b.call.is_function_call or len(b.outputs) != 1 or len(b.call.args) != 1:
        return False
    try:
        pattern = get_op(b.call.op).pattern
    except Exception:  # noqa: BLE001 - an unknown op is simply not moved
        return False
    # a random op draws element i from counter i of its own tensor (``ops.random``): on each
    # input every part would restart at counter 0 and repeat the first part's draws
    return pattern == OpPattern.ELEMWISE and isinstance(b.call.args[0], Var) \
        and not b.call.op.startswith("random.")


def through_concat_function(func):
    """``func`` with the rewrite of the module doc applied."""
    use = users(func)
    made = {id(o) for b in func.bindings for o in b.outputs}
    moved: dict[int, object] = {}  # id(concat binding) -> its elementwise reader

    for b in func.bindings:
        if b.call.is_function_call or b.call.op != "concatenate" or len(b.outputs) != 1:
            continue
        us = use.get(id(b.outputs[0]), [])
        if len(us) != 1 or not _elementwise_unary(us[0]):
            continue
        if not all(isinstance(a, Var) and id(a) in made for a in b.call.args):
            continue
        moved[id(b)] = us[0]
    if not moved:
        return func
    readers = {id(u) for u in moved.values()}
    done: dict[int, object] = {}  # id(reader binding) -> the new concatenation

    def visit(b, args, rw):
        if id(b) in moved:
            f = moved[id(b)]
            parts = [rw.emit(f.call.op, [a], dict(f.call.attrs)) for a in args]
            cat = rw.emit("concatenate", parts, dict(b.call.attrs), name=f.outputs[0].name)
            done[id(f)] = cat
            return [cat]  # (the old concatenation has no other reader)
        if id(b) in readers:
            return [done[id(b)]]
        return None
    return rewrite_function(func, visit)


@function_pass("ElementwiseThroughConcat", opt_level=2)
def ElementwiseThroughConcat(func, mod, ctx):
    """Apply a one-input elementwise operator after a concatenation to its inputs (module
    doc)."""
    return through_concat_function(func)
