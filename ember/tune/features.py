"""Features of a loop program for learned cost models.

``loop_features(func) -> np.ndarray`` (length ``NUM_FEATURES``, float32) summarizes a PrimFunc
the way a performance engineer would read it: how much arithmetic it does (FLOPs, arithmetic
intensity), how it walks memory (the stride of each buffer access along the innermost loop,
reuse: iterations that touch the same element, footprint in bytes), where its working set stops
fitting the caches, and how its loops are annotated (parallel extent, vector width, unrolling).
Every quantity is ``log2(1 + x)`` so models see scale-free numbers. The statement that runs the
most iterations dominates; a few whole-program sums are appended.

Strides are found by evaluating the flattened index at the origin and at a unit step of each
loop variable, so they are exact for affine indices and a local slope for ``//`` and ``%``.
"""

from __future__ import annotations

import math

import numpy as np

from ..tir.expr import BinOp, Call, Cast, Const, Expr, Load, Select, Unary, Var, is_float
from ..tir.arith import map_children
from ..tir.stmt import Allocate, For, IfThenElse, Seq, Store

MAX_ACCESSES = 4
L1_BYTES = 32 << 10
L2_BYTES = 1 << 20
_PER_ACCESS = 6
_HEAD = ["iters", "flops_per_iter", "flops", "parallel_extent", "vector_extent", "unroll_extent",
         "inner_extent", "depth", "inner_is_reduction", "unique_bytes", "intensity",
         "l1_traffic", "l2_traffic", "l1_fit_level", "outer_parallel_work"]
_ACCESS = ["stride", "contiguous", "reuse", "footprint", "is_store", "bytes_per_iter"]
_TAIL = ["num_stores", "total_iters", "total_flops", "num_loops"]
FEATURE_NAMES = (_HEAD + [f"acc{k}_{n}" for k in range(MAX_ACCESSES) for n in _ACCESS] + _TAIL)
NUM_FEATURES = len(FEATURE_NAMES)


