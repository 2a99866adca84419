"""The depthwise-convolution rule: NHWC depthwise 2-D convolution (channel multiplier 1, any
stride, dilation and zero padding) as ``dwconv`` register blocks -- and grouped convolutions
with few channels per group (ResNeXt's 32 x 4d: ``cg`` = 2, 4, 8 input = output channels per
group, ``cg`` below the vector width and dividing it) as ``gconv`` blocks, the same kernel with
``cg`` rotations of accumulators.

A kernel qualifies when its one reduction block is ``C[n, oh, ow, c] += X'[n, h, w, c] *
W[c, 0, r, s]`` -- both operands move along the output channels -- with ``X'`` the input image or
its materialized zero padding (the ``pad`` block of a channels-last ``nn.conv``). Then:

- the ``pad`` block is inlined (``compute_inline``): no padded copy of the image is written; the
  micro-kernel reads the image and skips taps in the padding;
- the weights are packed tap-major with channels contiguous, ``[1, kh, kw, C]``
  (``transform_layout``; the driver packs them once at compile time);
- the output's ``ow`` and ``c`` dims are split into ``wr`` pixels x ``nr`` channels (the register
  block, ``choose_dw_tile``); the outer loops ``n, oh, ow // wr, c // nr`` are fused and run in
  parallel; the reduction is computed per block (``compute_at``; its buffer becomes a ``wr x nr``
  tile in L1) and tensorized with the ``dwconv`` micro-kernel (taps unrolled, accumulators in
  registers); the fused epilogue (bias, folded batch norm, clip, residual add) reads the tile and
  is vectorized over the channels.

A grouped convolution differs in three places: the weights ``[C, cg, kh, kw]`` are packed per
channel tile and rotated within the groups, ``[C / nr, kh, kw, t, nr]`` with ``t = (k - o mod
cg) mod cg`` (``microkernel_dwconv``'s ``gconv``: the inner loop is then lane-wise FMAs, one
input vector feeding ``cg`` of them, and the rotations are summed back with one permute each
after the taps); the tile's channel loop is split into its groups x ``cg`` (the loops the
``gconv`` form of ``tensorize_dwconv`` expects); and the channel tiles are the outermost of the
fused parallel loop, so one tile's weight panel stays in L1 while the pixels stream past
(``choose_group_tile``: ``wr x nv x cg`` accumulators). Before this, such convolutions were one
GEMM per group with ``nr = cg`` lanes of 16 in use (ResNeXt-26's 56 x 56 layers: 1.3 ms against
0.16 ms, one thread). Groups of 3, or of 16 and more channels stay with the GEMM rule.
"""

from __future__ import annotations

from ....target import Target
from ...stmt import PrimFunc
from ..analysis import block_reads, block_writes, blocks_in
from ..layout import IndexMap
from ..schedule import Schedule
from ..tensorize import ISAS, MAX_ACCUMULATORS
from .gemm import REGISTERS, _loop_of, _spatial_loops, analyze
from .generic import finish_generic

MAX_WR = 16  # output pixels per register block


