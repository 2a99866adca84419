"""Analyses the schedule primitives share: locating blocks and loops in a loop-IR tree, affine
decomposition of index expressions, the buffers a block reads and writes, and the region of a
buffer that a set of accesses touches while some loops vary."""

from __future__ import annotations

from typing import Iterable, Sequence

from ...errors import ScheduleError
from ..arith import (collect, collect_unique, interval, loop_range, map_accesses, simplify, stmt_children,
                     stmt_exprs, substitute, walk_stmt)
from ..expr import AddressOf, BinOp, Cast, Const, Expr, Load, Unary, Var, binop
from ..stmt import Allocate, Block, Buffer, For, KernelCall, Seq, Stmt, Store


# tree navigation ------------------------------------------------------------------------------

def find_path(root: Stmt, pred) -> list[Stmt] | None:
    """The path ``[root, ..., node]`` to the first node (pre-order) satisfying ``pred``."""
    if pred(root):
        return [root]
    for c in stmt_children(root):
        p = find_path(c, pred)
        if p is not None:
            return [root] + p
    return None


def blocks_in(s: Stmt) -> list[Block]:
    """Blocks under ``s`` in program order (blocks nested in a block's body are not listed)."""
    out = []

    def visit(x):
        if isinstance(x, Block):
            out.append(x)
            return
        for c in stmt_children(x):
            visit(c)
    visit(s)
    return out


def replace_node(root: Stmt, old: Stmt, new: Stmt) -> Stmt:
    """``root`` with the node ``old`` (by identity) replaced by ``new`` (ancestors rebuilt)."""
    if root is old:
        return new
    if isinstance(root, For):
        b = replace_node(root.body, old, new)
        return root if b is root.body else For(root.var, root.extent, b, root.kind,
                                               dict(root.annotations))
    if isinstance(root, Seq):
        items = [replace_node(x, old, new) for x in root.stmts]
        if all(a is b for a, b in zip(items, root.stmts)):
            return root
        return Seq(_flatten(items))
    if isinstance(root, Allocate):
        b = replace_node(root.body, old, new)
        return root if b is root.body else Allocate(root.buffer, b)
    from ..stmt import IfThenElse
    if isinstance(root, IfThenElse):
        t = replace_node(root.then, old, new)
        e = replace_node(root.else_, old, new) if root.else_ is not None else None
        if t is root.then and e is root.else_:
            return root
        return IfThenElse(root.cond, t, e)
    if isinstance(root, Block):
        b = replace_node(root.body, old, new)
        i = replace_node(root.init, old, new) if root.init is not None else None
        if b is root.body and i is root.init:
            return root
        return Block(root.name, root.iter_vars, root.bindings, b, i, root.predicate,
                     dict(root.annotations))
    return root


def _flatten(items):
    out = []
    for x in items:
        if isinstance(x, Seq):
            out.extend(x.stmts)
        elif x is not None:
            out.append(x)
    return out


def loop_vars_used(e: Expr) -> set[int]:
    """ids of the variables in ``e``."""
    return {id(v) for v in collect(e, lambda n: isinstance(n, Var))}


# accesses -------------------------------------------------------------------------------------

def accesses(s: Stmt) -> list[tuple[str, Buffer, tuple]]:
    """``(kind, buffer, indices)`` of every access under ``s``: kind ``"read"`` / ``"write"``;
    a ``KernelCall`` reports its buffers with ``indices=None`` (whole buffer)."""
    out = []
    for x in walk_stmt(s):
        if isinstance(x, Store):
            out.append(("write", x.buffer, x.indices))
        if isinstance(x, KernelCall):
            out += [("read", b, None) for b in x.reads] + [("write", b, None) for b in x.writes]
        for e in stmt_exprs(x):
            for ld in collect(e, lambda n: isinstance(n, (Load, AddressOf))):
                if isinstance(ld, Load):
                    out.append(("read", ld.src, ld.indices))
    return out


