"""GPU default schedules (rules of the ``webgpu`` and ``cuda`` targets).

``gpu_fallback_rule`` schedules any kernel: in every top-level loop nest the leading loops that
are spatial for all its blocks are fused, split by the block size and bound to ``blockIdx.x`` /
``threadIdx.x``; reductions stay serial in each thread. For an injective kernel this is the
coalesced schedule: neighbouring threads compute neighbouring elements of the row-major output,
so their stores (and the loads of same-shaped inputs) touch neighbouring addresses. A nest with
no spatial loop (a full reduction to a scalar) runs in one thread.

``gpu_row_reduction_rule`` (softmax, layer norm, ``reduce_*``, pooling over whole rows): every
nest that is spatial loops around reduction loops around one reduction block gets one GPU block
per output element (the fused spatial loops bound to ``blockIdx.x``) whose threads reduce the
row cooperatively (``Schedule.cross_thread_reduce``: strided partials in registers, a shared-
memory tree); the other nests get the fallback's binding. It applies when some nest reduces at
least ``MIN_COOPERATIVE`` elements per output.
"""

from __future__ import annotations

from ....errors import ScheduleError
from ....target import Target
from ...stmt import For, PrimFunc
from ..schedule import LoopRV, Schedule
from .generic import _spatial_for_all, _top_nests

DEFAULT_BLOCK = 256  # threads per block, capped by the target's max_threads_per_block


def _spatial_chain(nest: For) -> list[For]:
    chain, s = [], nest
    while isinstance(s, For) and s.kind == "serial" and _spatial_for_all(s):
        chain.append(s)
        s = s.body
    return chain


def bind_spatial(sch: Schedule, nest: For, block: int) -> bool:
    """Fuse the leading spatial loops of ``nest``, split by ``block`` threads and bind
    ``blockIdx.x`` / ``threadIdx.x``; fewer loops are tried when fusing all is refused. Returns
    whether anything was bound."""
    chain = _spatial_chain(nest)
    while chain:
        try:
            rvs = [LoopRV(lp.var) for lp in chain]
            fused = sch.fuse(*rvs) if len(rvs) > 1 else rvs[0]
            f, _ = sch.find_loop(fused, "bind")
            threads = min(block, f.extent)
            bx, tx = sch.split(fused, [None, threads])
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")
            return True
        except ScheduleError:
            chain = chain[:-1]
    return False


MIN_COOPERATIVE = 32  # reduction length per output from which threads cooperate


def _reduction_nest(nest: For):
    """``(spatial loops, reduce loops)`` when ``nest`` is a perfect chain of spatial loops then
    reduce loops around one reduction block, else ``None``."""
    from ...stmt import Block
    chain, s = [], nest
    while isinstance(s, For) and s.kind == "serial":
        chain.append(s)
        s = s.body
    if not isinstance(s, Block) or s.init is None or s.predicate is not None:
        return None
    spatial = _spatial_chain(nest)
    reduce = chain[len(spatial):]
    if not reduce or any(_spatial_for_all(lp) for lp in reduce):
        return None
    return spatial, reduce


def gpu_row_reduction_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """One block per output element, its threads reducing cooperatively (see the module doc);
    ``None`` when no nest reduces ``MIN_COOPERATIVE`` elements or more per output."""
    sch = Schedule(func)
    cap = min(DEFAULT_BLOCK, target.max_threads_per_block)
    done = False
    for nest in _top_nests(sch.body):
        rn = _reduction_nest(nest)
        n = 1
        for lp in (rn[1] if rn else []):
            n *= lp.extent
        if rn is None or n < MIN_COOPERATIVE:
            bind_spatial(sch, nest, cap)
            continue
        spatial, reduce = rn
        rv = [LoopRV(lp.var) for lp in reduce]
        k = sch.fuse(*rv) if len(rv) > 1 else rv[0]
        if spatial:
            sv = [LoopRV(lp.var) for lp in spatial]
            sch.bind(sch.fuse(*sv) if len(sv) > 1 else sv[0], "blockIdx.x")
        threads = 2
        while threads < min(n, cap):
            threads *= 2
        threads = min(threads, 1 << (cap.bit_length() - 1))
        sch.cross_thread_reduce(k, threads)
        done = True
    return sch if done else None


def gpu_fallback_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """Every nest's spatial loops bound to blocks and threads (see the module doc); applies to
    every kernel."""
    sch = Schedule(func)
    block = min(DEFAULT_BLOCK, target.max_threads_per_block)
    for nest in _top_nests(sch.body):
        bind_spatial(sch, nest, block)
    return sch


__all__ = ["bind_spatial", "gpu_fallback_rule", "gpu_row_reduction_rule"]
