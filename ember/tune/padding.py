"""Hoisting zero-padding out of a reduction: the padded-input stage of a tiled kernel.

A padded window reduction (convolution, pooling) lowers with its padding inlined as a guard in
the innermost loop::

    acc = acc + (0 <= h && h < H && 0 <= w && w < W ? x[c, h, w] * k[...] : 0)

which keeps the compiler from vectorizing it. ``hoist_padding(nest)`` materializes the padded
input once per call, ``xp[c, h', w'] = in range ? x[c, h' + lo_h, w' + lo_w] : pad``, and reads
``xp`` without a guard. It applies only when the guard is exactly the bounds check of one input
load and the guarded term equals the unguarded one when that load reads the pad value:
``cond ? x * y : 0`` and ``cond ? acc + x : acc`` (pad 0), ``cond ? max(acc, x) : acc`` (pad
-inf), ``cond ? min(acc, x) : acc`` (pad +inf).
"""

from __future__ import annotations

import math

from ..tir.arith import interval, post_order
from ..tir.expr import BinOp, Const, Load, Select, Var
from ..tir.stmt import Buffer, For, Store

MAX_PAD_FRACTION = 4.0  # refuse when the padded copy would be this many times the input


def _conjuncts(e):
    if isinstance(e, BinOp) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _same(a, b) -> bool:
    from ..tir.transform import expr_equal
    return expr_equal(a, b)


def _pad_value(sel: Select, acc):
    """(the guarded Load, pad constant) when ``sel`` has a hoistable form, else None."""
    t, f = sel.t, sel.f
    is_acc = lambda e: isinstance(e, Load) and e.src is acc  # noqa: E731
    if isinstance(f, Const) and f.value == 0 and isinstance(t, BinOp) and t.op == "mul":
        for ld in (t.a, t.b):
            if isinstance(ld, Load):
                return ld, 0.0
    if is_acc(f) and isinstance(t, BinOp) and t.op in ("add", "max", "min"):
        other = t.b if is_acc(t.a) else t.a if is_acc(t.b) else None
        if isinstance(other, Load):
            return other, {"add": 0.0, "max": -math.inf, "min": math.inf}[t.op]
    return None


def _guards_exactly(cond, load: Load) -> bool:
    """``cond`` is a conjunction of ``0 <= e`` / ``e < n`` checks on ``load``'s indices."""
    shape = load.src.shape
    for term in _conjuncts(cond):
        if not isinstance(term, BinOp) or term.op not in ("ge", "lt", "le", "gt"):
            return False
        ok = False
        for d, idx in enumerate(load.indices):
            a, b, op = term.a, term.b, term.op
            if _same(a, idx) and isinstance(b, Const):
                ok = (op == "ge" and b.value == 0) or (op == "lt" and b.value == shape[d]) \
                    or (op == "le" and b.value == shape[d] - 1) or (op == "gt" and b.value == -1)
            elif _same(b, idx) and isinstance(a, Const):
                ok = (op == "le" and a.value == 0) or (op == "gt" and a.value == shape[d]) \
                    or (op == "ge" and a.value == shape[d] - 1) or (op == "lt" and a.value == -1)
            if ok:
                break
        if not ok:
            return False
    return True


def hoist_padding(update: Store, acc, loops) -> tuple[Store, Buffer, object] | None:
    """``(new update, padded buffer, fill loop nest)`` or ``None`` when not applicable.

    ``loops``: every loop enclosing the update (for the index ranges)."""
    found = []

    def visit(e):
        if isinstance(e, Select):
            pv = _pad_value(e, acc)
            if pv is not None and getattr(pv[0].src, "scope", "global") == "global" \
                    and _guards_exactly(e.cond, pv[0]):
                found.append((e, pv))
        return e
    post_order(update.value, visit)
    if len(found) != 1:
        return None
    sel, (load, pad) = found[0]
    x = load.src
    bounds = {lp.var: (0, lp.extent - 1) for lp in loops}
    lo, shape = [], []
    for idx, n in zip(load.indices, x.shape):
        a, b = interval(idx, bounds)
        if math.isinf(a) or math.isinf(b):
            return None
        lo.append(int(min(0, a)))
        shape.append(int(max(n - 1, b)) - lo[-1] + 1)
    if math.prod(shape) > MAX_PAD_FRACTION * math.prod(x.shape) + 4096:
        return None
    xp = Buffer(f"{x.name}_pad", tuple(shape), x.dtype)
    new_load = Load(xp, tuple(idx - l if l else idx for idx, l in zip(load.indices, lo)))
    t = post_order(sel.t, lambda n: new_load if n is load else n)
    value = post_order(update.value, lambda n: t if n is sel else n)
    # fill: xp[j] = in range ? x[j + lo] : pad
    js = [Var(f"p{d}") for d in range(len(shape))]
    src = [j + l if l else j for j, l in zip(js, lo)]
    cond = None
    for d, (s, n) in enumerate(zip(src, x.shape)):
        if lo[d] == 0 and shape[d] == n:
            continue
        c = BinOp("and", BinOp("ge", s, Const(0, s.dtype)), BinOp("lt", s, Const(n, s.dtype)))
        cond = c if cond is None else BinOp("and", cond, c)
    read = Load(x, tuple(src))
    fill_val = read if cond is None else Select(cond, read, Const(pad, x.dtype))
    fill = Store(xp, tuple(js), fill_val)
    for j, n in reversed(list(zip(js, shape))):
        fill = For(j, n, fill)
    return Store(update.buffer, update.indices, value), xp, fill


def annotate_fill(fill, parallel: bool, vectorize: bool):
    """Parallelize the fill's outermost loop and vectorize its innermost."""
    chain, s = [], fill
    while isinstance(s, For):
        chain.append(s)
        s = s.body
    body = s
    for depth, lp in reversed(list(enumerate(chain))):
        kind = "serial"
        if depth == len(chain) - 1 and vectorize and depth > 0:
            kind = "vectorized"
        if depth == 0 and parallel:
            kind = "parallel"
        body = For(lp.var, lp.extent, body, kind)
    return body

