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


def _private_outside(body, nest: For) -> set:
    """Ids of the ``local``/``shared`` buffers allocated around ``nest`` at the top level of
    ``body``: statements after ``nest`` in the same kernel may read them."""
    from ...stmt import Allocate, Seq
    out: set = set()

    def visit(s, around):
        if s is nest:
            out.update(around)
        elif isinstance(s, Seq):
            for x in s.stmts:
                visit(x, around)
        elif isinstance(s, Allocate):
            visit(s.body, around | ({id(s.buffer)} if s.buffer.scope != "global" else set()))
    visit(body, set())
    return out


def _result_private(body, nest: For) -> bool:
    """Whether the reduction block of ``nest`` writes a ``local``/``shared`` buffer allocated
    outside it. Its consumer then sits in the same kernel outside the nest's ``threadIdx``
    loops, i.e. runs in every thread of the block, and a cooperative reduction leaves the
    result in thread 0's registers only (the other threads would store what their own,
    unwritten copy holds). Such a nest keeps the fallback's binding."""
    from ..analysis import blocks_in
    private = _private_outside(body, nest)
    return any(id(st.buffer) in private for b in blocks_in(nest) if b.init is not None
               for st in _stores(b))


def _stores(block):
    from ...arith import walk_stmt
    from ...stmt import Store
    return [x for x in walk_stmt(block.body) if isinstance(x, Store)]


def gpu_row_reduction_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """One block per output element, its threads reducing cooperatively (see the module doc);
    ``None`` when no nest reduces ``MIN_COOPERATIVE`` elements or more per output. A nest whose
    result stays in a private buffer read after it in the same kernel (a full reduction with
    an epilogue: ``mean`` over every axis, layer norm over all axes) is not made cooperative
    (``_result_private``)."""
    sch = Schedule(func)
    cap = min(DEFAULT_BLOCK, target.max_threads_per_block)
    done = False
    for nest in _top_nests(sch.body):
        rn = _reduction_nest(nest)
        if rn is not None and _result_private(sch.body, nest):
            rn = None
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


GEMM_MIN_OUTPUTS = 256  # M * N from which a GEMM-like nest is tiled (smaller: the fallback)
GEMM_MIN_K = 8          # reduction length from which it is tiled


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def gemm_tiles(M: int, N: int, K: int, target: Target) -> tuple:
    """``(tm, tn, tk, rm, rn)`` for a GEMM of ``M x N`` outputs over ``K``: up to 64 x 64
    outputs per block in 4 x 4 register tiles (256 threads), 16-deep shared tiles, shrunk to
    the target's ``max_threads_per_block`` and ``max_shared_memory_per_block``; small sides get
    smaller register tiles so that a block keeps at least 64 threads where it can."""
    tm, tn = min(64, _pow2_at_least(M)), min(64, _pow2_at_least(N))
    tk = min(16, K)
    rm, rn = min(4, tm), min(4, tn)

    def threads():
        return (tm // rm) * (tn // rn)
    while threads() < 64 and (rm > 1 or rn > 1):
        if rm >= rn:
            rm //= 2
        else:
            rn //= 2
    while threads() > target.max_threads_per_block or \
            4 * tk * (tm + tn) > target.max_shared_memory_per_block:
        if tm >= tn and tm > rm:
            tm //= 2
        elif tn > rn:
            tn //= 2
        elif tk > 1:
            tk //= 2
        else:
            break
    return tm, tn, tk, rm, rn


def gpu_gemm_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """GEMM-like nests (matmul, batched matmul, dense, convolution as implicit GEMM; see
    ``ember.tir.schedule.gpu_tile``) of at least ``GEMM_MIN_OUTPUTS`` outputs and
    ``GEMM_MIN_K`` reduction steps run on shared-memory and register tiles
    (``Schedule.tile_gemm`` with ``gemm_tiles``); the kernel's other nests get the fallback's
    binding. ``None`` when no nest is tiled."""
    from ..analysis import blocks_in
    from ..gpu_tile import _gemm_parts, _prod
    sch = Schedule(func)
    cap = min(DEFAULT_BLOCK, target.max_threads_per_block)
    done = False
    for nest in _top_nests(sch.body):
        red = [b for b in blocks_in(nest) if b.init is not None]
        s = red[0] if len(red) == 1 else None
        tiled = False
        if s is not None:
            try:
                _, _, ms, ns, _, red, _, _ = _gemm_parts(s, "gpu_gemm_rule")
                M, N, K = _prod(ms), _prod(ns), _prod(red)
                if M * N >= GEMM_MIN_OUTPUTS and K >= GEMM_MIN_K:
                    sch.tile_gemm(s.name, *gemm_tiles(M, N, K, target))
                    tiled = done = True
            except ScheduleError:
                pass
        if not tiled:
            bind_spatial(sch, nest, cap)
    return sch if done else None


def gpu_fallback_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """Every nest's spatial loops bound to blocks and threads (see the module doc); applies to
    every kernel."""
    sch = Schedule(func)
    block = min(DEFAULT_BLOCK, target.max_threads_per_block)
    for nest in _top_nests(sch.body):
        bind_spatial(sch, nest, block)
    return sch


__all__ = ["bind_spatial", "gemm_tiles", "gpu_fallback_rule", "gpu_gemm_rule", "gpu_row_reduction_rule"]
