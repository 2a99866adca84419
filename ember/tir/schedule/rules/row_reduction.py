"""The row-reduction rule: softmax, log-softmax, layer norm and any kernel of the form "reduce
each row over its trailing dims, then write an elementwise function of the row and those
reductions" (``y[r, :] = f(x[r, :], red1[r], red2[r], ...)``), possibly with materialized
elementwise row stages in between (softmax's ``exp(x - max)``, summed and then scaled).

Without it each reduction and the output are separate parallel loops over the whole tensor (one
thread-pool dispatch and one pass over memory each, the reductions through a heap workspace).
Here the output's row loops (the dims the reductions keep) are fused and run in parallel, and
every reduction (and row stage) is computed per row (``compute_at``; its result becomes a
local scalar, a row stage a row buffer on the stack) just before the row is written, so a row is read from L1 by the later passes; the output's innermost
loop is vectorized (the reductions' inner loops get vector partial sums from the code
generator).
"""

from __future__ import annotations

from ....target import Target
from ...stmt import PrimFunc
from ..analysis import block_reads, block_writes, blocks_in
from ..schedule import Schedule
from .generic import MIN_PARALLEL_WORK, finish_generic

MIN_ROW = 8  # elements per row below which the per-row reductions are not worth it


def _plan(func: PrimFunc):
    blocks = blocks_in(func.body)
    if len(blocks) < 2:
        return None
    out, pre = blocks[-1], blocks[:-1]
    if out.init is not None:
        return None
    outs = {id(p) for p in func.params}
    obuf = block_writes(out)
    if len(obuf) != 1 or id(obuf[0]) not in outs:
        return None
    oshape = tuple(obuf[0].shape)
    if any(len(block_writes(b)) != 1 or id(block_writes(b)[0]) in outs for b in pre):
        return None
    # reductions (one value per row) and elementwise row stages of the output's shape
    reds = [b for b in pre if b.init is not None]
    if not reds or any(tuple(block_writes(b)[0].shape) != oshape for b in pre
                       if b.init is None):
        return None
    rbufs = [block_writes(b) for b in reds]
    kshape = tuple(rbufs[0][0].shape)
    if any(tuple(w[0].shape) != kshape for w in rbufs) or len(kshape) != len(oshape):
        return None
    # reduced dims: trailing, extent 1 in the reductions' results
    k = 0
    while k < len(oshape) and kshape[len(oshape) - 1 - k] == 1:
        k += 1
    kept = len(oshape) - k
    if k == 0 or kshape[:kept] != oshape[:kept]:
        return None
    row = 1
    for d in oshape[kept:]:
        row *= d
    if isinstance(row, int) and row < MIN_ROW:  # a symbolic row: assumed long
        return None
    if not any(any(r is w[0] for r in block_reads(out)) for w in rbufs):
        return None
    return out, pre, kept


def row_reduction_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """Per-row reductions fused into the row loop of the output (see the module doc)."""
    p = _plan(func)
    if p is None:
        return None
    out, stages, kept = p
    sch = Schedule(func)
    blk, path = sch.find_block(out.name, "row reduction rule")
    loops = sch.get_loops(out.name)
    sp = [(iv, b) for iv, b in zip(blk.iter_vars, blk.bindings)]
    # the output's loops, one per non-unit dim, in dim order
    from ...expr import Var
    lmap = {id(lp.var): lp for lp in loops}
    per_dim = []
    for d, (iv, b) in enumerate(sp):
        if isinstance(b, Var) and id(b) in lmap:
            per_dim.append((d, lmap[id(b)]))
        elif iv.extent != 1:
            return None
    if [lp for _, lp in per_dim] != list(loops):
        return None
    rows = [lp for d, lp in per_dim if d < kept]
    inner = [lp for d, lp in per_dim if d >= kept]
    if not rows or not inner:
        return None
    par = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    for b in reversed(stages):
        sch.compute_at(b.name, par)
        if b.init is None:  # an elementwise row stage (softmax's exp): vectorize its row
            lp = sch.get_loops(b.name)[-1]
            ext = sch.find_loop(lp, "row reduction rule")[0].extent
            if not isinstance(ext, int) or ext >= target.vector_lanes:
                sch.vectorize(lp)  # a symbolic row: vector steps and a remainder at run time
    last = sch.get_loops(out.name)[-1]
    f, _ = sch.find_loop(last, "row reduction rule")
    if not isinstance(f.extent, int) or f.extent >= target.vector_lanes:
        sch.vectorize(last)
    total = 1
    for d in func.params[-1].shape:
        total *= d
    if not isinstance(total, int) or total >= MIN_PARALLEL_WORK:  # symbolic rows: parallel
        sch.parallel(par)
    finish_generic(sch, target, skip={out.name} | {b.name for b in stages})
    return sch
