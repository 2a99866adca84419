"""The packed-GEMM rule: dense, matmul, batch matmul and convolution in NHWC (1x1 and KxK,
any stride, padding materialized by its own block) as a register-blocked micro-kernel.

A kernel qualifies when it has one reduction block ``C[.., m, n] += A[..] * B[..]`` whose output's
last dim ``n`` indexes ``B`` but not ``A``. Then:

- ``B`` is packed into panels ``[n // nr, <reduction dims>, n % nr]`` (``transform_layout``; the
  driver packs constant weights once at compile time); an activation ``B`` is used in place when
  it is contiguous along ``n``;
- the output's ``m`` (second-to-last) and ``n`` dims are split into ``mr x nr`` register tiles,
  the tile loops go inside, the outer loops (``n`` tiles first, so a ``B`` panel stays in cache
  while all rows stream past it) are fused and run in parallel;
- the reduction is computed per tile (``compute_at`` into the tile loop; its buffer becomes a
  ``mr x nr`` local tile) and tensorized with the ``gemm`` micro-kernel; the fused elementwise
  epilogue (bias, folded batch norm, activation, residual add) reads the tile and is vectorized.

A grouped convolution (``A`` reads ``n`` only as ``n // Mg``, ``Mg`` output channels per group:
``_group_size``) is one such GEMM per group: the ``n`` loop is split into ``group x Mg`` first,
the group loop joins the outer loops and the register tiles stay inside one group
(``_n_extent``; a masked lane tail where ``Mg`` does not divide the vector width). It is not
K-blocked. Groups of 2, 4 or 8 channels (in = out) reach the depthwise rule first, whose
``gconv`` kernel fills the vector with several groups (``rules/depthwise``).
"""

from __future__ import annotations

from ....errors import ScheduleError
from ....target import Target
from ...arith import linear_terms, flat_index, simplify
from ...expr import Var, is_static_extent
from ...stmt import Block, For, PrimFunc
from ..analysis import block_reads, blocks_in
from ..layout import IndexMap
from ..schedule import Schedule
from ..tensorize import ISAS, MAX_ACCUMULATORS, _match_update
from .generic import finish_generic

REGISTERS = {16: 32, 8: 16, 4: 16}  # SIMD registers by lane count (AVX-512, AVX2, SSE)


