"""The channel-vectorized reduction rule: pooling (max, average, global) and any other reduction
whose output's last dim ``c`` is contiguous in everything it reads (NHWC layouts).

The reduction is computed per tile of ``c`` (``compute_at`` into the tile loop, so its result
lives in a small local buffer), its reduction loops are moved outside the lanes, its init is split
off (``decompose_reduction``) and the init, the update and the epilogue are vectorized over
``c``; the outer loops are fused and run in parallel. (Depthwise convolution takes the ``gemm``
rule's lane-aligned micro-kernel before this rule is tried.)
"""

from __future__ import annotations

from ....target import Target
from ...arith import collect
from ...expr import Load
from ...stmt import PrimFunc
from ..analysis import block_reads, blocks_in
from ..schedule import Schedule
from .gemm import _lane_stride, _loop_of, _spatial_loops
from .generic import finish_generic


# a bfloat16 reduction result keeps its running value in a float32 tile (``pooling_rule``);
# False: in the bf16 output itself (the A/B baseline)
BF16_FLOAT32_TILE = True


def _parts(func: PrimFunc):
    blocks = blocks_in(func.body)
    reds = [b for b in blocks if b.init is not None]
    if len(reds) != 1:
        return None
    R = reds[0]
    sp = [iv for iv in R.iter_vars if iv.kind == "spatial"]
    rd = [iv for iv in R.iter_vars if iv.kind == "reduce"]
    if not sp or not rd or R.predicate is not None:
        return None
    st = R.body
    from ...stmt import Store
    if not isinstance(st, Store) or len(st.indices) != len(sp) or not all(
            i is iv.var for i, iv in zip(st.indices, sp)):
        return None
    n_iv = sp[-1]
    for ld in collect(st.value, lambda x: isinstance(x, Load)):
        if ld.src is st.buffer:
            continue
        if _lane_stride(ld, n_iv) not in (0, 1):
            return None
    epi = [b for b in blocks if b is not R and any(r is st.buffer for r in block_reads(b))]
    return {"R": R, "n": n_iv, "sp": sp, "rd": rd, "epi": epi[0] if len(epi) == 1 else None}


def pooling_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """Channel-vectorized reductions (see the module doc)."""
    g = _parts(func)
    if g is None:
        return None
    R, n_iv = g["R"], g["n"]
    lanes = target.vector_lanes
    n = n_iv.extent
    if n < lanes:
        return None
    cands = [d for d in range(lanes, min(n, 4 * lanes) + 1, lanes) if n % d == 0]
    if not cands:  # no multiple of the lanes divides n: the widest dividing tile up to 4.5
        # vectors, whose remainder runs as narrower vector steps (136 channels: 68 = 64 + 4)
        cands = [d for d in range(lanes, min(n, 4 * lanes + lanes // 2) + 1) if n % d == 0]
    nt = max(cands) if cands else (n if n <= 4 * lanes else None)
    if nt is None:
        return None
    sch = Schedule(func)
    epi = g["epi"].name if g["epi"] is not None else None
    if epi is None and BF16_FLOAT32_TILE and R.body.buffer.dtype == "bfloat16":
        # a bfloat16 result (the bf16 max pool) keeps its running value in a float32 tile
        # (registers once vectorized), rounded once by the copy-out, instead of a round trip
        # through the bf16 output (a rounding and a widening) per reduction step; max of
        # bf16 values is a bf16 value, so the one rounding is exact and the result unchanged
        epi = sch.cache_write(R.name, 0, "local", "float32")
    out_block = epi if epi is not None else R.name
    sp_loops = _spatial_loops(sch, out_block, {"sp": g["sp"]})
    if sp_loops is None or sp_loops[-1] is None:
        return None
    outer = [x for x in sp_loops[:-1] if x is not None]
    if nt < n:
        no, ni = sch.split(sp_loops[-1], [None, nt])
        outer = outer + [no]
    par_loops = outer
    if not par_loops:
        return None
    par = sch.fuse(*par_loops) if len(par_loops) > 1 else par_loops[0]
    if epi is not None:
        sch.compute_at(R.name, par)
    sp_n = _loop_of(sch, R.name, n_iv)
    rd_loops = [x for x in (_loop_of(sch, R.name, iv) for iv in g["rd"]) if x is not None]
    if sp_n is None or not rd_loops:
        return None
    sch.reorder(*(rd_loops + [sp_n]))
    init = sch.decompose_reduction(R.name, rd_loops[0])
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sp_n)
    if epi is not None:
        sch.vectorize(sch.get_loops(epi)[-1])
    sch.parallel(par)
    finish_generic(sch, target, skip={R.name, init} | ({epi} if epi is not None else set()))
    return sch