def block_reads(block: Block) -> list[Buffer]:
    """Buffers read by ``block`` (first-use order; a reduction's own output is excluded)."""
    writes = set(id(b) for b in block_writes(block))
    seen: dict[int, Buffer] = {}
    for kind, buf, _ in accesses(block.body):
        if kind == "read" and id(buf) not in writes:
            seen.setdefault(id(buf), buf)
    return list(seen.values())


def block_writes(block: Block) -> list[Buffer]:
    """Buffers written by ``block`` (first-write order)."""
    seen: dict[int, Buffer] = {}
    for s in (block.init, block.body):
        if s is None:
            continue
        for kind, buf, _ in accesses(s):
            if kind == "write":
                seen.setdefault(id(buf), buf)
    return list(seen.values())


def block_access_indices(block: Block, buf: Buffer, kind: str) -> list[tuple]:
    """Index tuples (over the enclosing loop variables) of ``kind`` accesses of ``buf`` in
    ``block``."""
    vmap = {iv.var: b for iv, b in zip(block.iter_vars, block.bindings)}
    out = []
    for s in (block.init, block.body):
        if s is None:
            continue
        for k, b, idx in accesses(s):
            if b is buf and k == kind:
                if idx is None:
                    raise ScheduleError(f"block {block.name!r} accesses {buf.name} through a "
                                        f"micro-kernel call; its region is unknown")
                out.append(tuple(substitute(i, vmap) for i in idx))
    return out


# affine analysis ------------------------------------------------------------------------------

def affine(e: Expr, vars_: Sequence[Var]) -> tuple[dict[int, int], Expr] | None:
    """Write ``e`` as ``sum(c_v * v for v in vars_) + rest`` with integer ``c_v`` and ``rest`` free
    of ``vars_``. Returns ``({id(v): c_v}, rest)`` or ``None`` when ``e`` is not affine in them."""
    ids = {id(v) for v in vars_}

    def go(x: Expr):
        if isinstance(x, Var):
            return ({id(x): 1}, Const(0, x.dtype)) if id(x) in ids else ({}, x)
        if isinstance(x, Const):
            return {}, x
        if not (loop_vars_used(x) & ids):
            return {}, x
        if isinstance(x, Cast):
            return go(x.value)
        if isinstance(x, Unary) and x.op == "neg":
            r = go(x.a)
            if r is None:
                return None
            return {k: -v for k, v in r[0].items()}, Unary("neg", r[1])
        if isinstance(x, BinOp) and x.op in ("add", "sub"):
            ra, rb = go(x.a), go(x.b)
            if ra is None or rb is None:
                return None
            sign = 1 if x.op == "add" else -1
            c = dict(ra[0])
            for k, v in rb[0].items():
                c[k] = c.get(k, 0) + sign * v
            return c, binop(x.op, ra[1], rb[1])
        if isinstance(x, BinOp) and x.op == "mul":
            for a, b in ((x.a, x.b), (x.b, x.a)):
                if isinstance(b, Const) or not (loop_vars_used(b) & ids):
                    if not isinstance(b, Const):
                        return None  # var * symbolic: not affine with constant coefficients
                    r = go(a)
                    if r is None:
                        return None
                    return {k: v * int(b.value) for k, v in r[0].items()}, binop("mul", r[1], b)
            return None
        return None

    r = go(e)
    if r is None:
        return None
    coeffs = {k: v for k, v in r[0].items() if v != 0}
    return coeffs, simplify(r[1])


def flat_offset(buf: Buffer, indices: Sequence[Expr]) -> Expr:
    """Element offset of ``buf[indices]`` from the buffer start (its ``origin`` subtracted, its
    strides applied), in linear canonical form."""
    from ..arith import flat_index
    return flat_index(buf, indices)


# regions --------------------------------------------------------------------------------------