def tile_candidates(m: int, n: int, lanes: int, max_acc: int) -> list[tuple[float, tuple]]:
    """Every legal ``(mr, nr)`` register block of an ``m x n`` output with its modelled FMA
    throughput score, in the order ``choose_tile`` considers them: ``mr`` divides ``m``, ``nr``
    divides ``n``; the ``mr x ceil(nr / lanes)`` accumulators, the ``B`` vectors and one
    broadcast fit the register file (no spills)."""
    out = []
    regs = REGISTERS.get(lanes, 16)
    ncands = [d for d in range(1, min(n, 4 * lanes) + 1) if n % d == 0]
    for nr in ncands:
        nv = -(-nr // lanes)
        lane_eff = nr / (nv * lanes)
        for mr in range(1, min(m, 28) + 1):
            if m % mr or mr * nv > max_acc or mr * nv + nv + 1 > regs:
                continue
            acc = mr * nv
            score = lane_eff * min(1.0, acc / 24.0) * acc / max(acc, mr + nv)
            score *= 1.0 + 0.01 * nr + 0.001 * mr  # tie-break: wider panels, fewer calls
            out.append((score, (mr, nr)))
    return out


MIN_FULL_LANE_ACC = 8  # 2 FMA ports x 4 cycles of latency: accumulators that keep both busy


def choose_tile(m: int, n: int, lanes: int, max_acc: int,
                max_mr: int | None = None) -> tuple[int, int] | None:
    """``(mr, nr)`` register block for an ``m x n`` output: of ``tile_candidates``, the one
    that maximizes modelled FMA throughput (lane use x latency hiding x load/FMA balance).
    Full-lane blocks (``nr`` a multiple of ``lanes``) with at least ``MIN_FULL_LANE_ACC``
    accumulators win over masked ones whatever their score: a masked tail vector costs a
    whole FMA slot plus masked loads and stores (MobileNetV2's 7x7 1x1 convolutions to 1280
    channels: the modelled-best 7 x 40 ran 0.50 ms, 7 x 32 0.38 ms, 1 thread). ``max_mr``: the
    largest ``mr`` considered (a symbolic row count: ``SYMBOLIC_MAX_MR``)."""
    cands = [c for c in tile_candidates(m, n, lanes, max_acc)
             if max_mr is None or c[1][0] <= max_mr]
    full = [c for c in cands if c[1][1] % lanes == 0
            and c[1][0] * (c[1][1] // lanes) >= MIN_FULL_LANE_ACC]
    best, best_score = None, 0.0
    for score, tile in full or cands:
        if score > best_score:
            best, best_score = tile, score
    return best


# a static row count whose best dividing register block is poor (197 tokens, prime: only 1-row
# blocks divide) takes a block whose ``mr`` need not divide it when that models at least this
# much faster; the last ``m % mr`` rows then run as one-row calls (``tensorize``'s row tail)
ROW_TAIL_GAIN = 1.25


def _tile_score(m: int, n: int, lanes: int, max_acc: int, tile: tuple) -> float:
    """``tile_candidates``' modelled throughput of ``tile`` on an ``m x n`` output (0 if it is
    not a candidate)."""
    return next((s for s, t in tile_candidates(m, n, lanes, max_acc) if t == tuple(tile)), 0.0)


def row_tail_tile(m: int, n: int, lanes: int, max_acc: int) -> tuple[int, int] | None:
    """``(mr, nr)`` for a static ``m x n`` output when a register block whose ``mr`` does not
    divide ``m`` (the last ``m % mr`` rows as one-row micro-kernel calls) models at least
    ``ROW_TAIL_GAIN`` times the throughput of ``choose_tile``'s dividing block, else ``None``.
    Each block considered is ``choose_tile``'s choice for rows up to some ``mr`` on a row
    count every ``mr`` divides, full-lane blocks only; its throughput is weighed over
    ``m // mr`` full blocks and the one-row tail. ViT's 197 tokens: 1 x 64 blocks (4 accumulators) -> 6 x 64 plus a
    5-row tail."""
    div = choose_tile(m, n, lanes, max_acc)
    if div is None:
        return None
    base = _tile_score(m, n, lanes, max_acc, div)
    best, best_score = None, base * ROW_TAIL_GAIN
    for cap in range(2, min(m, 28) + 1):
        t = choose_tile(SYMBOLIC_M_NOMINAL, n, lanes, max_acc, cap)
        if t is None or m % t[0] == 0 or t[1] % lanes:
            continue
        full = _tile_score(SYMBOLIC_M_NOMINAL, n, lanes, max_acc, t)
        one = _tile_score(SYMBOLIC_M_NOMINAL, n, lanes, max_acc, (1, t[1]))
        if not (full and one):
            continue
        rows = m // t[0] * t[0]
        eff = m / (rows / full + (m - rows) / one)
        if eff > best_score:
            best, best_score = t, eff
    return best


def _lane_stride(ld, iv) -> int | None:
    """Element stride of load ``ld`` along iter var ``iv`` (``None`` when not affine)."""
    lt = linear_terms(flat_index(ld.src, ld.indices))
    if lt is None:
        return None
    for atom, c in lt[0].values():
        if atom is iv.var:
            return c
    return 0


def _plain_ivs(indices, ivs) -> list | None:
    """The iter var of each index when every index is a distinct plain iter var."""
    out = []
    for i in indices:
        m = [iv for iv in ivs if iv.var is i]
        if not m:
            return None
        out.append(m[0])
    return out if len({id(x) for x in out}) == len(out) else None


def _group_size(ld, iv) -> int | None:
    """``g`` when load ``ld`` reads iter var ``iv`` only as ``iv // g`` (a grouped
    convolution's input channel ``(m // (M / group)) * (C / group) + rc``: the output channels
    of one group, ``g`` of them, share one slice of the input), else ``None``."""
    from ...arith import collect
    from ...expr import BinOp, Const
    divs = collect(ld, lambda x: isinstance(x, BinOp) and x.op == "floordiv"
                   and x.a is iv.var and isinstance(x.b, Const))
    sizes = {int(d.b.value) for d in divs}
    if len(sizes) != 1:
        return None
    size = sizes.pop()
    rest = [v for i in ld.indices for v in collect(
        _strip(i, divs), lambda x: x is iv.var)]
    return None if rest else size


def _strip(e, nodes):
    """``e`` with the sub-expressions ``nodes`` replaced by zero."""
    from ...arith import post_order
    from ...expr import Const
    ids = {id(n) for n in nodes}
    return post_order(e, lambda x: Const(0, x.dtype) if id(x) in ids else x)


def analyze(func: PrimFunc):
    """The GEMM structure of ``func`` or ``None``: a dict with the reduction block, its
    operands, the ``m``/``n`` iter vars and the epilogue block."""
    blocks = blocks_in(func.body)
    reds = [b for b in blocks if b.init is not None]
    if len(reds) != 1:
        return None
    R = reds[0]
    try:
        st, la, lb = _match_update(R, "gemm rule")
    except ScheduleError:
        return None
    if st.buffer.dtype != "float32":
        return None
    sp = [iv for iv in R.iter_vars if iv.kind == "spatial"]
    rd = [iv for iv in R.iter_vars if iv.kind == "reduce"]
    if not rd or len(st.indices) != len(sp) or not all(
            i is iv.var for i, iv in zip(st.indices, sp)):
        return None
    n_iv = sp[-1]

    def uses(ld, iv):
        from ...arith import collect
        return any(v is iv.var for i in ld.indices for v in collect(i, lambda x: x is iv.var))
    if uses(la, n_iv) and not uses(lb, n_iv):
        la, lb = lb, la
    if not uses(lb, n_iv):
        return None
    a_vec = False
    group_n = _group_size(la, n_iv) if uses(la, n_iv) else None
    if group_n is not None:
        if group_n < 2 or n_iv.extent % group_n or group_n == n_iv.extent:
            return None
    elif uses(la, n_iv):
        # both operands move along n (depthwise convolution): A must be lane-aligned (unit
        # stride along n); B is the constant operand when there is one
        consts = func.attrs.get("constant_params")
        pidx = {id(p): k for k, p in enumerate(func.params)}
        if consts is not None and pidx.get(id(la.src)) in consts \
                and pidx.get(id(lb.src)) not in consts:
            la, lb = lb, la
        if _lane_stride(la, n_iv) != 1:
            return None
        a_vec = True
    m_iv = sp[-2] if len(sp) >= 2 else None
    if m_iv is not None and not uses(la, m_iv):
        m_iv = None
    # reduction order: A's element stride, largest first (the contiguous one innermost)
    flat = flat_index(la.src, la.indices)
    lt = linear_terms(flat)
    coef = {}
    if lt is not None:
        for atom, c in lt[0].values():
            if isinstance(atom, Var):
                coef[id(atom)] = c
    rd_sorted = sorted(rd, key=lambda iv: -abs(coef.get(id(iv.var), 0)))
    others = [b for b in blocks if b is not R]
    epi = [b for b in others if any(r is st.buffer for r in block_reads(b))]
    consts = func.attrs.get("constant_params")
    b_const = any(p is lb.src for k, p in enumerate(func.params)
                  if consts is None or k in consts)
    bf16 = la.dtype == "bfloat16" and lb.dtype == "bfloat16"
    if not bf16 and (la.dtype != "float32" or lb.dtype != "float32"):
        return None
    return {"R": R, "C": st.buffer, "A": la, "B": lb, "n": n_iv, "m": m_iv, "sp": sp,
            "b_const": b_const, "bf16": bf16,
            "a_vec": a_vec, "group_n": group_n,
            "rd": rd_sorted, "epi": epi[0] if len(epi) == 1 else None, "others": others}


def gemm_rule(func: PrimFunc, target: Target, cfg: dict | None = None) -> Schedule | None:
    """Packed GEMM with a register-blocked micro-kernel (see the module doc).

    ``cfg`` overrides the rule's own decisions (the tuning knobs of ``gemm_knobs``; a missing
    key keeps the default decision, so ``cfg=None`` is the untuned schedule):

    - ``tile``: ``[mr, nr]`` register block (one of ``tile_candidates``);
    - ``order``: ``"panels"`` (B panels outer), ``"rows"`` (output rows outer) or
      ``"tiles"`` (row blocks outside the batch dims: see ``_default_order``);
    - ``kblock``: ``0`` = no reduction blocking, ``kc > 0`` = block the input channels by
      ``kc`` (the whole image's accumulators per channel tile; ``tile``/``order``/``fuse``
      then do not apply);
    - ``fuse``: how many of the innermost outer loops stay serial inside the parallel loop
      (``0`` = all fused into it; default: ``_default_serial``);
    - ``prefetch``: ``1`` = the micro-kernel also prefetches the ``B`` block of its next call
      into L2 (intrinsic option ``pfnext``: with ``kblock`` the next ``kc x nr`` weight slice,
      else the next panel), ``0`` = only its usual short-distance prefetch; default:
      ``_default_prefetch`` (which includes the panel-split 1x1 convolutions of
      ``PANEL_PREFETCH_NEXT``).

    Raises:
        ScheduleError: a ``cfg`` value that is not legal for this kernel.
    """
    cfg = cfg or {}
    g = analyze(func)
    if g is None or target.isa not in ISAS:
        return None
    if g["bf16"] and not bf16_gemm_ok(g, target):
        return None
    R, n_iv, m_iv = g["R"], g["n"], g["m"]
    lanes = ISAS[target.isa]
    m_sym = _symbolic_m(g)
    m_ext = _m_extent(g)
    n_sym = _symbolic_n(g)
    if n_sym and not _symbolic_n_ok(g):
        return None
    n_ext = SYMBOLIC_N_NOMINAL if n_sym else _n_extent(g)
    tile = _choose_tile(g, m_ext, n_ext, lanes, MAX_ACCUMULATORS[target.isa])
    if tile is None:
        return None
    tail_tile = None
    if g["m"] is not None and not m_sym and g["group_n"] is None \
            and (not _image_ivs(g) or len(g["rd"]) == 1):
        # plain and batched matmuls (tokens: one reduction loop); convolutions keep dividing
        # row blocks
        tail_tile = row_tail_tile(m_ext, n_ext, lanes, MAX_ACCUMULATORS[target.isa])
        if tail_tile is not None:
            tile = tail_tile
    mr, nr = tile
    if mr * nr < 16 and n_ext * m_ext < 64:
        return None  # too small to be worth a micro-kernel
    if cfg.get("tile") is not None:
        mr, nr = (int(x) for x in cfg["tile"])
        legal = [t for _, t in tile_candidates(m_ext, n_ext, lanes,
                                               MAX_ACCUMULATORS[target.isa])]
        if tail_tile is not None:
            legal.append(tail_tile)
        legal.append(tuple(tile))  # the default (a whole-group block: _whole_group_tile)
        if (mr, nr) not in legal:
            raise ScheduleError(f"gemm rule: register tile {[mr, nr]} is not legal for a "
                                f"{m_ext}x{n_ext} output (see tile_candidates)")
    kc = cfg.get("kblock")
    if g["group_n"] is not None or m_sym or n_sym:
        if kc is not None and int(kc) > 0:
            raise ScheduleError("gemm rule: a grouped convolution's or a symbolic row or "
                                "column count's reduction is not blocked")
        kc = 0
    if kc is not None and int(kc) > 0:
        kb = _kblock_plan(g, mr, nr, lanes, kc=int(kc), max_acc=MAX_ACCUMULATORS[target.isa])
        if kb is None:
            raise ScheduleError(f"gemm rule: cannot block the reduction by {kc} here")
    else:
        kb = (_kblock_plan(g, mr, nr, lanes, max_acc=MAX_ACCUMULATORS[target.isa])
              if kc is None else None)
    if kb is not None:
        mr, nr = kb[0], kb[1]
    sch = Schedule(func)
    consts = func.attrs.get("constant_params")
    params = {id(p) for k, p in enumerate(func.params) if consts is None or k in consts}
    B = g["B"]
    bivs = _plain_ivs(B.indices, R.iter_vars)
    if id(B.src) in params and bivs is not None:
        # pack B as [batch dims..., n // nr, reduction dims in loop order, n % nr]
        pos = {id(iv): d for d, iv in enumerate(bivs)}
        nd = pos[id(n_iv)]
        red_dims = [pos[id(iv)] for iv in g["rd"] if id(iv) in pos]
        rest = [d for d in range(len(bivs)) if d != nd and d not in red_dims]

        def fmap(*i):
            if g["bf16"]:  # K-pair-interleaved panels: [.., n // nr, .., k // 2, n % nr, k % 2]
                return tuple([i[d] for d in rest] + [i[nd] // nr]
                             + [i[d] for d in red_dims[:-1]] + [i[red_dims[-1]] // 2]
                             + [i[nd] % nr] + [i[red_dims[-1]] % 2])
            return tuple([i[d] for d in rest] + [i[nd] // nr] + [i[d] for d in red_dims]
                         + [i[nd] % nr])
        reads = block_reads(R)
        sch.transform_layout(R.name, ("read", [id(b) for b in reads].index(id(B.src))),
                             IndexMap.from_func(len(bivs), fmap))
    if kb is not None:
        return _kblocked(sch, g, target, mr, nr, kb[2], prefetch=_prefetch(cfg, g, True))
    # the output loops
    out_block = g["epi"].name if g["epi"] is not None else R.name
    sp_loops = _spatial_loops(sch, out_block, g)
    if sp_loops is None:
        return None
    if m_iv is not None:
        outer, lm, ln = sp_loops[:-2], sp_loops[-2], sp_loops[-1]
    else:
        outer, lm, ln = sp_loops[:-1], None, sp_loops[-1]
    outer = [x for x in outer if x is not None]
    if ln is None:
        return None
    if g["group_n"] is not None:
        # grouped: one loop over the groups, then each group's channels as an ordinary GEMM
        # whose A (the group's input-channel slice) no longer moves with the channel tile
        gq, ln = sch.split(ln, [None, g["group_n"]])
        outer = [gq] + outer
    no, ni = sch.split(ln, [None, nr])
    if lm is not None and mr > 1:
        mo, mi = sch.split(lm, [None, mr])
        order_kind = cfg.get("order") or _default_order(g)
        if order_kind == "rows":
            # all of B stays in L2: rows outer, so each A row block is read once (from L1
            # for every channel tile) instead of once per channel tile
            order = list(outer) + [mo, no, mi, ni]
        elif order_kind == "panels":
            # B panels outer: one panel stays in L2 while all rows stream past it
            order = [no] + list(outer) + [mo, mi, ni]
        elif order_kind == "tiles":
            # row blocks outermost, then the batch dims: each thread's range is a band of
            # rows of every batch element (see _default_order)
            order = [mo] + list(outer) + [no, mi, ni]
        else:
            raise ScheduleError(f"gemm rule: order {order_kind!r} is not 'rows', 'panels' "
                                f"or 'tiles'")
    else:
        mi, order_kind = None, None
        if lm is not None:
            outer = outer + [lm]
        order = [no] + list(outer) + [ni]
    sch.reorder(*order)
    fused_outer = [x for x in order[:-2 if mi is not None else -1]]
    if cfg.get("fuse") is not None:
        serial = int(cfg["fuse"])
    elif m_sym or n_sym:
        serial = _symbolic_serial(sch, fused_outer)
    else:
        serial = _default_serial(g, nr, order_kind if mi is not None else None,
                                 len(fused_outer))
    if not 0 <= serial < len(fused_outer):
        raise ScheduleError(f"gemm rule: cannot keep {serial} of the {len(fused_outer)} outer "
                            f"loops serial")
    head, tail = fused_outer[:len(fused_outer) - serial], fused_outer[len(fused_outer) - serial:]
    par = sch.fuse(*head) if len(head) > 1 else head[0]
    if g["epi"] is not None:
        sch.compute_at(R.name, tail[-1] if tail else par)
    sp_m = _loop_of(sch, R.name, m_iv) if m_iv is not None else None
    sp_n = _loop_of(sch, R.name, n_iv)
    rd_order = [x for x in (_loop_of(sch, R.name, iv) for iv in g["rd"]) if x is not None]
    if sp_n is None or not rd_order:
        return None
    sch.reorder(*(rd_order + ([sp_m] if sp_m is not None else []) + [sp_n]))
    if g["bf16"]:
        ro = _pair_split(sch, rd_order[-1])
        rd_order = rd_order[:-1] + [ro]
    panel_split = _panel_split_prefetch(g, mr if mi is not None else 1, serial)
    pfx = ".pfnext" if _prefetch(cfg, g, False, panel_split) else ""
    if mi is not None and is_static_extent(m_ext) and m_ext % mr > 1:
        pfx += f".tail{m_ext % mr}"  # the last rows as one call (tensorize's row tail)
    sch.tensorize(rd_order[0], _intrin(g, target) + pfx)
    if g["epi"] is not None:
        eloops = sch.get_loops(g["epi"].name)
        sch.vectorize(eloops[-1])
    sch.parallel(par)
    finish_generic(sch, target, skip={R.name} | ({g["epi"].name} if g["epi"] else set()))
    return sch


BF16_FEATURES = frozenset({"avx512f", "avx512bw", "avx512bf16"})


def bf16_gemm_ok(g, target: Target) -> bool:
    """True when the bf16 GEMM ``g`` (``analyze``: both operands bfloat16 loads read as
    float32) can run on the ``vdpbf16ps`` micro-kernel (``ember.codegen.microkernel_bf16``):
    the target has AVX512_BF16 (``BF16_FEATURES``), ``B`` is a constant weight the driver packs
    K-pair-interleaved, not grouped or depthwise, and ``A``'s innermost reduction dim is
    contiguous with an even extent (a pair is one 32-bit word)."""
    if target.isa != "avx512" or not BF16_FEATURES <= target.features:
        return False
    if g["a_vec"] or g["group_n"] is not None or not g["b_const"]:
        return False
    bivs = _plain_ivs(g["B"].indices, g["R"].iter_vars)
    inner = g["rd"][-1]
    if bivs is None or not any(iv is inner for iv in bivs):
        return False
    return inner.extent % 2 == 0 and inner.extent >= 4 and _lane_stride(g["A"], inner) == 1


def _pair_split(sch: Schedule, loop):
    """Split the innermost reduction ``loop`` into pairs; returns the outer (pair-count) loop,
    the inner extent-2 loop being what ``vdpbf16ps`` consumes per step."""
    outer, _ = sch.split(loop, [None, 2])
    return outer


def _intrin(g, target: Target) -> str:
    """The gemm intrinsic of ``g`` on ``target``: ``gemm.<isa>.f32`` or ``gemm.avx512.bf16``."""
    return f"gemm.{target.isa}.{'bf16' if g['bf16'] else 'f32'}"


MAX_TILE_KNOBS = 8
# tune the parallel fusion too (off: measured on 1 thread, configurations that won by a few %
# by keeping a loop serial were 5-7 % slower inside the model on 2 threads)
TUNE_PARALLEL_FUSION = False
KBLOCK_KNOBS = (32, 64, 128)


def gemm_knobs(func: PrimFunc, target: Target) -> dict | None:
    """The tuning space of ``gemm_rule`` on ``func``: ``{knob: [values]}`` with the rule's
    default decision first in every list (so the all-first configuration is the untuned
    schedule), or ``None`` when the rule does not apply. Knobs: ``tile`` (the default and the
    best-modelled full-lane ``tile_candidates``, at most ``MAX_TILE_KNOBS``), ``order``,
    ``kblock`` (``0`` and the feasible channel blocks), ``fuse`` (see ``gemm_rule``; only
    the default unless ``TUNE_PARALLEL_FUSION``) and ``prefetch`` (both values where the
    weights are over ``SMALL_B_BYTES`` or the reduction can be blocked)."""
    g = analyze(func)
    if g is None or target.isa not in ISAS:
        return None
    n_iv, m_iv = g["n"], g["m"]
    lanes = ISAS[target.isa]
    m_ext = _m_extent(g)
    max_acc = MAX_ACCUMULATORS[target.isa]
    n_ext = _n_extent(g)
    if not is_static_extent(n_ext):
        return None  # a symbolic column count is not tuned: the rule's default schedule
    tile = _choose_tile(g, m_ext, n_ext, lanes, max_acc)
    if tile is None or (tile[0] * tile[1] < 16 and n_ext * m_ext < 64):
        return None
    cands = sorted(tile_candidates(m_ext, n_ext, lanes, max_acc), key=lambda c: -c[0])
    tiles = [list(tile)]
    for _, t in cands:
        if len(tiles) >= MAX_TILE_KNOBS:
            break
        # (a one-column tile, ``nr = 1``, leaves no SIMD lane loop for the micro-kernel)
        if list(t) not in tiles and t[1] > 1 and (t[1] % lanes == 0 or n_ext < lanes):
            tiles.append(list(t))
    kb = _kblock_plan(g, tile[0], tile[1], lanes, max_acc=max_acc)
    kbs = [kb[2] if kb is not None else 0]
    for kc in (0,) + KBLOCK_KNOBS:
        if kc not in kbs and (kc == 0 or _kblock_plan(g, tile[0], tile[1], lanes, kc=kc,
                                                      max_acc=max_acc) is not None):
            kbs.append(kc)
    orders = [_default_order(g)]
    if m_iv is not None:
        orders += [o for o in ("rows", "panels") if o not in orders]
        if _batched_weights(g) and "tiles" not in orders:
            orders.append("tiles")
    # ``fuse`` only changes the parallel grain, which candidates timed on one thread (as they
    # are on a shared machine) cannot rank; it joins the space when TUNE_PARALLEL_FUSION is set
    tiled_m = m_iv is not None and tile[0] > 1
    n_outer = (1 + sum(1 for iv in g["sp"][:-2] if iv.extent != 1) + (1 if tiled_m else 0)
               + (1 if g["group_n"] is not None else 0))
    fuse = [_default_serial(g, tile[1], orders[0] if tiled_m else None, n_outer)]
    if TUNE_PARALLEL_FUSION:
        fuse.append(0 if fuse[0] else 1)  # the default keeps 0 or n_outer - 1 serial
    pf = _default_prefetch(g, kbs[0] > 0, kbs[0] == 0 and _panel_split_prefetch(
        g, tile[0] if m_iv is not None else 1, fuse[0]))
    prefetch = [pf] + ([1 - pf] if pf or any(kbs) or _b_bytes(g) > SMALL_B_BYTES else [])
    return {"tile": tiles, "order": orders, "kblock": kbs, "fuse": fuse, "prefetch": prefetch}


MIN_PANELS_PER_TASK_SPLIT = 8
# a panel-split image GEMM with one reduction loop (a 1x1 convolution: each call streams one
# whole weight panel, reused from L1/L2 by the task's other row tiles) prefetches the next
# panel into L2 while it computes (micro-kernel option ``pfnext``)
PANEL_PREFETCH_NEXT = True
# panel-split is worth it for an image (conv) GEMM when the weights the cores split are at least
# this many times the activation both cores then read in full (MobileNetV2's 7x7 1x1 convs:
# 6.5-26x, ResNet-50's 7x7 512 -> 2048 ones 40x; ResNet's 14x14 1x1 convs, 1.3-5.1x, keep
# their row tiles fused)
PANEL_SPLIT_MIN_B_OVER_A = 6.0


def _default_serial(g, nr: int, order_kind: str | None, n_outer: int) -> int:
    """The default ``fuse`` decision: how many of the ``n_outer`` loops outside the register
    tile stay serial inside the parallel loop. ``n_outer - 1`` (only the ``B``-panel loop is
    parallel: each task is one whole panel against every row of the output) when the large
    constant weights go panels-outer, there are at least ``MIN_PANELS_PER_TASK_SPLIT``
    panels, and either the GEMM is plain (no batch or image dims besides ``m``) or it is an
    image GEMM (a convolution: the output rows are ``oh x ow``) whose weights are at least
    ``PANEL_SPLIT_MIN_B_OVER_A`` times its activation; else ``0`` (panel x row tiles all
    fused). With all tiles fused both threads worked on every panel, so each core pulled all
    of ``B`` into its own L2 (BERT's 768 x 3072 FFN matrices; MobileNetV2's last 1x1
    convolution, 320 -> 1280 channels on 7x7 pixels: 1.6 MB of weights against a 62 KB
    activation); per-panel tasks split the weights between the cores, and each core reads
    the (smaller) activation in full."""
    if order_kind != "panels" or g["m"] is None or n_outer < 2:
        return 0
    if not is_static_extent(g["n"].extent) or g["n"].extent // nr < MIN_PANELS_PER_TASK_SPLIT:
        return 0
    image = _image_ivs(g)
    bivs = _plain_ivs(g["B"].indices, g["R"].iter_vars)
    if image and (bivs is None or {id(iv) for iv in image} & {id(b) for b in bivs}):
        return 0  # a batched GEMM (each batch element has its own B)
    if image and _b_bytes(g) < PANEL_SPLIT_MIN_B_OVER_A * _a_bytes(g):
        return 0
    return n_outer - 1


# a symbolic nest keeps its tile loops serial inside the parallel loop when the loops left to
# fuse have at least this many static iterations (attention's heads)
SYMBOLIC_MIN_STATIC_TASKS = 4


def _symbolic_serial(sch: Schedule, fused_outer: list) -> int:
    """The ``fuse`` decision of a nest with a symbolic row or column count: the loops fused
    into the parallel loop are split back by division by their (symbolic) extents in every
    iteration, a real integer division (tens of cycles each) where static extents divide by a
    constant. So the innermost outer loop (a tile loop) always stays serial, and every loop
    with a symbolic extent at the inner end too while the loops outside them keep
    ``SYMBOLIC_MIN_STATIC_TASKS`` static iterations for the threads (``Q K^T``:
    ``batch x heads`` parallel, the row and column tiles serial in each task)."""
    if len(fused_outer) < 2:
        return 0
    exts = [sch.find_loop(x, "gemm rule")[0].extent for x in fused_outer]
    serial = 1
    while serial < len(exts) - 1 and not is_static_extent(exts[-serial - 1]):
        static = 1
        for e in exts[:-serial - 1]:
            static *= e if is_static_extent(e) else 1
        if static < SYMBOLIC_MIN_STATIC_TASKS:
            break
        serial += 1
    return serial


def _loop_of(sch: Schedule, block: str, iv):
    """The loop whose variable is ``iv``'s binding in ``block`` (``None`` if it has none)."""
    from ..schedule import LoopRV
    blk, path = sch.find_block(block, "gemm rule")
    b = blk.bindings[[id(x) for x in blk.iter_vars].index(id(iv))]
    from ..analysis import loop_vars_used
    used = loop_vars_used(b)
    loops = [s for s in path if isinstance(s, For) and id(s.var) in used]
    return LoopRV(loops[-1].var) if loops else None


def _spatial_loops(sch: Schedule, block: str, g) -> list | None:
    """Per output spatial dim, the loop bound 1:1 to it (``None`` for a unit dim without a
    loop); ``None`` when the loops are not in that simple form."""
    from ..schedule import LoopRV
    from ...expr import Const
    blk, path = sch.find_block(block, "gemm rule")
    loops = {id(s.var): s for s in path if isinstance(s, For)}
    sp_ivs = [iv for iv in blk.iter_vars if iv.kind == "spatial"]
    binds = [b for iv, b in zip(blk.iter_vars, blk.bindings) if iv.kind == "spatial"]
    if len(sp_ivs) != len(g["sp"]):
        return None
    out = []
    for iv, b in zip(sp_ivs, binds):
        if isinstance(b, Var) and id(b) in loops and loops[id(b)].extent == iv.extent:
            out.append(LoopRV(b))
        elif isinstance(b, Const) and iv.extent == 1:
            out.append(None)
        else:
            return None
    return out


KBLOCK_TILE_BYTES = 40 * 1024  # the accumulators of one output-channel tile of a whole image
KBLOCK_MIN_K = 1024
# a bf16 GEMM's weights are half the bytes per reduction element: the reduction is blocked from
# twice the length (the same weight-slice bytes). ResNet-50's 1x1 convolutions over 1024
# channels (the stage-4 projection, 7x7 x 1024 -> 2048, and the 14x14 1024 -> 256/512 ones) run
# unblocked: the projection 0.84-0.90x per kernel paired in-process on a loaded host
KBLOCK_MIN_K_BF16_SCALE = 2
PREFETCH_MIN_B_BYTES = 2 << 20
KBLOCK_PREFETCH = 1  # K-blocked schedules' default (next kc x nr weight slice into L2)


def _panel_split_prefetch(g, mr: int, serial: int) -> bool:
    """``PANEL_PREFETCH_NEXT``'s case: a panel-split image GEMM with one reduction loop (a 1x1
    convolution: each call streams one whole weight panel, reused from L1/L2 by the task's
    other row tiles; ``serial`` = all outer loops but the panel loop, see ``_default_serial``)
    with ``mr > 1`` row tiles."""
    n_image = len(_image_ivs(g))
    return bool(PANEL_PREFETCH_NEXT and g["m"] is not None and mr > 1 and n_image > 0
                and all(iv.extent == 1 for iv in g["rd"][:-1])
                and serial == n_image + 1)


def _default_prefetch(g, kblocked: bool, panel_split: bool = False) -> int:
    """The default ``prefetch`` decision: ``1`` for a K-blocked schedule (the first row's call
    of each ``kc x nr`` weight slice would otherwise wait for memory: these weights are used
    once per run) and for a convolution or batched matmul (dims besides ``m`` and ``n``) whose
    constant operand ``B`` has at least ``PREFETCH_MIN_B_BYTES`` in all (weights that stream
    from memory: ResNet-50's 512 -> 2048 1x1 convolutions on 7x7, the Winograd products of
    ResNet-18/50, 6-15 % faster per kernel on 1 and 2 threads); else ``0``. Plain GEMMs
    (BERT, classifiers) keep ``0``: not measured there. ``panel_split`` (``1``): the case of
    ``_panel_split_prefetch``."""
    if kblocked:
        return KBLOCK_PREFETCH
    if panel_split:
        return 1
    if not _image_ivs(g):
        return 0
    if any(not is_static_extent(d) for d in g["B"].src.shape):
        return 0  # an activation of symbolic size (attention's V), not a weight stream
    return 1 if _buffer_bytes(g["B"].src) >= PREFETCH_MIN_B_BYTES else 0


def _prefetch(cfg: dict, g, kblocked: bool, panel_split: bool = False) -> bool:
    """The ``prefetch`` knob of ``cfg`` (default ``_default_prefetch``).

    Raises:
        ScheduleError: a value that is not 0 or 1."""
    pf = cfg.get("prefetch")
    pf = _default_prefetch(g, kblocked, panel_split) if pf is None else pf
    if pf not in (0, 1, True, False):
        raise ScheduleError(f"gemm rule: prefetch {pf!r} is not 0 or 1")
    return bool(pf)


SMALL_B_BYTES = 256 * 1024


ROWS_MAX_B_BYTES = 640 * 1024
ROWS_MIN_A_BYTES = 1024 * 1024


def _default_order(g) -> str:
    """The default loop order: ``"rows"`` (output rows outer, every ``B`` panel against each
    row block) when ``B`` is small (``SMALL_B_BYTES``), or when ``B`` still fits in L2 with
    room (``ROWS_MAX_B_BYTES``) and the activation ``A`` is too large to stay in L2 beside it
    (``ROWS_MIN_A_BYTES``): panels-outer then streams ``A`` from L3 once per panel (on two
    threads each core through all of it), rows-outer once, each core its half, with ``B``
    re-read from L2. ResNet-50's 56 -> 28 stride-2 3x3 convolution (``A`` 1.7 MB, ``B``
    576 KB) and its 512 KB 1x1 convolutions on 1.6-3.2 MB inputs run 10-20 % faster; with
    ``A`` under 1 MB (ResNet-18's 64 -> 128 stride-2 convolution, 0.86 MB) panels stay
    faster. Else ``"panels"``.

    Winograd products (``_batched_weights``) take ``"tiles"``: row blocks (tiles) outermost,
    then the batch (the n*n transform positions), so each thread's range is one band of tiles
    in every position -- the tiles its core's input transform wrote and its output transform
    reads (both run parallel over tiles). Rows- or panels-outer split the positions between
    the cores, so each core read half of ``V`` and half of ``M`` from the other's L2.
    End to end on 2 threads, paired against the rows/panels default: ResNet-18 0.96-1.00
    (six runs, median 0.97), 0.98 tuned; ResNet-50 0.98-1.00 (see docs/performance.md)."""
    if _batched_weights(g):
        return "tiles"
    b = _b_bytes(g)
    if b <= SMALL_B_BYTES:
        return "rows"
    return "rows" if b <= ROWS_MAX_B_BYTES and _a_bytes(g) >= ROWS_MIN_A_BYTES else "panels"


# a symbolic row count (tokens) is tiled as if it were a multiple of every register-row count
# (``lcm(1..28)``): ``choose_tile`` then picks ``mr`` for ``n`` alone; the last ``M % mr`` rows
# run as one-row micro-kernel calls (``tensorize``'s row tail)
SYMBOLIC_M_NOMINAL = 80313433200
# the largest register-row count for a symbolic row count: the tail (up to ``mr - 1`` rows)
# runs as calls of power-of-two heights (``tensorize``), which a short sequence is made of
SYMBOLIC_MAX_MR = 16
# a symbolic dimension counts as this many elements in the rule's cache-size heuristics
SYMBOLIC_DIM_NOMINAL = 128


# a symbolic column count (attention's keys: ``Q K^T`` is ``(seq, d) x (d, seq)``) is tiled
# as if it were ``SYMBOLIC_N_NOMINAL`` columns, with ``nr`` at most ``SYMBOLIC_MAX_NR``: the
# last ``N % nr`` columns run as narrower calls (``tensorize``'s column tail: one call per
# power of two of the remaining width)
SYMBOLIC_N_NOMINAL = 1024
SYMBOLIC_MAX_NR = 32


def _symbolic_n(g) -> bool:
    """True when the GEMM's column dim ``n`` has a symbolic extent."""
    return not is_static_extent(g["n"].extent)


def _symbolic_n_ok(g) -> bool:
    """A symbolic column count is tiled when ``B`` is an activation read in place (a
    constant ``B`` would be packed at compile time into panels of a static width) and the
    GEMM is neither grouped nor depthwise."""
    if g["group_n"] is not None or g["a_vec"] or g["bf16"] or g["b_const"]:
        return False
    return _lane_stride(g["B"], g["n"]) == 1


def _choose_tile(g, m_ext: int, n_ext: int, lanes: int, max_acc: int):
    """``choose_tile`` with the caps of symbolic extents: ``mr`` a power of two up to
    ``SYMBOLIC_MAX_MR`` for a symbolic row count; for a symbolic column count ``nr`` a
    multiple of the lanes up to ``SYMBOLIC_MAX_NR`` (the tails then split into power-of-two
    heights and widths)."""
    max_mr = SYMBOLIC_MAX_MR if _symbolic_m(g) else None
    if not _symbolic_n(g) and max_mr is None:
        tile = choose_tile(m_ext, n_ext, lanes, max_acc)
        if g["group_n"] is not None and tile is not None:
            return _whole_group_tile(m_ext, n_ext, lanes, max_acc, tile)
        return tile
    best, best_score = None, 0.0
    full = [c for c in tile_candidates(m_ext, n_ext, lanes, max_acc)
            if c[1][1] % lanes == 0 and c[1][0] * (c[1][1] // lanes) >= MIN_FULL_LANE_ACC]
    for score, (mr, nr) in full or tile_candidates(m_ext, n_ext, lanes, max_acc):
        if _symbolic_n(g) and (nr % lanes or nr > SYMBOLIC_MAX_NR):
            continue
        # a symbolic row count: power-of-two row blocks (the tail then is one call per bit of
        # the remaining rows, and sequence lengths are often powers of two)
        if max_mr is not None and (mr > max_mr or mr & (mr - 1)):
            continue
        if score > best_score:
            best, best_score = (mr, nr), score
    return best


# a grouped GEMM's register block may cover its whole group of up to this many vectors
# (``tile_candidates`` stops at 4)
GROUP_TILE_MAX_VECTORS = 5


def _whole_group_tile(m: int, n: int, lanes: int, max_acc: int, tile: tuple) -> tuple:
    """``tile``, or a block of the whole group (``nr = n`` channels, up to
    ``GROUP_TILE_MAX_VECTORS`` vectors) with the most rows that divide ``m`` and still fit the
    register file with at least ``MIN_FULL_LANE_ACC`` accumulators, when that uses more of the
    lanes. ShuffleNet's 68 channels per group on 14-wide rows: 2 x 68 (5 vectors, 85 % of the
    lanes) instead of 7 x 34 (3 vectors for 34: 71 %); paired in a model of four such
    convolutions, 0.90-0.95 of the time on the loaded host."""
    nv = -(-n // lanes)
    if nv > GROUP_TILE_MAX_VECTORS or n <= tile[1] or \
            n / (nv * lanes) <= tile[1] / (-(-tile[1] // lanes) * lanes):
        return tile
    regs = REGISTERS.get(lanes, 16)
    rows = [mr for mr in range(1, min(m, 28) + 1) if m % mr == 0 and mr * nv <= max_acc
            and mr * nv + nv + 1 <= regs and mr * nv >= MIN_FULL_LANE_ACC]
    return (max(rows), n) if rows else tile


def _symbolic_m(g) -> bool:
    """True when the GEMM's row dim ``m`` has a symbolic extent."""
    return g["m"] is not None and not is_static_extent(g["m"].extent)


def _m_extent(g) -> int:
    """The row count ``choose_tile`` tiles: ``m``'s extent, ``SYMBOLIC_M_NOMINAL`` for a
    symbolic one, 1 without a row dim."""
    if g["m"] is None:
        return 1
    return SYMBOLIC_M_NOMINAL if _symbolic_m(g) else g["m"].extent


def _n_extent(g) -> int:
    """The GEMM's ``n`` extent: the output channels, or those of one group of a grouped
    convolution (its register tiles must not straddle two groups)."""
    return g["group_n"] if g["group_n"] is not None else g["n"].extent


def _b_bytes(g) -> int:
    """Bytes of the reduction's B operand (the weights) one batch element uses: a batched
    matmul's batch dims (outermost in the loop order) do not count."""
    B = g["B"]
    bivs = _plain_ivs(B.indices, g["R"].iter_vars)
    keep = {id(g["n"])} | {id(iv) for iv in g["rd"]}
    n = 1
    for k, d in enumerate(B.src.shape):
        if bivs is None or id(bivs[k]) in keep:
            n *= d if is_static_extent(d) else SYMBOLIC_DIM_NOMINAL
    return 4 * n


def _a_bytes(g) -> int:
    """Bytes of the reduction's A operand (the activation) as a whole buffer."""
    return _buffer_bytes(g["A"].src)


def _buffer_bytes(buf) -> int:
    """Bytes of a whole float32 buffer (the rule only handles float32 GEMMs)."""
    n = 4
    for d in buf.shape:
        n *= int(d) if is_static_extent(d) else SYMBOLIC_DIM_NOMINAL
    return n


def _batched_weights(g) -> bool:
    """A batched GEMM whose every batch element has its own constant ``B`` (a batch dim of the
    output indexes the weights): the products of a Winograd convolution, ``(n*n, P, C) x
    (n*n, C, K)``."""
    image = _image_ivs(g)
    bivs = _plain_ivs(g["B"].indices, g["R"].iter_vars)
    return bool(g["b_const"] and image and bivs is not None
                and {id(iv) for iv in image} & {id(b) for b in bivs})


def _image_ivs(g) -> list:
    """The output iter vars besides ``m`` and ``n`` with extent > 1: batch or image dims
    (empty for a plain GEMM)."""
    return [iv for iv in g["sp"] if iv is not g["m"] and iv is not g["n"] and iv.extent != 1]


def _kblock_plan(g, mr: int, nr: int, lanes: int, max_acc: int, kc: int | None = None):
    """``(mr, nr, kc)`` when the reduction should be blocked (see ``_kblocked``), else
    ``None``: small images (whole output rows as the register block, and the whole image's
    accumulators for one channel tile in L1) with a long reduction, where streaming the packed
    weights from L2 for every row dominates. A given ``kc`` forces the blocking where it is
    legal (the size thresholds are skipped). ``max_acc``: the micro-kernel's accumulator limit
    (``MAX_ACCUMULATORS``); a whole row that needs more (a 13- or 14-wide row on AVX2's 12) is
    not blocked, so the rule takes its ordinary tiled schedule instead of failing."""
    m_iv, sp, rd = g["m"], g["sp"], g["rd"]
    if m_iv is None or _symbolic_m(g) or any(not is_static_extent(iv.extent) for iv in sp + rd) \
            or len(sp) < 3 or g["a_vec"] or g["group_n"] is not None:
        return None
    if mr != m_iv.extent:
        regs = REGISTERS.get(lanes, 16)
        mr = m_iv.extent
        nv = (regs - 1) // (mr + 1)
        if nv < 1:
            return None
        nr = next((v * lanes for v in range(nv, 0, -1)
                   if g["n"].extent % (v * lanes) == 0), None)
        if nr is None:
            return None
    o_iv = sp[-3]
    k_total = 1
    for iv in rd:
        k_total *= iv.extent
    inner = rd[-1]  # the contiguous reduction dim (input channels)
    min_k = KBLOCK_MIN_K * (KBLOCK_MIN_K_BF16_SCALE if g["bf16"] else 1)
    if kc is None and (k_total < min_k or inner.extent < 64 or o_iv.extent < 2):
        return None
    while nr > lanes and o_iv.extent * mr * nr * 4 > KBLOCK_TILE_BYTES:
        if nr % 2 or (nr // 2) % lanes or g["n"].extent % (nr // 2):
            return None
        nr //= 2
    if o_iv.extent * mr * nr * 4 > KBLOCK_TILE_BYTES:
        return None
    if mr * -(-nr // lanes) > max_acc:
        return None
    if kc is not None:
        return (mr, nr, kc) if 0 < kc <= inner.extent and inner.extent % kc == 0 else None
    kc = max(d for d in range(1, min(inner.extent, 128) + 1) if inner.extent % d == 0)
    if kc < 32:
        return None
    return mr, nr, kc


def _kblocked(sch: Schedule, g, target: Target, mr: int, nr: int, kc: int,
              prefetch: bool) -> Schedule | None:
    """The reduction blocked by ``kc`` input channels: for each output-channel tile the whole
    image's accumulators stay in a local buffer (L1) while, per block of channels and kernel
    tap, the ``kc x nr`` slice of packed weights is reused by every output row. ``prefetch``:
    the micro-kernel also prefetches the next slice into L2 while the rows reuse this one (the
    first row's call would otherwise wait for memory: these weights are used once per run)."""
    R, n_iv, m_iv = g["R"], g["n"], g["m"]
    epi = g["epi"].name if g["epi"] is not None else None
    if epi is None:
        epi = sch.cache_write(R.name, 0, "local")
    sp_loops = _spatial_loops(sch, epi, g)
    if sp_loops is None or sp_loops[-1] is None:
        return None
    no, ni = sch.split(sp_loops[-1], [None, nr])
    rest = [x for x in sp_loops[:-1] if x is not None]
    sch.reorder(no, *rest, ni)
    batch = [x for x in sp_loops[:-3] if x is not None]
    par = sch.fuse(no, *batch) if batch else no
    sch.compute_at(R.name, par)
    inner = g["rd"][-1]
    lc = _loop_of(sch, R.name, inner)
    rco, rci = sch.split(lc, [None, kc])
    taps = [x for x in (_loop_of(sch, R.name, iv) for iv in g["rd"][:-1]) if x is not None]
    lo = _loop_of(sch, R.name, g["sp"][-3])
    lm = _loop_of(sch, R.name, m_iv)
    ln = _loop_of(sch, R.name, n_iv)
    if lm is None or ln is None:
        return None
    # kernel taps outside the channel blocks: consecutive weight slices are contiguous in the
    # packed panel, so the weights stream from memory in one sequential pass
    order = taps + [rco] + ([lo] if lo is not None else []) + [rci, lm, ln]
    sch.reorder(*order)
    init = sch.decompose_reduction(R.name, taps[0] if taps else rco)
    if g["bf16"]:
        if kc % 2:
            raise ScheduleError(f"gemm rule: a bf16 reduction block of {kc} channels is not a "
                                f"whole number of pairs")
        rci = _pair_split(sch, rci)
    sch.tensorize(rci, _intrin(g, target) + (".pfnext" if prefetch else ""))
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(epi)[-1])
    sch.parallel(par)
    finish_generic(sch, target, skip={R.name, init, epi})
    return sch
