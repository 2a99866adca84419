"""Integer simplification and bound analysis for loop-IR expressions and statements.

``simplify(expr, bounds)`` folds constants, applies algebraic identities (``x+0``, ``x*1``,
``x*0`` for integers) and removes ``Select`` branches whose condition is proved by interval
analysis over the loop variables' ranges (``bounds``: ``Var -> (lo, hi)``, inclusive).
``simplify_stmt`` does the same over a loop nest and drops unit-extent loops.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..dtypes import is_ext
from .expr import (AddressOf, BinOp, Call, Cast, Const, Expr, Load, Reduce, Select, Unary, Var,
                   is_float, is_int)
from .stmt import Allocate, Block, Buffer, For, IfThenElse, KernelCall, Seq, Stmt, Store, seq
from .symbolic import Symbol

Bounds = dict


def map_children(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """Rebuild ``e`` with ``f`` applied to each direct child expression (same node if unchanged)."""
    if isinstance(e, BinOp):
        a, b = f(e.a), f(e.b)
        return e if a is e.a and b is e.b else _binop(e.op, a, b)
    if isinstance(e, Unary):
        a = f(e.a)
        return e if a is e.a else Unary(e.op, a)
    if isinstance(e, Call):
        args = tuple(f(x) for x in e.args)
        return e if all(x is y for x, y in zip(args, e.args)) else Call(e.name, args, e.dtype)
    if isinstance(e, Cast):
        v = f(e.value)
        return e if v is e.value else Cast(e.dtype, v)
    if isinstance(e, Select):
        c, t, fl = f(e.cond), f(e.t), f(e.f)
        return e if (c is e.cond and t is e.t and fl is e.f) else Select(c, t, fl)
    if isinstance(e, Load):
        idx = tuple(f(x) for x in e.indices)
        return e if all(x is y for x, y in zip(idx, e.indices)) else Load(e.src, idx)
    if isinstance(e, AddressOf):
        idx = tuple(f(x) for x in e.indices)
        return e if all(x is y for x, y in zip(idx, e.indices)) else AddressOf(e.src, idx)
    if isinstance(e, Reduce):
        s = f(e.source)
        w = f(e.where) if e.where is not None else None
        return e if (s is e.source and w is e.where) else Reduce(e.combiner, s, e.axis, w)
    return e


def _binop(op, a, b):
    n = BinOp.__new__(BinOp)
    n.op, n.a, n.b = op, a, b
    n.dtype = "bool" if (op in BinOp.COMPARE or op in BinOp.LOGIC) else a.dtype
    return n


def post_order(e: Expr, f: Callable[[Expr], Expr], shared: bool = False) -> Expr:
    """Apply ``f`` bottom-up over the whole tree of ``e``. ``shared=True`` (for a pure ``f``)
    visits a sub-expression object that occurs several times once (expressions are DAGs:
    a compute's body may reuse one guarded load in many terms)."""
    if not shared:
        return f(map_children(e, lambda c: post_order(c, f)))
    memo: dict[int, Expr] = {}

    def go(n):
        r = memo.get(id(n))
        if r is None:
            r = memo[id(n)] = f(map_children(n, go))
        return r
    return go(e)


def substitute(e: Expr, vmap: dict) -> Expr:
    """Replace variables (keys: ``Var``) by expressions in ``e``."""
    if not vmap:
        return e
    return post_order(e, lambda n: vmap.get(n, n) if isinstance(n, Var) else n, shared=True)


def collect(e: Expr, pred: Callable[[Expr], bool]) -> list:
    """All sub-expressions of ``e`` (pre-order) satisfying ``pred``."""
    out = []

    def visit(n):
        if pred(n):
            out.append(n)
        map_children(n, lambda c: (visit(c), c)[1])

    visit(e)
    return out


def collect_unique(e: Expr, pred: Callable[[Expr], bool]) -> list:
    """Like ``collect``, but each distinct sub-expression object once (a shared sub-expression
    of a DAG is visited once): for questions of membership, not of counts."""
    out, seen = [], set()

    def visit(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        if pred(n):
            out.append(n)
        map_children(n, lambda c: (visit(c), c)[1])

    visit(e)
    return out


# interval analysis ----------------------------------------------------------------------------

INF = math.inf


def interval(e: Expr, bounds: Bounds) -> tuple[float, float]:
    """Inclusive ``(lo, hi)`` bounds of an integer expression; ``(-inf, inf)`` when unknown."""
    if isinstance(e, Const):
        v = e.value
        return (v, v) if not isinstance(v, bool) else (int(v), int(v))
    if isinstance(e, Var):
        got = bounds.get(e)
        if got is None:  # symbolic dimensions are non-negative (docs/dynamic_shapes.md)
            return (0, INF) if isinstance(e, Symbol) else (-INF, INF)
        return got
    if isinstance(e, BinOp) and not is_float(e.dtype):
        op = e.op
        if op in ("add", "sub", "mul", "min", "max", "floordiv", "floormod"):
            a, b = interval(e.a, bounds), interval(e.b, bounds)
            if op == "add":
                return (a[0] + b[0], a[1] + b[1])
            if op == "sub":
                return (a[0] - b[1], a[1] - b[0])
            if op == "mul":
                cands = [x * y for x in a for y in b if not (math.isinf(x) or math.isinf(y))]
                if len(cands) < 4:
                    if a[0] >= 0 and b[0] >= 0:  # non-negative with an unbounded end
                        return (a[0] * b[0], INF)
                    return (-INF, INF)
                return (min(cands), max(cands))
            if op == "min":
                return (min(a[0], b[0]), min(a[1], b[1]))
            if op == "max":
                return (max(a[0], b[0]), max(a[1], b[1]))
            if op == "floordiv" and b[0] == b[1] and b[0] > 0:
                c = b[0]
                return (a[0] // c if not math.isinf(a[0]) else -INF,
                        a[1] // c if not math.isinf(a[1]) else INF)
            if op == "floormod" and b[0] == b[1] and b[0] > 0:
                if a[0] >= 0 and a[1] < b[0]:
                    return a
                return (0, b[0] - 1)
            # a divisor known only to be non-negative (a symbolic one: ``(seq + 7) // 8``);
            # a zero divisor gives 0 in ember's C helpers (``ember_floordiv_int64``)
            if op == "floordiv" and b[0] >= 0 and a[0] >= 0:
                return (0, a[1] // max(b[0], 1) if not math.isinf(a[1]) else INF)
            if op == "floormod" and b[0] >= 0:
                hi = max(b[1] - 1, 0)
                if a[0] >= 0:
                    hi = min(hi, a[1])
                return (0, hi)
    return (-INF, INF)


def loop_range(extent, bounds: Bounds) -> tuple:
    """Inclusive ``(0, extent - 1)`` range of a loop variable; for a symbolic extent the upper
    end is the extent's interval upper bound minus one (``inf`` when unbounded)."""
    if isinstance(extent, Expr):
        return (0, interval(extent, bounds)[1] - 1)
    return (0, extent - 1)


def prove(cond: Expr, bounds: Bounds) -> bool | None:
    """``True``/``False`` when ``cond`` is decided for every point in ``bounds``, else ``None``."""
    if isinstance(cond, Const):
        return bool(cond.value)
    if isinstance(cond, BinOp):
        if cond.op == "and":
            pa, pb = prove(cond.a, bounds), prove(cond.b, bounds)
            if pa is False or pb is False:
                return False
            return True if (pa and pb) else None
        if cond.op == "or":
            pa, pb = prove(cond.a, bounds), prove(cond.b, bounds)
            if pa or pb:
                return True
            return False if (pa is False and pb is False) else None
        if cond.op in BinOp.COMPARE and not is_float(cond.a.dtype):
            a, b = interval(cond.a, bounds), interval(cond.b, bounds)
            op = cond.op
            if op == "lt":
                return True if a[1] < b[0] else (False if a[0] >= b[1] else None)
            if op == "le":
                return True if a[1] <= b[0] else (False if a[0] > b[1] else None)
            if op == "gt":
                return True if a[0] > b[1] else (False if a[1] <= b[0] else None)
            if op == "ge":
                return True if a[0] >= b[1] else (False if a[1] < b[0] else None)
    return None


# simplification -------------------------------------------------------------------------------

_FOLD = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "min": min, "max": max,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "and": lambda a, b: bool(a) and bool(b), "or": lambda a, b: bool(a) or bool(b),
}


def _is(e, v):
    return isinstance(e, Const) and e.value == v


def _simplify_node(e: Expr, bounds: Bounds) -> Expr:
    if isinstance(e, BinOp):
        a, b, op = e.a, e.b, e.op
        if isinstance(a, Const) and isinstance(b, Const):
            if op in _FOLD and (not is_float(e.dtype) or op in ("min", "max")) and not is_float(a.dtype):
                return Const(_FOLD[op](a.value, b.value), e.dtype)
            if is_int(e.dtype) and op == "floordiv" and b.value != 0:
                return Const(a.value // b.value, e.dtype)
            if is_int(e.dtype) and op == "floormod" and b.value != 0:
                return Const(a.value % b.value, e.dtype)
        if is_int(e.dtype):
            if op == "add":
                if _is(a, 0):
                    return b
                if _is(b, 0):
                    return a
            if op == "sub" and _is(b, 0):
                return a
            if op == "mul":
                if _is(a, 1):
                    return b
                if _is(b, 1):
                    return a
                if _is(a, 0) or _is(b, 0):
                    return Const(0, e.dtype)
            if op in ("floordiv", "div") and _is(b, 1):
                return a
            if op in ("floormod", "mod") and _is(b, 1):
                return Const(0, e.dtype)
            if op == "floordiv" and isinstance(b, Const) and b.value > 0:
                lo, hi = interval(a, bounds)
                if lo >= 0 and hi < b.value:
                    return Const(0, e.dtype)
            if op == "floormod" and isinstance(b, Const) and b.value > 0:
                lo, hi = interval(a, bounds)
                if lo >= 0 and hi < b.value:
                    return a
            if op in ("floordiv", "floormod") and isinstance(b, Const) and b.value > 1:
                r = _divmod_split(a, b.value, bounds)
                if r is not None:
                    q, rem = r
                    return q if op == "floordiv" else rem
                r = _divmod_nested(a, b.value, op, bounds)
                if r is not None:
                    return r
        if op == "pow" and is_float(e.dtype) and _is(b, 2) and isinstance(a, (Load, Var)):
            return BinOp("mul", a, a)  # x ** 2 == x * x exactly (one rounding); vectorizes
        if op == "pow" and is_float(e.dtype) and isinstance(b, Const) and \
                b.value in (0.5, 0.25, 0.75):
            # quarter powers as square roots (vectorized; powf is a scalar libm call per
            # element: LRN's beta = 0.75 made AlexNet's LRN layers 10x slower than its
            # convolutions). Same values at 0, +inf and for negative x (NaN); within 2 ulp
            r2 = Call("sqrt", (a,), e.dtype)
            if b.value == 0.5:
                return r2
            r4 = Call("sqrt", (r2,), e.dtype)
            return r4 if b.value == 0.25 else BinOp("mul", r2, r4)
        if op in BinOp.COMPARE or op in BinOp.LOGIC:
            p = prove(e, bounds)
            if p is not None:
                return Const(p, "bool")
            if op == "and":
                if _is(a, True):
                    return b
                if _is(b, True):
                    return a
            if op == "or":
                if _is(a, False):
                    return b
                if _is(b, False):
                    return a
        return e
    if isinstance(e, Select):
        p = prove(e.cond, bounds)
        if p is True:
            return e.t
        if p is False:
            return e.f
        return e
    if isinstance(e, Cast) and isinstance(e.value, Const) and not is_float(e.value.dtype) \
            and not is_ext(e.dtype):
        return Const(np.array(e.value.value).astype(e.dtype).item(), e.dtype)
    if isinstance(e, Cast) and e.value.dtype == e.dtype:
        return e.value
    if isinstance(e, Unary) and e.op == "not" and isinstance(e.a, Const):
        return Const(not e.a.value, "bool")
    return e


def _terms(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op == "add":
        return _terms(e.a) + _terms(e.b)
    return [e]


def _multiple_of(t: Expr, c: int):
    """``t / c`` when ``t`` is visibly a multiple of ``c``, else ``None``."""
    if isinstance(t, Const):
        return Const(t.value // c, t.dtype) if t.value % c == 0 else None
    if isinstance(t, BinOp) and t.op == "mul":
        for x, y in ((t.a, t.b), (t.b, t.a)):
            if isinstance(y, Const) and y.value % c == 0:
                k = y.value // c
                return x if k == 1 else _binop("mul", x, Const(k, y.dtype))
    return None


def _split_multiples(terms: list, c: int) -> tuple[list, list]:
    """``(quotients, rest)``: ``t / c`` of the terms visibly multiples of ``c``, the others."""
    qs, rs = [], []
    for t in terms:
        m = _multiple_of(t, c)
        (qs if m is not None else rs).append(m if m is not None else t)
    return qs, rs


def _divmod_split(a: Expr, c: int, bounds: Bounds):
    """``(a // c, a % c)`` when ``a = c*q + r`` with ``r`` provably in ``[0, c)``."""
    qs, rs = _split_multiples(_terms(a), c)
    if not qs:
        return None
    r = _sum(rs, a.dtype)
    lo, hi = interval(r, bounds)
    if lo < 0 or hi >= c:
        return None
    return _sum(qs, a.dtype), r


def _sum(terms: list, dtype: str) -> Expr:
    out = terms[0] if terms else Const(0, dtype)
    for t in terms[1:]:
        out = _binop("add", out, t)
    return out


def _divmod_nested(a: Expr, c: int, op: str, bounds: Bounds):
    """``a // c`` or ``a % c`` (``op``) rewritten through the structure of ``a``, or ``None``:

    - ``a = c*X + Y`` with ``Y >= 0``: ``X + Y // c`` and ``Y % c``;
    - ``a = k*Q + R`` with ``k`` a divisor of ``c`` and ``R`` in ``[0, k)``: ``Q // (c/k)`` and
      ``(Q % (c/k)) * k + R``.

    Both hold for floor division (and C's truncating one, since ``a >= 0`` then). They undo the
    flat-index arithmetic of reshape/transpose chains (ShuffleNet's channel shuffle: a
    permutation of one axis that otherwise reads as nested ``%`` and ``/`` of the flat index)."""
    terms = _terms(a)
    qs, rs = _split_multiples(terms, c)
    if qs and rs:
        y = _sum(rs, a.dtype)
        if interval(y, bounds)[0] >= 0:
            inner = _simplify_node(_binop(op, y, Const(c, a.dtype)), bounds)
            if op == "floormod":
                return inner
            return _simplify_node(_binop("add", _sum(qs, a.dtype), inner), bounds)
        return None
    ks = set()
    for t in terms:  # candidate k: what a term's constant factor shares with c
        f = t.value if isinstance(t, Const) else next(
            (y.value for y in (getattr(t, "b", None), getattr(t, "a", None))
             if isinstance(t, BinOp) and t.op == "mul" and isinstance(y, Const)), 1)
        g = math.gcd(int(f), c)
        if 1 < g < c:
            ks.add(g)
    for k in sorted(ks, reverse=True):
        qs, rs = _split_multiples(terms, k)
        if qs and rs:
            r = _sum(rs, a.dtype)
            lo, hi = interval(r, bounds)
            if lo >= 0 and hi < k:
                q = _sum(qs, a.dtype)
                div = _simplify_node(_binop(op, q, Const(c // k, a.dtype)), bounds)
                if op == "floordiv":
                    return div
                return _binop("add", _simplify_node(
                    _binop("mul", div, Const(k, a.dtype)), bounds), r)
    return None


def simplify(e: Expr, bounds: Bounds | None = None) -> Expr:
    """Simplify ``e`` given inclusive variable ``bounds`` (``Var -> (lo, hi)``)."""
    bounds = bounds or {}
    return post_order(e, lambda n: _simplify_node(n, bounds), shared=True)


def simplify_stmt(s: Stmt, bounds: Bounds | None = None) -> Stmt:
    """Simplify every expression of a loop nest; unit-extent loops are removed (their variable
    becomes 0) and ``IfThenElse`` on a proved condition keeps the taken branch. A block's body is
    simplified with its iteration variables' ranges; a block whose predicate is proved false is
    dropped."""
    bounds = dict(bounds or {})
    if isinstance(s, For):
        if isinstance(s.extent, int) and s.extent == 1:
            return simplify_stmt(substitute_stmt(s.body, {s.var: Const(0, s.var.dtype)}), bounds)
        bounds[s.var] = loop_range(s.extent, bounds)
        return For(s.var, s.extent, simplify_stmt(s.body, bounds), s.kind, dict(s.annotations))
    if isinstance(s, Store):
        return Store(s.buffer, tuple(simplify(i, bounds) for i in s.indices), simplify(s.value, bounds))
    if isinstance(s, Seq):
        return seq([simplify_stmt(x, bounds) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, simplify_stmt(s.body, bounds))
    if isinstance(s, IfThenElse):
        c = simplify(s.cond, bounds)
        if isinstance(c, Const):
            if c.value:
                return simplify_stmt(s.then, bounds)
            return simplify_stmt(s.else_, bounds) if s.else_ is not None else Seq([])
        return IfThenElse(c, simplify_stmt(s.then, bounds),
                          simplify_stmt(s.else_, bounds) if s.else_ is not None else None)
    if isinstance(s, Block):
        pred = simplify(s.predicate, bounds) if s.predicate is not None else None
        if isinstance(pred, Const):
            if not pred.value:
                return Seq([])
            pred = None
        binds = [simplify(b, bounds) for b in s.bindings]
        ib = dict(bounds)
        for iv, b in zip(s.iter_vars, binds):
            lo, hi = interval(b, bounds)
            ib[iv.var] = (max(lo, 0), min(hi, loop_range(iv.extent, bounds)[1]))
        return Block(s.name, list(s.iter_vars), binds, simplify_stmt(s.body, ib),
                     simplify_stmt(s.init, ib) if s.init is not None else None, pred,
                     dict(s.annotations))
    if isinstance(s, KernelCall):
        return KernelCall(s.name, [simplify(a, bounds) for a in s.args], s.key,
                          list(s.reads), list(s.writes))
    return s


def substitute_stmt(s: Stmt, vmap: dict) -> Stmt:
    """Replace variables in every expression of a statement tree."""
    if isinstance(s, For):
        return For(s.var, s.extent, substitute_stmt(s.body, vmap), s.kind, dict(s.annotations))
    if isinstance(s, Store):
        return Store(s.buffer, tuple(substitute(i, vmap) for i in s.indices), substitute(s.value, vmap))
    if isinstance(s, Seq):
        return Seq([substitute_stmt(x, vmap) for x in s.stmts])
    if isinstance(s, Allocate):
        body = substitute_stmt(s.body, vmap)
        b = s.buffer
        if b.origin is not None:
            org = tuple(substitute(o, vmap) for o in b.origin)
            if any(x is not y for x, y in zip(org, b.origin)):
                nb = Buffer(b.name, b.shape, b.dtype, b.scope, b.strides, org)
                body = map_accesses(body, lambda x, idx: (nb, idx) if x is b else (x, idx))
                b = nb
        return Allocate(b, body)
    if isinstance(s, IfThenElse):
        return IfThenElse(substitute(s.cond, vmap), substitute_stmt(s.then, vmap),
                          substitute_stmt(s.else_, vmap) if s.else_ is not None else None)
    if isinstance(s, Block):
        return Block(s.name, list(s.iter_vars), [substitute(b, vmap) for b in s.bindings],
                     substitute_stmt(s.body, vmap),
                     substitute_stmt(s.init, vmap) if s.init is not None else None,
                     substitute(s.predicate, vmap) if s.predicate is not None else None,
                     dict(s.annotations))
    if isinstance(s, KernelCall):
        return KernelCall(s.name, [substitute(a, vmap) for a in s.args], s.key,
                          list(s.reads), list(s.writes))
    return s


def stmt_exprs(s: Stmt) -> list:
    """The expressions held directly by ``s`` (not by its child statements)."""
    if isinstance(s, Store):
        return list(s.indices) + [s.value]
    if isinstance(s, IfThenElse):
        return [s.cond]
    if isinstance(s, Block):
        return list(s.bindings) + ([s.predicate] if s.predicate is not None else [])
    if isinstance(s, KernelCall):
        return list(s.args)
    return []


def stmt_children(s: Stmt) -> list:
    """Direct child statements of ``s``."""
    if isinstance(s, (For, Allocate)):
        return [s.body]
    if isinstance(s, Seq):
        return list(s.stmts)
    if isinstance(s, IfThenElse):
        return [s.then] + ([s.else_] if s.else_ is not None else [])
    if isinstance(s, Block):
        return ([s.init] if s.init is not None else []) + [s.body]
    return []


def walk_stmt(s: Stmt):
    """Pre-order iterator over ``s`` and all statements below it."""
    yield s
    for c in stmt_children(s):
        yield from walk_stmt(c)


def map_accesses(s: Stmt, fn) -> Stmt:
    """``s`` with every access ``buf[indices]`` (loads, stores, ``AddressOf``) replaced by
    ``fn(buf, indices) -> (buf, indices)``; ``KernelCall`` buffer lists map through
    ``fn(buf, None)``."""

    def fe(e: Expr) -> Expr:
        def g(n):
            if isinstance(n, Load):
                b, idx = fn(n.src, n.indices)
                return n if (b is n.src and idx is n.indices) else Load(b, idx)
            if isinstance(n, AddressOf):
                b, idx = fn(n.src, n.indices)
                return n if (b is n.src and idx is n.indices) else AddressOf(b, idx)
            return n
        return post_order(e, g)

    def go(x: Stmt) -> Stmt:
        if isinstance(x, Store):
            b, idx = fn(x.buffer, x.indices)
            return Store(b, tuple(fe(i) for i in idx), fe(x.value))
        if isinstance(x, For):
            return For(x.var, x.extent, go(x.body), x.kind, dict(x.annotations))
        if isinstance(x, Seq):
            return Seq([go(y) for y in x.stmts])
        if isinstance(x, Allocate):
            b, _ = fn(x.buffer, None)
            return Allocate(b, go(x.body))
        if isinstance(x, IfThenElse):
            return IfThenElse(fe(x.cond), go(x.then), go(x.else_) if x.else_ is not None else None)
        if isinstance(x, Block):
            return Block(x.name, x.iter_vars, [fe(b) for b in x.bindings], go(x.body),
                         go(x.init) if x.init is not None else None,
                         fe(x.predicate) if x.predicate is not None else None,
                         dict(x.annotations))
        if isinstance(x, KernelCall):
            return KernelCall(x.name, [fe(a) for a in x.args], x.key,
                              [fn(b, None)[0] for b in x.reads],
                              [fn(b, None)[0] for b in x.writes])
        return x
    return go(s)


# linear canonical form --------------------------------------------------------------------------

def expr_key(e: Expr) -> str:
    """A string equal for structurally equal expressions (variables by identity)."""
    if isinstance(e, Var):
        return f"v{id(e)}"
    if isinstance(e, Const):
        return f"c{e.value}:{e.dtype}"
    if isinstance(e, BinOp):
        return f"({e.op} {expr_key(e.a)} {expr_key(e.b)})"
    if isinstance(e, Unary):
        return f"({e.op} {expr_key(e.a)})"
    if isinstance(e, Cast):
        return f"(cast {e.dtype} {expr_key(e.value)})"
    if isinstance(e, Call):
        return f"({e.name} {' '.join(expr_key(a) for a in e.args)})"
    if isinstance(e, Select):
        return f"(sel {expr_key(e.cond)} {expr_key(e.t)} {expr_key(e.f)})"
    if isinstance(e, (Load, AddressOf)):
        return f"(ld{id(e.src)} {' '.join(expr_key(a) for a in e.indices)})"
    return f"?{id(e)}"


def linear_terms(e: Expr) -> tuple[dict, int] | None:
    """``({key: (atom, coeff)}, const)`` with ``e == sum(coeff * atom) + const`` for an integer
    expression (atoms: variables and non-linear sub-expressions); ``None`` for non-integers."""
    if not is_int(e.dtype):
        return None
    terms: dict = {}
    const = [0]

    def add(x: Expr, c: int):
        if c == 0:
            return
        if isinstance(x, Const):
            const[0] += c * int(x.value)
        elif isinstance(x, BinOp) and x.op in ("add", "sub"):
            add(x.a, c)
            add(x.b, c if x.op == "add" else -c)
        elif isinstance(x, BinOp) and x.op == "mul" and isinstance(x.b, Const):
            add(x.a, c * int(x.b.value))
        elif isinstance(x, BinOp) and x.op == "mul" and isinstance(x.a, Const):
            add(x.b, c * int(x.a.value))
        elif isinstance(x, Unary) and x.op == "neg":
            add(x.a, -c)
        else:
            k = expr_key(x)
            atom, c0 = terms.get(k, (x, 0))
            terms[k] = (atom, c0 + c)

    add(e, 1)
    return {k: v for k, v in terms.items() if v[1] != 0}, const[0]


def canonical(e: Expr, bounds: Bounds | None = None) -> Expr:
    """``e`` simplified, with integer sums collected into ``c1*x1 + c2*x2 + ... + c``."""
    e = simplify(e, bounds)
    lt = linear_terms(e)
    if lt is None:
        return e
    terms, c = lt
    out = None
    for atom, k in terms.values():
        t = atom if k == 1 else _binop("mul", atom, Const(k, e.dtype))
        out = t if out is None else _binop("add", out, t)
    if out is None:
        return Const(c, e.dtype)
    if c:
        out = _binop("add", out, Const(c, e.dtype))
    return out


def flat_index(buf: Buffer, indices, bounds: Bounds | None = None) -> Expr:
    """The element offset of ``buf[indices]``: ``buf.origin`` subtracted, ``buf``'s strides
    applied, in linear canonical form (simplified with the variable ``bounds`` when given)."""
    from .expr import binop
    if buf.origin is not None:
        indices = [binop("sub", i, o) for i, o in zip(indices, buf.origin)]
    flat: Expr = Const(0, "int64")
    strides = buf.elem_strides()
    for i, st in zip(indices, strides):
        flat = binop("add", flat, binop("mul", i, st if isinstance(st, Expr) else
                                        Const(st, "int64")))
    if any(isinstance(st, Expr) for st in strides):  # symbolic strides: the normal form
        from .symbolic import normal_index
        folded = normal_index(flat)
        flat = flat if folded is None else folded
    return canonical(flat, bounds)