def _l2(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _eval(e: Expr, env: dict) -> float:
    """Integer/float value of an index expression with loop variables from ``env`` (default 0)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env.get(e, 0)
    if isinstance(e, BinOp):
        a, b = _eval(e.a, env), _eval(e.b, env)
        op = e.op
        if op == "add":
            return a + b
        if op == "sub":
            return a - b
        if op == "mul":
            return a * b
        if op in ("floordiv", "div"):
            return a // b if b else 0
        if op in ("floormod", "mod"):
            return a % b if b else 0
        if op == "min":
            return min(a, b)
        if op == "max":
            return max(a, b)
        return 0
    if isinstance(e, Cast):
        return _eval(e.value, env)
    if isinstance(e, Select):
        return _eval(e.t, env)
    if isinstance(e, Unary) and e.op == "neg":
        return -_eval(e.a, env)
    return 0


def _flat_index(buf, indices) -> Expr | None:
    flat = None
    strides = buf.elem_strides() if hasattr(buf, "elem_strides") else _row_major(buf.shape)
    for idx, st in zip(indices, strides):
        term = idx * int(st) if st != 1 else idx
        flat = term if flat is None else flat + term
    return flat


def _row_major(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def _count_ops(e: Expr) -> tuple[int, list]:
    """(floating-point operations, [Load nodes]) of an expression."""
    flops, loads = 0, []
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Load):
            loads.append(n)
            stack.extend(n.indices)
        elif isinstance(n, BinOp):
            if is_float(n.dtype) or (n.op in BinOp.COMPARE and is_float(n.a.dtype)):
                flops += 1
            stack += [n.a, n.b]
        elif isinstance(n, Call):
            flops += 1 if is_float(n.dtype) else 0
            stack.extend(n.args)
        elif isinstance(n, (Unary,)):
            stack.append(n.a)
        elif isinstance(n, Cast):
            stack.append(n.value)
        elif isinstance(n, Select):
            stack += [n.cond, n.t, n.f]
    return flops, loads


def _itemsize(dtype: str) -> int:
    from ..dtypes import itemsize
    return itemsize(dtype)


class _Access:
    def __init__(self, buf, indices, is_store, loops):
        self.buf = buf
        self.is_store = is_store
        flat = _flat_index(buf, indices)
        base = _eval(flat, {}) if flat is not None else 0
        self.coef = [abs(_eval(flat, {lp.var: 1}) - base) if flat is not None else 0
                     for lp in loops]
        self.item = _itemsize(buf.dtype)
        self.size = max(1, int(np.prod(buf.shape)) if buf.shape else 1)

    def footprint(self, loops, start: int) -> int:
        """Distinct elements touched by loops[start:] (capped by the buffer size)."""
        n = 1
        for lp, c in zip(loops[start:], self.coef[start:]):
            if c:
                n *= lp.extent
        return min(n, self.size)


def _store_features(store: Store, loops: list[For]) -> tuple[np.ndarray, float, float]:
    flops_it, loads = _count_ops(store.value)
    accesses = []
    if store.buffer.scope == "global":
        accesses.append(_Access(store.buffer, store.indices, True, loops))
    for ld in loads:
        if getattr(ld.src, "scope", "global") == "global":
            accesses.append(_Access(ld.src, ld.indices, False, loops))
    iters = float(np.prod([lp.extent for lp in loops])) if loops else 1.0
    par = float(np.prod([lp.extent for lp in loops if lp.kind == "parallel"] or [1]))
    unroll = float(np.prod([lp.extent for lp in loops if lp.kind == "unrolled"] or [1]))
    inner = loops[-1] if loops else None
    vec = float(inner.extent) if inner is not None and inner.kind == "vectorized" else 0.0
    inner_red = 0.0
    if inner is not None and store.buffer.scope != "global":
        inner_red = 1.0
    elif inner is not None and accesses and accesses[0].is_store and accesses[0].coef[-1] == 0:
        inner_red = 1.0
    unique = sum(a.footprint(loops, 0) * a.item for a in accesses)
    # working set of the loops from level l inward, for each l
    fit1, fit2 = len(loops), len(loops)
    for lvl in range(len(loops), -1, -1):
        ws = sum(a.footprint(loops, lvl) * a.item for a in accesses)
        if ws <= L1_BYTES:
            fit1 = lvl
        if ws <= L2_BYTES:
            fit2 = lvl

    def traffic(lvl: int) -> float:
        outer = float(np.prod([lp.extent for lp in loops[:lvl]] or [1]))
        return outer * sum(a.footprint(loops, lvl) * a.item for a in accesses)

    flops = flops_it * iters
    outer_par = float(np.prod([lp.extent for lp in loops[:1]] or [1])) \
        if loops and loops[0].kind == "parallel" else 0.0
    head = [_l2(iters), _l2(flops_it), _l2(flops), _l2(par), _l2(vec), _l2(unroll),
            _l2(inner.extent if inner is not None else 0), float(len(loops)), inner_red,
            _l2(unique), _l2(flops / max(1.0, unique)), _l2(traffic(fit1)), _l2(traffic(fit2)),
            float(len(loops) - fit1), _l2(outer_par)]
    accesses.sort(key=lambda a: (not a.is_store, -a.footprint(loops, 0) * a.item))
    acc_feats = []
    for a in accesses[:MAX_ACCESSES]:
        stride = a.coef[-1] if a.coef else 0
        reuse = float(np.prod([lp.extent for lp, c in zip(loops, a.coef) if c == 0] or [1]))
        acc_feats += [_l2(stride), float(stride == 1), _l2(reuse),
                      _l2(a.footprint(loops, 0) * a.item), float(a.is_store),
                      _l2(a.item * (1 if stride else 0))]
    acc_feats += [0.0] * (_PER_ACCESS * MAX_ACCESSES - len(acc_feats))
    return np.asarray(head + acc_feats, np.float32), iters, flops


def loop_features(func) -> np.ndarray:
    """The feature vector of a PrimFunc (see the module doc); ``FEATURE_NAMES`` names it."""
    from ..tir.transform import lower_blocks
    func = lower_blocks(func)
    best, best_key = None, -1.0
    n_stores, total_iters, total_flops, n_loops = 0, 0.0, 0.0, 0

    def walk(s, loops):
        nonlocal best, best_key, n_stores, total_iters, total_flops, n_loops
        if isinstance(s, For):
            n_loops += 1
            walk(s.body, loops + [s])
        elif isinstance(s, Store):
            f, iters, flops = _store_features(s, loops)
            n_stores += 1
            total_iters += iters
            total_flops += flops
            key = iters * (1 + flops / max(iters, 1))
            if key > best_key:
                best, best_key = f, key
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, loops)
        elif isinstance(s, (Allocate,)):
            walk(s.body, loops)
        elif isinstance(s, IfThenElse):
            walk(s.then, loops)
            if s.else_ is not None:
                walk(s.else_, loops)
        else:
            body = getattr(s, "body", None)
            if body is not None:
                walk(body, loops)

    walk(func.body, [])
    if best is None:
        best = np.zeros(len(_HEAD) + _PER_ACCESS * MAX_ACCESSES, np.float32)
    tail = np.asarray([float(n_stores), _l2(total_iters), _l2(total_flops), float(n_loops)],
                      np.float32)
    return np.concatenate([best, tail])


def count_flops(func) -> float:
    """Floating-point operations of one run of a PrimFunc (per-statement operations times
    their iterations, summed); a kernel that states its count in ``attrs["flops"]`` (one
    built from micro-kernel calls, whose work the walk cannot see) is taken at its word."""
    if "flops" in func.attrs:
        return float(func.attrs["flops"])
    from ..tir.transform import lower_blocks
    func = lower_blocks(func)
    total = 0.0
    memo: dict[int, tuple] = {}

    def executed(e) -> int:
        """Operations one evaluation executes: a ``Select`` runs one of its sides (a Winograd
        transform's select chain over the tile position runs one leaf, not all of them)."""
        if id(e) in memo:
            return memo[id(e)][0]
        if isinstance(e, Select):
            n = executed(e.cond) + max(executed(e.t), executed(e.f))
        else:
            kids: list = []
            map_children(e, lambda c: (kids.append(c), c)[1])
            own = 1 if (isinstance(e, BinOp) and (is_float(e.dtype) or (
                e.op in BinOp.COMPARE and is_float(e.a.dtype)))) or (
                isinstance(e, Call) and is_float(e.dtype)) else 0
            n = own + sum(executed(c) for c in kids)
        memo[id(e)] = (n, e)
        return n

    def walk(s, iters):
        nonlocal total
        if isinstance(s, For):
            walk(s.body, iters * s.extent)
        elif isinstance(s, Store):
            total += executed(s.value) * iters
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, iters)
        elif isinstance(s, Allocate):
            walk(s.body, iters)
        elif isinstance(s, IfThenElse):
            walk(s.then, iters)
            if s.else_ is not None:
                walk(s.else_, iters)

    walk(func.body, 1)
    return total