def region(index_tuples: Iterable[tuple], inner: Sequence[For], shape: Sequence[int],
           outer_bounds: dict) -> list[tuple[Expr, int]]:
    """Per dimension ``(base, extent)`` covering every index tuple while the ``inner`` loops run
    over their ranges (``base`` is an expression of the other loop variables, ``extent`` a
    constant). Non-affine indices fall back to the interval bound, then to the whole dimension.
    """
    inner_vars = [f.var for f in inner]
    ext = {id(f.var): f.extent for f in inner}
    tuples = list(index_tuples)
    out = []
    for d, n in enumerate(shape):
        forms = []
        for t in tuples:
            a = affine(t[d], inner_vars)
            if a is None:
                forms = None
                break
            coeffs, rest = a
            lo = sum(c * (ext[k] - 1) for k, c in coeffs.items() if c < 0)
            hi = sum(c * (ext[k] - 1) for k, c in coeffs.items() if c > 0)
            forms.append((rest, lo, hi))
        if forms:
            base0 = forms[0][0]
            same = all(_const_diff(f[0], base0) is not None for f in forms)
            if same:
                lo = min(_const_diff(f[0], base0) + f[1] for f in forms)
                hi = max(_const_diff(f[0], base0) + f[2] for f in forms)
                out.append((simplify(binop("add", base0, Const(lo, "int64"))), hi - lo + 1))
                continue
        # fall back: a constant interval over all loops
        bounds = dict(outer_bounds)
        for f in inner:
            bounds[f.var] = loop_range(f.extent, bounds)
        los, his = [], []
        for t in tuples:
            lo, hi = interval(t[d], bounds)
            los.append(lo)
            his.append(hi)
        lo, hi = max(min(los), 0), min(max(his), n - 1)
        if lo == float("-inf") or hi == float("inf"):
            lo, hi = 0, n - 1
        out.append((Const(int(lo), "int64"), int(hi - lo + 1)))
    return out


def _const_diff(a: Expr, b: Expr) -> int | None:
    """``a - b`` when it is a constant (sums compared term by term)."""
    from ..arith import linear_terms
    lt = linear_terms(binop("sub", a, b))
    if lt is None:
        return None
    terms, c = lt
    return c if not terms else None


def _vars(e: Expr) -> list[Var]:
    seen = {}
    for v in collect(e, lambda n: isinstance(n, Var)):
        seen.setdefault(id(v), v)
    return list(seen.values())


def loop_bounds(path: Sequence[Stmt]) -> dict:
    """``{var: (0, extent - 1)}`` for the loops on ``path``."""
    return {s.var: loop_range(s.extent, {}) for s in path if isinstance(s, For)}


# rewriting buffers ----------------------------------------------------------------------------

def replace_buffer(s: Stmt, old: Buffer, new: Buffer) -> Stmt:
    """``s`` with every use of buffer ``old`` pointing at ``new`` (indices unchanged)."""
    return map_accesses(s, lambda b, idx: (new, idx) if b is old else (b, idx))


def prune(s: Stmt) -> Stmt:
    """Drop empty sequences and loops or allocations left with an empty body."""
    from ..stmt import IfThenElse
    if isinstance(s, Seq):
        items = [prune(x) for x in s.stmts]
        items = [x for x in items if not (isinstance(x, Seq) and not x.stmts)]
        return Seq(_flatten(items)) if len(items) != 1 else items[0]
    if isinstance(s, For):
        b = prune(s.body)
        if isinstance(b, Seq) and not b.stmts:
            return b
        return For(s.var, s.extent, b, s.kind, dict(s.annotations))
    if isinstance(s, Allocate):
        b = prune(s.body)
        if isinstance(b, Seq) and not b.stmts:
            return b
        return Allocate(s.buffer, b)
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, prune(s.then), prune(s.else_) if s.else_ is not None else None)
    return s


def exclusive_nest(path: Sequence[Stmt]) -> Stmt:
    """The outermost statement of the loop nest that holds only ``path[-1]``."""
    k = len(path) - 1
    while k > 0 and isinstance(path[k - 1], For) and path[k - 1].body is path[k]:
        k -= 1
    return path[k]


