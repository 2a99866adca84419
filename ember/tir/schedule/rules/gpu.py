"""GPU default schedules (rules of the ``webgpu`` and ``cuda`` targets).

``gpu_fallback_rule`` schedules any kernel: in every top-level loop nest the leading loops that
are spatial for all its blocks are fused, split by the block size and bound to ``blockIdx.x`` /
``threadIdx.x``; reductions stay serial in each thread. For an injective kernel this is the
coalesced schedule: neighbouring threads compute neighbouring elements of the row-major output,
so their stores (and the loads of same-shaped inputs) touch neighbouring addresses. A nest with
no spatial loop (a full reduction to a scalar) runs in one thread.
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


def gpu_fallback_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """Every nest's spatial loops bound to blocks and threads (see the module doc); applies to
    every kernel."""
    sch = Schedule(func)
    block = min(DEFAULT_BLOCK, target.max_threads_per_block)
    for nest in _top_nests(sch.body):
        bind_spatial(sch, nest, block)
    return sch


__all__ = ["bind_spatial", "gpu_fallback_rule"]