def choose_dw_tile(ow: int, c: int, lanes: int, max_acc: int) -> tuple[int, int]:
    """``(wr, nr)``: ``wr`` divides ``ow`` and ``nr`` divides ``c``; the ``wr x ceil(nr /
    lanes)`` accumulators plus one vector per channel group of weights and two loads fit the
    register file; maximizes lane use x accumulators (latency hiding, up to 24), then ``wr``
    (fewer calls, more reuse of input vectors between neighbouring taps)."""
    regs = REGISTERS.get(lanes, 16)
    cap = min(max_acc, regs * 3 // 4)
    best, best_score = (1, 1), -1.0
    for nr in (d for d in range(1, min(c, 4 * lanes) + 1) if c % d == 0):
        nv = -(-nr // lanes)
        lane_eff = nr / (nv * lanes)
        for wr in (d for d in range(1, min(ow, MAX_WR) + 1) if ow % d == 0):
            acc = wr * nv
            if acc > cap or acc + nv + 2 > regs:
                continue
            score = lane_eff * min(acc, cap) / cap + 0.001 * wr + 0.0001 * nr
            if score > best_score:
                best, best_score = (wr, nr), score
    return best


def choose_group_tile(ow: int, c: int, cg: int, lanes: int, max_acc: int) -> tuple[int, int]:
    """``(wr, nr)`` of a grouped block (``cg`` channels per group, ``cg`` rotations of
    accumulators per pixel and vector: ``microkernel_dwconv``'s ``gconv``): ``wr`` divides
    ``ow``, ``nr`` divides ``c`` and is a multiple of ``cg``; ``wr x nv x cg`` accumulators
    plus ``nv x cg`` weight vectors and two loads fit the register file; maximizes lane use x
    accumulators (up to 24), then ``wr``."""
    regs = REGISTERS.get(lanes, 16)
    cap = min(max_acc, regs * 3 // 4)
    best, best_score = (1, cg), -1.0
    for nr in (d for d in range(cg, min(c, 4 * lanes) + 1, cg) if c % d == 0):
        nv = -(-nr // lanes)
        lane_eff = nr / (nv * lanes)
        for wr in (d for d in range(1, min(ow, MAX_WR) + 1) if ow % d == 0):
            acc = wr * nv * cg
            if acc > cap or acc + nv * cg + 2 > regs:
                continue
            score = lane_eff * min(acc, cap) / cap + 0.001 * wr + 0.0001 * nr
            if score > best_score:
                best, best_score = (wr, nr), score
    return best


def _strided(g, ow: int) -> bool:
    """Whether the convolution's input is wider than a stride-1 window needs: image (or its
    padded copy) width above ``ow + kw - 1`` (a stride above 1, or a dilation)."""
    a, b = g["A"].src.shape, g["B"].src.shape
    if not (isinstance(a[2], int) and isinstance(b[3], int)):
        return True
    return a[2] > ow + b[3] - 1


def _depthwise_groups(func: PrimFunc, g, lanes: int) -> int | None:
    """Channels per group ``cg`` when ``func`` is a depthwise (``cg = 1``) or grouped
    convolution this rule takes: rank-4 NHWC output, the weights a constant ``(C, cg, kh, kw)``
    parameter, one reduction, as many input as output channels; grouped: ``cg`` output
    channels per group too, ``cg`` below the vector width and dividing it (else ``None``)."""
    if g is None or len(g["sp"]) != 4:
        return None
    A, B = g["A"], g["B"]
    consts = func.attrs.get("constant_params")
    pidx = {id(p): k for k, p in enumerate(func.params)}
    if consts is None or pidx.get(id(B.src)) not in consts:
        return None
    if len(B.src.shape) != 4 or len(A.src.shape) != 4:
        return None
    if not (B.src.shape[0] == g["n"].extent == A.src.shape[3]):
        return None
    if g["a_vec"] and B.src.shape[1] == 1:
        return 1
    cg = B.src.shape[1]
    if g["group_n"] != cg or not 1 < cg < lanes or lanes % cg:
        return None
    return cg


def depthwise_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """Depthwise convolution as ``dwconv`` register blocks, a grouped one with few channels per
    group as ``gconv`` blocks (see the module doc); ``None`` for any other kernel."""
    g = analyze(func)
    if target.isa not in ISAS:
        return None
    lanes = ISAS[target.isa]
    cg = _depthwise_groups(func, g, lanes)
    if cg is None or g["bf16"]:
        return None  # (bf16 operands: the dwconv kernels are float32 only)
    R, n_iv = g["R"], g["n"]
    ow_iv = g["sp"][2]
    if cg == 1:
        wr, nr = choose_dw_tile(ow_iv.extent, n_iv.extent, lanes, MAX_ACCUMULATORS[target.isa])
    else:
        wr, nr = choose_group_tile(ow_iv.extent, n_iv.extent, cg, lanes,
                                   MAX_ACCUMULATORS[target.isa])
    sch = Schedule(func)
    reads = block_reads(R)
    widx = [id(b) for b in reads].index(id(g["B"].src))
    if cg == 1:  # weights [C, 1, kh, kw] -> [1, kh, kw, C]: one tap's channels contiguous
        imap = IndexMap.from_func(4, lambda c, z, r, s: (z, r, s, c))
    else:  # [C, cg, kh, kw] -> [C / nr, kh, kw, cg, nr]: per channel tile a contiguous panel,
        # rotated within the groups (microkernel_dwconv); a tile's weights at a stride of C
        # floats fell into a few L1 sets (cg = 8: 5x slower)
        imap = IndexMap.from_func(4, lambda o, k, r, s: (
            o // nr, r, s, (k + cg - o % cg) % cg, (o % nr) // cg * cg + k))
    sch.transform_layout(R.name, ("read", widx), imap)
    # the zero padding is read through a guard instead of a padded copy
    A = g["A"].src
    producers = [b.name for b in blocks_in(sch.body) if any(w is A for w in block_writes(b))]
    if producers:
        if len(producers) != 1:
            return None
        sch.compute_inline(producers[0])
    epi = g["epi"].name if g["epi"] is not None else sch.cache_write(R.name, 0, "local")
    sp = _spatial_loops(sch, epi, g)
    if sp is None:
        return None
    outer = [x for x in (sp[0], sp[1]) if x is not None]
    inner = []
    for lp, factor in ((sp[2], wr), (sp[3], nr)):  # (a unit ow or c dim has no loop)
        if lp is not None:
            o, i = sch.split(lp, [None, factor])
            outer.append(o)
            inner.append(i)
    if not outer:
        return None
    if cg > 1 and sp[3] is not None and _strided(g, ow_iv.extent):
        # grouped and strided: channel tiles outermost, so one tile's weight panel (9 x cg x
        # nr floats) stays in L1 while the image's pixels stream past it (a block reads each
        # weight vector for only wr FMAs). At stride 1 the channel tiles stay innermost (as
        # depthwise): consecutive blocks read the same input pixels, so the image streams
        # once through the cache and the channel tiles' panels (18-73 KB) cycle in L1/L2
        # (ResNeXt-26's stride-1 layers 25-33 % faster in the model, its stride-2 one 10-20 %
        # slower that way: docs/performance.md)
        outer = [outer[-1]] + outer[:-1]
    sch.reorder(*outer, *inner)
    par = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.compute_at(R.name, par)
    lw = _loop_of(sch, R.name, ow_iv)
    lc = _loop_of(sch, R.name, n_iv)
    taps = [x for x in (_loop_of(sch, R.name, iv) for iv in g["rd"]) if x is not None]
    lanes_loops = [lc] if lc is not None else []
    if cg > 1 and lc is not None:  # the block's groups x the channels inside a group
        lanes_loops = list(sch.split(lc, [None, cg])) if nr > cg else [lc]
    order = taps + [x for x in [lw] + lanes_loops if x is not None]
    if not order:
        return None
    if len(order) > 1:
        sch.reorder(*order)
    sch.tensorize(order[0], f"dwconv.{target.isa}.f32")
    if sp[3] is not None:
        sch.vectorize(sch.get_loops(epi)[-1])
    sch.parallel(par)
    finish_generic(sch, target, skip={R.name, epi})
    return sch
