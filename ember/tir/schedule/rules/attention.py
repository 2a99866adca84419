"""The streaming attention kernel (``nn.attention``, ``ember.ops.transformer``): scaled dot-product
attention over tiles of keys with an online softmax (Milakov & Gimelshein, "Online normalizer
calculation for softmax", arXiv:1805.02867; Dao et al., "FlashAttention", arXiv:2205.14135), so
the ``(S, T)`` score matrix of a head is never materialized: a block of ``MQ`` query rows keeps
its running row maxima ``m``, its running sums ``l`` and its ``(MQ, Dv)`` output accumulator
on the stack, and visits the keys ``BK`` at a time.

Grouped-query attention repeats each key/value head ``hk`` over the ``rep = H / Hkv`` query
heads ``hk * rep .. hk * rep + rep - 1`` (as ONNX Attention-23's reference does); those heads'
``rep * S`` query rows are contiguous in ``q`` and ``y`` and share every key, so they are one
row range, cut into blocks of ``MQ`` rows (a decode step, ``S = 1``, fills ``rep`` lanes of a
block instead of one). Per parallel item (batch ``b``, key head ``hk``, rows ``i0 .. i0 + MQ``
of its group; row ``i`` is query head ``hk * rep + i // S`` at position ``i mod S``):

1. ``QT (D, MQ)``: the block's query rows transposed and multiplied by ``scale`` (rows past
   ``rep * S`` repeat the last row; their results are not written);
2. per key tile ``j0 .. j0 + n`` (``n = BK``, the last tile ``T mod BK``), skipped when causal
   masking hides all of it from the block:
   a. ``ST (n, MQ) = K[j0:j0+n] @ QT``: ``gemm`` micro-kernel calls (``MR`` keys x ``MQ``
      query rows per register block; ``MQ`` is one SIMD vector);
   b. per key, over the ``MQ`` query rows as one vector: softcap ``c * tanh(s / c)``, then the
      additive bias: the float mask (boolean masks arrive as ``0 / -inf``; keys past the mask's
      last dim are ``-inf``), ``-inf`` past the causal frontier ``j > i + offset`` (``offset``
      the past length, or ``nonpad[b] - S``), outside the sliding window, past ``nonpad[b]``;
   c. online softmax: ``m' = max(m, max_j s)``, ``P = exp(s - m')``, ``l = l * exp(m - m') +
      sum_j P``, ``acc *= exp(m - m')``;
   d. ``acc += P @ V[j0:j0+n]``: ``gemm`` micro-kernel calls reading ``P`` transposed (``A``
      row stride 1, reduction stride ``MQ``) and ``V``'s rows in place;
3. ``Y = acc / l``, and a zero row where ``l == 0`` (a fully masked row: ONNX's errata).

With a ``qk_matmul_output`` (``qk_mode`` 0-3) the scores are also written out (mode 0 before
softcap, 1 after it, 2 with the bias); mode 3 rewrites the mode-2 scores into probabilities with
the final ``m`` and ``l`` in a second pass over the block's rows.

The kernel is built once by the operator's compute with the ``scalar`` micro-kernels and again
by ``attention_rule`` for the target's SIMD instruction set (the geometry travels in
``func.attrs["attention"]``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ....errors import ScheduleError
from ....target import Target
from ...expr import AddressOf, Call, Const, Load, Select, Var, binop
from ...stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Stmt, Store, seq
from ..schedule import Schedule
from ..tensorize import ISAS, MAX_ACCUMULATORS, gemm_kernel_call

OP = "nn.attention"
BK = 64                    # keys per tile
MR_KEYS = 8                # keys per QK^T register block
STACK_BYTES = 256 * 1024   # per-thread scratch above this goes to the heap


@dataclass(frozen=True)
class AttentionGeometry:
    """Shapes and options of one ``nn.attention`` kernel (see ``ember.ops.transformer``)."""

    b: int
    h: int
    hkv: int
    s: int
    t: int
    d: int
    dv: int
    scale: float
    causal: bool
    past: int
    softcap: float
    mask: tuple | None          # (Bm, Hm, Sm, Tm) of the float mask input, or None
    nonpad: bool
    qk_mode: int                # -1: no qk_matmul_output
    window: tuple               # (left, right), -1 unbounded

    def to_attrs(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_attrs(d: dict) -> "AttentionGeometry":
        d = dict(d)
        d["mask"] = tuple(d["mask"]) if d["mask"] is not None else None
        d["window"] = tuple(d["window"])
        return AttentionGeometry(**d)


_ids = [0]
F32 = "float32"
NEG_INF = Const(-math.inf, F32)
ZERO = Const(0.0, F32)
ONE = Const(1.0, F32)


def _var(name: str) -> Var:
    _ids[0] += 1
    return Var(f"{name}{_ids[0]}")


def _i(v) -> Const:
    return Const(int(v), "int64")


def _loop(extent: int, body, name: str = "i", kind: str = "serial") -> Stmt:
    if extent <= 0:
        return seq([])
    v = _var(name)
    return For(v, int(extent), body(v), kind)


def _flat(buf: Buffer, flat) -> tuple:
    return tuple([_i(0)] * (len(buf.shape) - 1)) + (flat,)


def _ld(buf: Buffer, flat):
    return Load(buf, _flat(buf, flat))


def _st(buf: Buffer, flat, value) -> Stmt:
    return Store(buf, _flat(buf, flat), value)


def _addr(buf: Buffer, flat) -> AddressOf:
    return AddressOf(buf, _flat(buf, flat))


def _min(a, b):
    return binop("min", a, b)


def _blocks(total: int, size: int) -> list[tuple[int, int]]:
    """``[(start, extent)]`` covering ``range(total)`` in pieces of ``size`` (last shorter)."""
    return [(s, min(size, total - s)) for s in range(0, total, size)]


def attention_body(g: AttentionGeometry, params: list, isa: str) -> Stmt:
    """The loop program of the kernel (module doc) over ``params``: ``q (B, H, S, D)``, ``k (B,
    Hkv, T, D)``, ``v (B, Hkv, T, Dv)``, [``mask (Bm, Hm, Sm, Tm)`` float32], [``nonpad (B,)``
    int64], ``y (B, H, S, Dv)``, [``qk (B, H, S, T)``], with ``isa``'s micro-kernels.

    Raises:
        ScheduleError: ``isa`` has no micro-kernels."""
    if isa not in ISAS:
        raise ScheduleError(f"{OP}: no micro-kernels for isa {isa!r} (known: {sorted(ISAS)})")
    lanes, max_acc = ISAS[isa], MAX_ACCUMULATORS[isa]
    ps = list(params)
    q, k, v = ps[:3]
    rest = ps[3:]
    mask = rest.pop(0) if g.mask is not None else None
    nonpad = rest.pop(0) if g.nonpad else None
    y = rest.pop(0)
    qk = rest.pop(0) if g.qk_mode >= 0 else None
    MQ = lanes
    rep = g.h // g.hkv
    R = rep * g.s                                 # query rows of one key head's group
    nq = -(-R // MQ)
    D, Dv, T, S = g.d, g.dv, g.t, g.s
    bk = min(BK, T)
    p = _var("blk")
    bidx = p // _i(g.hkv * nq)
    hk = (p // _i(nq)) % _i(g.hkv)
    i0 = (p % _i(nq)) * _i(MQ)
    q0 = (bidx * _i(g.h) + hk * _i(rep)) * _i(S)  # first row of the group in q / y / qk
    k0 = (bidx * _i(g.hkv) + hk) * _i(T)          # first row of (b, hk) in k / v
    npb = Load(nonpad, (bidx,)) if nonpad is not None else None
    off = (npb - _i(S)) if npb is not None else _i(g.past)
    scope = "local" if 4 * MQ * (D + bk + Dv + 4) <= STACK_BYTES else "global"
    QT = Buffer(f"atQT{_ids[0]}", (D * MQ,), F32, scope=scope)
    ST = Buffer(f"atS{_ids[0]}", (bk * MQ,), F32, scope=scope)
    ACC = Buffer(f"atO{_ids[0]}", (MQ * Dv,), F32, scope=scope)
    M = Buffer(f"atM{_ids[0]}", (MQ,), F32, scope="local")
    MN = Buffer(f"atN{_ids[0]}", (MQ,), F32, scope="local")
    L = Buffer(f"atL{_ids[0]}", (MQ,), F32, scope="local")
    AL = Buffer(f"atA{_ids[0]}", (MQ,), F32, scope="local")
    scale = Const(float(g.scale), F32)

    def row(r):  # the group row of block lane r, clamped into range
        return _min(i0 + r, _i(R - 1))

    def srow(r):  # its query position
        return row(r) % _i(S) if rep > 1 else row(r)

    # 1. QT = scale * Q[block]^T
    load_q = _loop(D, lambda d: _loop(MQ, lambda r: _st(
        QT, d * _i(MQ) + r, _ld(q, (q0 + row(r)) * _i(D) + d) * scale), "r"), "d")
    init = seq([_loop(MQ, lambda r: seq([_st(M, r, NEG_INF), _st(L, r, ZERO)]), "r",
                      "vectorized"),
                _loop(MQ * Dv, lambda j: _st(ACC, j, ZERO), "j", "vectorized")])

    def bias(r, j):
        """Additive bias of block lane ``r`` and key ``j`` (0 or -inf, plus the float mask)."""
        i = srow(r)
        val = ZERO
        if mask is not None:
            bm, hm, sm, tm = g.mask
            hrow = hk * _i(rep) + row(r) // _i(S)
            mi = ((bidx if bm > 1 else _i(0)) * _i(hm) + (hrow if hm > 1 else _i(0))) * _i(sm) \
                + (i if sm > 1 else _i(0))
            ld = _ld(mask, mi * _i(tm) + _min(j, _i(tm - 1)))
            val = ld if tm >= T else Select(binop("lt", j, _i(tm)), ld, NEG_INF)
        conds = []
        if g.causal:
            conds.append(binop("le", j, i + off))
        left, right = g.window
        if left >= 0:
            conds.append(binop("ge", j, i + off - _i(left)))
        if right >= 0:
            conds.append(binop("le", j, i + off + _i(right)))
        if npb is not None:
            conds.append(binop("lt", j, npb))
        if conds:
            ok = conds[0]
            for c in conds[1:]:
                ok = binop("and", ok, c)
            val = Select(ok, val, NEG_INF)
        return val

    causal_only = g.causal and mask is None and npb is None and g.window == (-1, -1) \
        and qk is None

    def first_pos():  # the smallest query position of the block
        if rep == 1:
            return i0
        last = _min(i0 + _i(MQ - 1), _i(R - 1))
        return Select(binop("eq", i0 // _i(S), last // _i(S)), i0 % _i(S), _i(0))

    def tile(j0, n):
        parts = []

        def add_bias(jj):
            return _loop(MQ, lambda r: _st(ST, jj * _i(MQ) + r, _ld(ST, jj * _i(MQ) + r)
                                           + bias(r, j0 + jj)), "r")
        # a. ST = K[j0 : j0+n] @ QT
        for jj0, mr in _blocks(n, MR_KEYS):
            parts.append(gemm_kernel_call(
                isa, F32, mr, MQ, _addr(ST, _i(jj0 * MQ)),
                _addr(k, (k0 + j0 + _i(jj0)) * _i(D)), _addr(QT, _i(0)), MQ, D,
                [(D, 1, MQ)], 0))

        # b. softcap, qk output, bias
        def score(jj):
            j = j0 + jj
            steps = []

            def put(mode, val):
                if qk is None or g.qk_mode != mode:
                    return
                steps.append(_loop(MQ, lambda r: IfThenElse(
                    binop("lt", i0 + r, _i(R)),
                    _st(qk, (q0 + i0 + r) * _i(T) + j, val(r))), "r"))
            put(0, lambda r: _ld(ST, jj * _i(MQ) + r))
            if g.softcap > 0:
                c = Const(float(g.softcap), F32)
                steps.append(_loop(MQ, lambda r: _st(ST, jj * _i(MQ) + r, Call(
                    "tanh", [_ld(ST, jj * _i(MQ) + r) / c], F32) * c), "r", "vectorized"))
            put(1, lambda r: _ld(ST, jj * _i(MQ) + r))
            if (mask is not None or g.causal or npb is not None or g.window != (-1, -1)) \
                    and not causal_only:
                steps.append(add_bias(jj))
            put(2, lambda r: _ld(ST, jj * _i(MQ) + r))
            put(3, lambda r: _ld(ST, jj * _i(MQ) + r))
            return seq(steps)
        parts.append(_loop(n, score, "jj"))
        if causal_only:  # only the tiles across the causal frontier get a bias
            parts.append(IfThenElse(binop("gt", j0 + _i(n - 1), first_pos() + off),
                                    _loop(n, add_bias, "jj")))
        # c. online softmax
        parts.append(_loop(MQ, lambda r: _st(MN, r, _ld(M, r)), "r", "vectorized"))
        parts.append(_loop(n, lambda jj: _loop(MQ, lambda r: _st(MN, r, binop(
            "max", _ld(MN, r), _ld(ST, jj * _i(MQ) + r))), "r", "vectorized"), "jj"))
        parts.append(_loop(MQ, lambda r: seq([
            _st(AL, r, Select(binop("eq", _ld(MN, r), NEG_INF), ONE,
                              Call("exp", [_ld(M, r) - _ld(MN, r)], F32))),
            _st(M, r, _ld(MN, r)),
            _st(MN, r, Select(binop("eq", _ld(MN, r), NEG_INF), ZERO, _ld(MN, r))),
            _st(L, r, _ld(L, r) * _ld(AL, r))]), "r", "vectorized"))
        parts.append(_loop(n, lambda jj: _loop(MQ, lambda r: seq([
            _st(ST, jj * _i(MQ) + r, Call("exp", [_ld(ST, jj * _i(MQ) + r) - _ld(MN, r)], F32)),
            _st(L, r, _ld(L, r) + _ld(ST, jj * _i(MQ) + r))]), "r", "vectorized"), "jj"))
        parts.append(_loop(MQ, lambda r: _loop(Dv, lambda c: _st(
            ACC, r * _i(Dv) + c, _ld(ACC, r * _i(Dv) + c) * _ld(AL, r)), "c", "vectorized"),
            "r"))
        # d. ACC += P @ V[j0 : j0+n]
        nr = min(Dv, 4 * lanes)
        mr = max(1, min(MQ, max_acc // -(-nr // lanes)))
        for c0, nc in _blocks(Dv, nr):
            for r0, nrows in _blocks(MQ, mr):
                parts.append(gemm_kernel_call(
                    isa, F32, nrows, nc, _addr(ACC, _i(r0 * Dv + c0)), _addr(ST, _i(r0)),
                    _addr(v, (k0 + j0) * _i(Dv) + _i(c0)), Dv, 1, [(n, MQ, Dv)], 1))
        body = seq(parts)
        if g.causal and qk is None:  # the tile past the block's causal frontier: skipped
            last = _min(i0 + _i(MQ - 1), _i(R - 1))
            if rep > 1:  # a block across two heads of the group: up to the last position
                last = Select(binop("eq", i0 // _i(S), last // _i(S)), last % _i(S), _i(S - 1))
            body = IfThenElse(binop("le", j0, last + off), body)
        return body

    tiles = []
    nfull = T // bk
    if nfull:
        tiles.append(_loop(nfull, lambda t: tile(t * _i(bk), bk), "kt"))
    if T % bk:
        tiles.append(tile(_i(nfull * bk), T % bk))

    # 3. Y = ACC / L (0 for a fully masked row)
    def write(r):
        inv = Select(binop("gt", _ld(L, r), ZERO), ONE / _ld(L, r), ZERO)
        return IfThenElse(binop("lt", i0 + r, _i(R)), _loop(Dv, lambda c: _st(
            y, (q0 + i0 + r) * _i(Dv) + c, _ld(ACC, r * _i(Dv) + c) * inv), "c", "vectorized"))
    out = [_loop(MQ, write, "r")]
    if qk is not None and g.qk_mode == 3:
        def probs(r):
            m = Select(binop("eq", _ld(M, r), NEG_INF), ZERO, _ld(M, r))
            inv = Select(binop("gt", _ld(L, r), ZERO), ONE / _ld(L, r), ZERO)
            base = (q0 + i0 + r) * _i(T)
            return IfThenElse(binop("lt", i0 + r, _i(R)), _loop(T, lambda j: _st(
                qk, base + j, Call("exp", [_ld(qk, base + j) - m], F32) * inv), "j",
                "vectorized"))
        out.append(_loop(MQ, probs, "r"))
    block = seq([load_q, init] + tiles + out)
    for buf in (AL, L, MN, M, ACC, ST, QT):
        block = Allocate(buf, block)
    kind = "parallel" if g.b * g.hkv * nq > 1 else "serial"
    return For(p, g.b * g.hkv * nq, block, kind)


def attention_rule(func: PrimFunc, target: Target) -> Schedule | None:
    """The kernel of an ``nn.attention`` binding rebuilt with ``target``'s SIMD micro-kernels
    (the compute built it with the scalar ones); ``None`` for other kernels."""
    geo = func.attrs.get("attention")
    if func.attrs.get("op") != OP or geo is None or target.isa not in ISAS:
        return None
    g = AttentionGeometry.from_attrs(geo)
    body = attention_body(g, list(func.params), target.isa)
    return Schedule(PrimFunc(func.name, list(func.params), body, dict(func.attrs)))


__all__ = ["AttentionGeometry", "attention_body", "attention_rule", "BK"]
