"""Loop primitives: split, fuse, reorder and the loop kinds (parallel, vectorize, unroll)."""

from __future__ import annotations

from typing import Sequence

from ...errors import ScheduleError
from ..arith import substitute_stmt, walk_stmt
from ..expr import Const, Expr, Var, binop
from ..stmt import Allocate, Block, For, KernelCall, Stmt
from .analysis import blocks_in, loop_vars_used, replace_node


def split(sch, loop, factors: Sequence[int | None]) -> list:
    """Implementation of ``Schedule.split`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.split`` records it and restores the function if this raises).
    Returns the new loops' ``LoopRV`` handles, outermost first (one per factor).

    Raises:
        ScheduleError: fewer than 2 factors, more than one ``None``, a non-positive factor, factors
            whose product is below the extent, a loop that is not serial, or a non-dividing split
            over a tensorized call."""
    from .schedule import LoopRV
    f, _ = sch.find_loop(loop, "split")
    factors = list(factors)
    where = f"split of loop {f.var.name} (extent {f.extent})"
    if len(factors) < 2:
        raise ScheduleError(f"{where}: needs at least 2 factors, got {factors}")
    if sum(x is None for x in factors) > 1:
        raise ScheduleError(f"{where}: at most one factor may be None, got {factors}")
    if any(x is not None and (not isinstance(x, int) or x < 1) for x in factors):
        raise ScheduleError(f"{where}: factors must be positive ints or None, got {factors}")
    known = 1
    for x in factors:
        known *= x or 1
    symbolic = isinstance(f.extent, Expr)
    if symbolic:
        # a symbolic extent: the None factor is the ceiling quotient (an int64 expression) and
        # the blocks always take the predicate ``fused < extent`` (the tail)
        if None not in factors:
            raise ScheduleError(f"{where}: a symbolic extent needs one None factor, got "
                                f"{factors}")
        from ..symbolic import as_dim
        factors[factors.index(None)] = as_dim((f.extent + (known - 1)) // known)
    elif None in factors:
        factors[factors.index(None)] = -(-f.extent // known)
    prod = 1
    for x in factors:
        prod *= x
    if not symbolic and prod < f.extent:
        raise ScheduleError(f"{where}: factors {factors} cover only {prod} iterations")
    if f.kind != "serial":
        raise ScheduleError(f"{where}: the loop is {f.kind}; split it before marking it")
    new_vars = [Var(f"{f.var.name}_{k}") for k in range(len(factors))]
    fused = None
    for v, n in zip(new_vars, factors):
        fused = v if fused is None else binop("add", binop("mul", fused, Const(n, "int64")), v)
    body = substitute_stmt(f.body, {f.var: fused})
    if symbolic or prod > f.extent:
        if any(isinstance(x, KernelCall) for x in walk_stmt(body)):
            raise ScheduleError(f"{where}: the factors do not divide the extent and the loop "
                                f"holds a tensorized call, which cannot take a predicate")
        body = _add_predicate(body, binop("lt", fused, _const(f.extent)))
    for v, n in reversed(list(zip(new_vars, factors))):
        body = For(v, n, body)
    sch.body = replace_node(sch.body, f, body)
    return [LoopRV(v) for v in new_vars]


def _add_predicate(s: Stmt, cond) -> Stmt:
    """Conjoin ``cond`` to the predicate of every block under ``s``."""
    for b in blocks_in(s):
        p = cond if b.predicate is None else binop("and", b.predicate, cond)
        nb = Block(b.name, b.iter_vars, b.bindings, b.body, b.init, p, dict(b.annotations))
        s = replace_node(s, b, nb)
    return s


def _const(n):
    """An extent as an ``int64`` expression (a symbolic one as is)."""
    return n if isinstance(n, Expr) else Const(n, "int64")


def fuse(sch, loops) -> object:
    """Implementation of ``Schedule.fuse`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.fuse`` records it and restores the function if this raises).
    Returns the ``LoopRV`` of the fused loop (extent = product of the extents).

    Raises:
        ScheduleError: fewer than 2 loops, loops that are not directly nested, or a non-serial
            loop."""
    from .schedule import LoopRV
    if len(loops) < 2:
        raise ScheduleError(f"fuse: needs at least 2 loops, got {len(loops)}")
    fs = [sch.find_loop(lp, "fuse")[0] for lp in loops]
    names = ", ".join(f.var.name for f in fs)
    for a, b in zip(fs, fs[1:]):
        if a.body is not b:
            raise ScheduleError(f"fuse of loops [{names}]: loop {b.var.name} is not the only "
                                f"statement in the body of loop {a.var.name}")
    for f in fs:
        if f.kind != "serial":
            raise ScheduleError(f"fuse of loops [{names}]: loop {f.var.name} is {f.kind}")
    total = 1
    for f in fs:
        total *= f.extent
    v = Var("_".join(f.var.name for f in fs) + "_f")
    vmap = {}
    inner = 1
    for f in reversed(fs):  # extents may be symbolic (int64 expressions)
        e = v if isinstance(inner, int) and inner == 1 else binop("floordiv", v, _const(inner))
        if f is not fs[0]:
            e = binop("floormod", e, _const(f.extent))
        vmap[f.var] = e
        inner *= f.extent
    new = For(v, total, substitute_stmt(fs[-1].body, vmap))
    sch.body = replace_node(sch.body, fs[0], new)
    return LoopRV(v)


def reorder(sch, loops) -> None:
    """Implementation of ``Schedule.reorder`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.reorder`` records it and restores the function if this raises).
    Fewer than 2 loops is a no-op.

    Raises:
        ScheduleError: a loop given twice, loops not on one perfectly nested chain, a non-serial
            loop, or (with several blocks below) a reduction loop or a buffer shared across
            iterations."""
    if len(loops) < 2:
        return
    found = [sch.find_loop(lp, "reorder") for lp in loops]
    names = ", ".join(f.var.name for f, _ in found)
    if len({id(f) for f, _ in found}) != len(found):
        raise ScheduleError(f"reorder of loops [{names}]: a loop is given twice")
    # the outermost of them: the one with the shortest path
    outer = min(found, key=lambda fp: len(fp[1]))[0]
    chain = [outer]
    s = outer.body
    want = {id(f) for f, _ in found}
    while len([c for c in chain if id(c) in want]) < len(found):
        if not isinstance(s, For):
            missing = [f.var.name for f, _ in found if id(f) not in {id(c) for c in chain}]
            raise ScheduleError(f"reorder of loops [{names}]: loops {missing} are not in the "
                                f"perfectly nested chain below {outer.var.name} (a statement "
                                f"other than a single loop sits between them, or they are not "
                                f"nested)")
        chain.append(s)
        s = s.body
    innermost_body = chain[-1].body
    if len(blocks_in(innermost_body)) > 1:
        # several blocks: only data-parallel loops whose iterations share no buffer commute
        for c in chain:
            if id(c) not in want:
                continue
            for b in blocks_in(innermost_body):
                for iv, bind in zip(b.iter_vars, b.bindings):
                    if iv.kind == "reduce" and id(c.var) in loop_vars_used(bind):
                        raise ScheduleError(f"reorder of loops [{names}]: the loops hold more "
                                            f"than one block and loop {c.var.name} drives "
                                            f"reduction iterator {iv.var.name} of block "
                                            f"{b.name!r}")
        try:
            _check_private(chain[-1], f"reorder of loops [{names}]")
        except ScheduleError as e:
            raise ScheduleError(f"{e} (the loops hold more than one block)") from None
    for c in chain:
        if c.kind != "serial" and id(c) in want:
            raise ScheduleError(f"reorder of loops [{names}]: loop {c.var.name} is {c.kind}")
    slots = [k for k, c in enumerate(chain) if id(c) in want]
    order = [f for f, _ in found]
    new_chain = list(chain)
    for k, f in zip(slots, order):
        new_chain[k] = f
    body = innermost_body
    for c in reversed(new_chain):
        body = For(c.var, c.extent, body, c.kind, dict(c.annotations))
    sch.body = replace_node(sch.body, outer, body)


def annotate_kind(sch, loop, kind: str) -> None:
    """Implementation of ``Schedule.parallel``/``vectorize``/``unroll``: mark ``loop`` as
    ``kind`` (``"parallel"``, ``"vectorized"`` or ``"unrolled"``) on ``sch``.

    Raises:
        ScheduleError: the loop is not serial; for parallel/vectorized, it drives a reduction
            iterator or blocks in it share a buffer allocated outside; parallel nested in or
            around another parallel (or vectorized) loop; vectorized around a parallel or
            vectorized loop."""
    prim = {"parallel": "parallel", "vectorized": "vectorize", "unrolled": "unroll"}[kind]
    f, path = sch.find_loop(loop, prim)
    where = f"{prim} of loop {f.var.name}"
    if f.kind != "serial":
        raise ScheduleError(f"{where}: the loop is already {f.kind}")
    if kind in ("parallel", "vectorized"):
        check_independent(f, where)
    if kind == "parallel":
        for s in path[:-1]:
            if isinstance(s, For) and s.kind in ("parallel", "vectorized"):
                raise ScheduleError(f"{where}: it is nested in {s.kind} loop {s.var.name}")
        for s in walk_stmt(f.body):
            if isinstance(s, For) and s.kind == "parallel":
                raise ScheduleError(f"{where}: it contains parallel loop {s.var.name}")
    if kind == "vectorized":
        for s in walk_stmt(f.body):
            if isinstance(s, For) and s.kind in ("parallel", "vectorized"):
                raise ScheduleError(f"{where}: it contains {s.kind} loop {s.var.name}")
    new = For(f.var, f.extent, f.body, kind, dict(f.annotations))
    sch.body = replace_node(sch.body, f, new)


def check_independent(f: For, where: str, hint: str = "") -> None:
    """Refuse (``ScheduleError`` starting with ``where``) to run ``f``'s iterations
    concurrently when its variable drives a reduction iterator of a block below, or blocks
    below communicate through a buffer allocated outside it."""
    for b in blocks_in(f.body):
        for iv, bind in zip(b.iter_vars, b.bindings):
            if iv.kind == "reduce" and id(f.var) in loop_vars_used(bind):
                raise ScheduleError(f"{where}: the loop variable is bound to reduction "
                                    f"iterator {iv.var.name} of block {b.name!r}; its "
                                    f"iterations are not independent{hint}")
    _check_private(f, where)


def _check_private(f: For, where: str) -> None:
    """Blocks in ``f`` that communicate through a buffer must do so through a buffer allocated
    inside the loop (else iterations would race on it)."""
    blocks = blocks_in(f.body)
    if len(blocks) < 2:
        return
    local = {id(s.buffer) for s in walk_stmt(f.body) if isinstance(s, Allocate)}
    from .analysis import block_reads, block_writes
    written = {}
    for b in blocks:
        for buf in block_writes(b):
            written.setdefault(id(buf), (b, buf))
    for b in blocks:
        for buf in block_reads(b):
            if id(buf) in written and id(buf) not in local and written[id(buf)][0] is not b:
                raise ScheduleError(f"{where}: block {b.name!r} reads {buf.name}, written by "
                                    f"block {written[id(buf)][0].name!r} in the same loop but "
                                    f"allocated outside it; iterations could race (compute_at "
                                    f"the producer so the buffer becomes private)")


__all__ = ["split", "fuse", "reorder", "annotate_kind"]
