"""The Winograd transform rule: the input and output transforms of a Winograd convolution
(``ember.ops.winograd``; the batched product between them is the packed-GEMM rule's).

Both transforms compute one tile position ``t`` (input) or one output pixel of a tile
(output) per iteration as a select chain over the position; this rule puts the tile loops
outside the channel loop and unrolls them, so the code generator expands them
(``ember.tir.transform.expand_unrolled``) into straight-line code per position, each a
vectorized loop over the channels (NHWC: contiguous):

- input ``V[t, p, c]``: loops ``p`` (tiles, parallel) / ``t`` (unrolled) / ``c`` (vectorized);
- output ``y[n, h, w, k]`` with its fused epilogue: ``h`` and ``w`` split by the tile size,
  loops ``n, h // m, w // m`` (fused, parallel) / ``h % m``, ``w % m`` (unrolled) / ``k``
  (vectorized); a partial last tile is guarded by a predicate hoisted out of the ``k`` loop.
"""

from __future__ import annotations

from ....target import Target
from ...stmt import PrimFunc
from ..analysis import block_reads, blocks_in
from ..schedule import Schedule

INPUT_OP = "nn.winograd_input"
OUTPUT_OP = "nn.winograd_output"


def _ops(func: PrimFunc) -> list:
    return list(func.attrs.get("ops") or [func.attrs.get("op")])


def _channel_split(sch: Schedule, loop, lanes: int):
    """``(outer, vector)`` loops of the channel loop split by ``lanes``, or ``(None, loop)``
    when its extent is not a multiple of ``lanes`` (or is one vector)."""
    extent = sch.find_loop(loop, "winograd rule")[0].extent
    if not isinstance(extent, int) or extent % lanes or extent == lanes:
        return None, loop
    return tuple(sch.split(loop, [None, lanes]))


def winograd_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """Schedule a Winograd input or output transform kernel (see the module doc); ``None``
    for any other kernel."""
    ops = _ops(func)
    blocks = blocks_in(func.body)
    if len(blocks) != 1:
        return None
    blk = blocks[0]
    if ops == [INPUT_OP]:
        sch = Schedule(func)
        lt, lp, lc = sch.get_loops(blk.name)
        co, ci = _channel_split(sch, lc, target.vector_lanes)
        if co is not None:
            # every position of one channel vector in one loop body: the C compiler shares
            # the guarded loads and the separable rows between positions
            sch.reorder(lp, co, lt, ci)
        else:
            sch.reorder(lp, lt, ci)
        sch.unroll(lt)
        sch.vectorize(ci)
        sch.parallel(lp)
        return sch
    if ops and ops[0] == OUTPUT_OP:
        src = [b for b in block_reads(blk) if len(b.shape) == 3 and b.shape[-1]
               == blk.iter_vars[-1].extent]
        if not src:
            return None
        n = round(src[0].shape[0] ** 0.5)
        m = n - 2
        sch = Schedule(func)
        loops = sch.get_loops(blk.name)
        if len(loops) not in (3, 4) or any(
                lp.extent == 1 for lp in (sch.find_loop(x, "winograd rule")[0] for x in loops)):
            return None
        ln = loops[0] if len(loops) == 4 else None  # a batch of 1 has no loop
        lh, lw, lk = loops[-3:]
        ho, hi = sch.split(lh, [None, m])
        wo, wi = sch.split(lw, [None, m])
        outer = ([ln] if ln is not None else []) + [ho, wo]
        ko, ki = _channel_split(sch, lk, target.vector_lanes)
        # one channel vector's m x m outputs in one loop body: the separable rows are shared
        sch.reorder(*outer, *([ko] if ko is not None else []), hi, wi, ki)
        par = sch.fuse(*outer)
        sch.unroll(hi)
        sch.unroll(wi)
        sch.vectorize(ki)
        sch.parallel(par)
        return sch
    return None


__all__ = ["winograd_rule"]