def preorder_index(root: Stmt) -> dict[int, int]:
    """``{id(stmt): position}`` in pre-order."""
    from ..arith import walk_stmt
    return {id(s): k for k, s in enumerate(walk_stmt(root))}


def check_in_scope(root: Stmt, stmt: Stmt, position_path: Sequence[Stmt], where: str) -> None:
    """Raise ``ScheduleError`` when ``stmt``, placed below ``position_path``, would access a buffer
    whose allocation does not enclose that position."""
    from ..arith import walk_stmt as _walk
    allocs = {id(s.buffer): s.buffer for s in _walk(root) if isinstance(s, Allocate)}
    visible = {id(s.buffer) for s in position_path if isinstance(s, Allocate)}
    visible |= {id(s.buffer) for s in _walk(stmt) if isinstance(s, Allocate)}
    for _, buf, _ in accesses(stmt):
        if id(buf) in allocs and id(buf) not in visible:
            raise ScheduleError(f"{where}: {buf.name} is allocated inside a loop that does not "
                                f"enclose the new position")


def verify_well_formed(func) -> str | None:
    """Why ``func``'s body is ill-formed (a variable used outside its loop or block, a buffer
    accessed outside its allocation), or ``None`` when it is well formed."""
    from ..stmt import IfThenElse
    params = {id(p) for p in func.params}
    allocated = set()

    def check_expr(e, vars_, bufs, where):
        for n in collect_unique(e, lambda x: isinstance(x, (Var, Load, AddressOf))):
            if isinstance(n, Var) and id(n) not in vars_:
                return f"variable {n.name} is used outside its loop or block ({where})"
            if isinstance(n, (Load, AddressOf)) and id(n.src) not in bufs:
                return f"{n.src.name} is read outside its allocation ({where})"
        return None

    def go(s, vars_, bufs):
        if isinstance(s, For):
            return go(s.body, vars_ | {id(s.var)}, bufs)
        if isinstance(s, Allocate):
            allocated.add(id(s.buffer))
            org = s.buffer.origin or ()
            for o in org:
                r = check_expr(o, vars_, bufs, f"origin of {s.buffer.name}")
                if r:
                    return r
            return go(s.body, vars_, bufs | {id(s.buffer)})
        if isinstance(s, Seq):
            for x in s.stmts:
                r = go(x, vars_, bufs)
                if r:
                    return r
            return None
        if isinstance(s, IfThenElse):
            return (check_expr(s.cond, vars_, bufs, "condition") or go(s.then, vars_, bufs)
                    or (go(s.else_, vars_, bufs) if s.else_ is not None else None))
        if isinstance(s, Block):
            for e in list(s.bindings) + ([s.predicate] if s.predicate is not None else []):
                r = check_expr(e, vars_, bufs, f"block {s.name}")
                if r:
                    return r
            inner = vars_ | {id(iv.var) for iv in s.iter_vars}
            return (go(s.init, inner, bufs) if s.init is not None else None) or \
                go(s.body, inner, bufs)
        if isinstance(s, Store):
            if id(s.buffer) not in bufs:
                return f"{s.buffer.name} is written outside its allocation"
            for e in list(s.indices) + [s.value]:
                r = check_expr(e, vars_, bufs, f"store to {s.buffer.name}")
                if r:
                    return r
            return None
        if isinstance(s, KernelCall):
            for b in s.reads + s.writes:
                if id(b) not in bufs:
                    return f"{b.name} is used by {s.name} outside its allocation"
            for e in s.args:
                r = check_expr(e, vars_, bufs, f"call {s.name}")
                if r:
                    return r
        return None

    from ..symbolic import Symbol
    symbols = {id(Symbol(n)) for n in func.attrs.get("symbols", ())}  # kernel arguments
    return go(func.body, symbols, set(params))
