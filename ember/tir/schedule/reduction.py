"""decompose_reduction: separate a reduction block's initialization from its update."""

from __future__ import annotations

from ...errors import ScheduleError
from ..arith import substitute, substitute_stmt
from ..expr import BinOp, IterVar, Var
from ..stmt import Block, For, Seq, Stmt
from .analysis import loop_vars_used, replace_node


def _conjuncts(e):
    if isinstance(e, BinOp) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def decompose_reduction(sch, block: str, loop) -> str:
    """Implementation of ``Schedule.decompose_reduction`` on ``sch`` (rewrites ``sch.body`` in
    place; ``Schedule.decompose_reduction`` records it and restores the function if this raises).
    Returns the name of the new init block (``<block>_init``).

    Raises:
        ScheduleError: the block has no init, ``loop`` does not enclose it, a loop above ``loop``
            runs a reduction iterator, or a loop drives both spatial and reduction iterators."""
    prim = "decompose_reduction"
    blk, bpath = sch.find_block(block, prim)
    f, _ = sch.find_loop(loop, prim)
    where = f"{prim} of block {block!r} at loop {f.var.name}"
    if blk.init is None:
        raise ScheduleError(f"{where}: the block has no init (it is not a reduction, or it was "
                            f"already decomposed)")
    if not any(s is f for s in bpath):
        raise ScheduleError(f"{where}: the loop does not enclose the block")
    red_used, sp_used = set(), set()
    for iv, b in zip(blk.iter_vars, blk.bindings):
        (red_used if iv.kind == "reduce" else sp_used).update(loop_vars_used(b))
    k = next(i for i, s in enumerate(bpath) if s is f)
    for s in bpath[:k]:
        if isinstance(s, For) and id(s.var) in red_used:
            raise ScheduleError(f"{where}: loop {s.var.name} above it runs over a reduction "
                                f"iterator; the init would run once per iteration of it "
                                f"(decompose at or above {s.var.name})")
    loops = [s for s in bpath[k:] if isinstance(s, For)]
    vmap, kept = {}, []
    for s in loops:
        if id(s.var) in red_used and id(s.var) in sp_used:
            raise ScheduleError(f"{where}: loop {s.var.name} drives both spatial and reduction "
                                f"iterators")
        if id(s.var) in red_used:
            continue
        nv = Var(s.var.name + "_init")
        vmap[s.var] = nv
        kept.append((nv, s.extent))
    red_ids = {id(s.var) for s in loops if id(s.var) in red_used}
    sp = [(iv, b) for iv, b in zip(blk.iter_vars, blk.bindings) if iv.kind != "reduce"]
    new_ivs = [IterVar(iv.extent, iv.var.name + "_init") for iv, _ in sp]
    ivmap = {iv.var: niv.var for (iv, _), niv in zip(sp, new_ivs)}
    binds = [substitute(b, vmap) for _, b in sp]
    pred = None
    if blk.predicate is not None:
        for c in _conjuncts(blk.predicate):
            if loop_vars_used(c) & red_ids:
                continue
            c = substitute(c, vmap)
            pred = c if pred is None else BinOp("and", pred, c)
    name = f"{blk.name}_init"
    init_blk = Block(name, new_ivs, binds, substitute_stmt(blk.init, ivmap), None, pred)
    s: Stmt = init_blk
    for nv, ext in reversed(kept):
        s = For(nv, ext, s)
    upd = Block(blk.name, blk.iter_vars, blk.bindings, blk.body, None, blk.predicate,
                dict(blk.annotations))
    from .analysis import check_in_scope
    check_in_scope(sch.body, s, bpath[:k], where)
    body = replace_node(sch.body, blk, upd)
    f2 = _find_loop(body, f.var)
    sch.body = replace_node(body, f2, Seq([s, f2]))
    return name


def _find_loop(root, var):
    from .analysis import find_path
    return find_path(root, lambda s: isinstance(s, For) and s.var is var)[-1]
