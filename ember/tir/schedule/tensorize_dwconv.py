"""tensorize with the ``dwconv`` intrinsic: a depthwise 2-D convolution register block.

Matches a perfect loop nest around one block whose update is

    C[..] = C[..] + X' * Wt[..]      X' = X[n, h, w, c]  or  select(guard, X[n, h, w, c], 0)

with ``X`` a rank-4 NHWC image and all indices affine in the nest's loops. The loops are
classified by the strides they give the operands:

- the *lanes* loop: unit stride in ``C``, in ``X``'s channel index and in ``Wt``, nothing else;
- the *pixel* loop (optional, ``wr``): strided in ``C``, moves only ``X``'s ``w`` index (the
  convolution's stride ``sw``), absent from ``Wt``;
- at most two reduction loops (the taps): absent from ``C``; one moves only ``X``'s ``h`` index
  (dilation ``dh``), the other only its ``w`` index (dilation ``dw``).

A ``guard`` (the inlined zero padding) must be a conjunction of bounds checks ``0 <= h``,
``h < H``, ``0 <= w``, ``w < W`` of the load's own ``h``/``w`` indices against ``X``'s extent;
the micro-kernel then skips taps outside the image (``ember.codegen.microkernel_dwconv``). The
nest becomes ``ember_ukr_dwconv_<isa>_<dtype>_<wr>x<nr>_k<kh>x<kw>_<digest>(C, X, Wt, ih0, iw0,
accumulate)`` where ``X`` points at image pixel (0, 0) and ``ih0``/``iw0`` are the (possibly
negative) input coordinates of the block's first tap.

The grouped form (``_tensorize_grouped``, ``cg`` channels per group): the weights carry a
rotation index ``(k - m) mod cg`` (a ``floormod`` over the nest's own loops marks the form),
the lanes are two loops, the block's groups (stride ``cg``) x the channel in a group ``m``
(output stride 1, absent from the input), and one more reduction loop ``k`` (extent ``cg``)
moves the input's channel; the call is ``ember_ukr_gconv_<isa>_<dtype>_g<cg>_...``.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ...errors import ScheduleError
from ..arith import flat_index, linear_terms, loop_range, simplify, substitute
from ..expr import AddressOf, BinOp, Cast, Const, Expr, Load, Select
from ..stmt import Block, For, KernelCall

def _split_update(blk: Block, where: str):
    """``(store, x_load, guard | None, w_load)`` of ``C = C + X' * Wt``."""
    from ..stmt import Store
    from ..transform import expr_equal
    st = blk.body
    if not isinstance(st, Store) or not isinstance(st.value, BinOp) or st.value.op != "add":
        raise ScheduleError(f"{where}: block {blk.name!r} is not an update C = C + X * W")
    for acc, prod in ((st.value.a, st.value.b), (st.value.b, st.value.a)):
        if not (isinstance(acc, Load) and acc.src is st.buffer and all(
                expr_equal(x, y) for x, y in zip(acc.indices, st.indices))):
            continue
        while isinstance(prod, Cast) and prod.dtype == prod.value.dtype:
            prod = prod.value
        if not (isinstance(prod, BinOp) and prod.op == "mul"):
            break
        for x, w in ((prod.a, prod.b), (prod.b, prod.a)):
            guard = None
            if isinstance(x, Select) and isinstance(x.f, Const) and x.f.value == 0:
                guard, x = x.cond, x.t
            if isinstance(x, Load) and isinstance(w, Load) and len(x.src.shape) == 4 \
                    and x.src is not st.buffer and w.src is not st.buffer:
                return st, x, guard, w
        break
    raise ScheduleError(f"{where}: block {blk.name!r} is not C = C + [select(guard,] X[n, h, w, "
                        f"c] [, 0)] * W[..] with a rank-4 image X")


def _check_guard(guard: Expr, hw_idx: list, shape: tuple, where: str) -> None:
    """``guard`` must be a conjunction of bounds checks of the load's h/w indices."""
    conds = []

    def flatten(c):
        if isinstance(c, BinOp) and c.op == "and":
            flatten(c.a)
            flatten(c.b)
        elif isinstance(c, Const) and c.dtype == "bool" and c.value:
            pass
        else:
            conds.append(c)
    flatten(guard)
    forms = []  # (terms, const) of L in L >= 0
    for c in conds:
        if not (isinstance(c, BinOp) and c.op in ("ge", "gt", "le", "lt")):
            raise ScheduleError(f"{where}: the padding guard term {c!r} is not a bounds check")
        a, b = (c.a, c.b) if c.op in ("ge", "gt") else (c.b, c.a)
        lt = linear_terms(simplify(BinOp("sub", a, b)))
        if lt is None:
            raise ScheduleError(f"{where}: the padding guard term {c!r} is not integer")
        terms, k = lt
        forms.append((terms, k - (1 if c.op in ("gt", "lt") else 0)))
    allowed = []
    for d, e in zip((1, 2), hw_idx):
        t, k = linear_terms(e)
        allowed.append((t, k))  # e >= 0
        allowed.append(({key: (a, -c) for key, (a, c) in t.items()}, shape[d] - 1 - k))
    for terms, k in forms:
        if not any(k == k2 and {key: c for key, (_, c) in terms.items()} ==
                   {key: c for key, (_, c) in t2.items()} for t2, k2 in allowed):
            raise ScheduleError(f"{where}: the padding guard checks something other than the "
                                f"image bounds of the loaded pixel")


def tensorize_dwconv(sch, loop, isa: str, dtype: str) -> None:
    """Replace the nest at ``loop`` by a ``dwconv`` micro-kernel call (see the module doc).

    Raises:
        ScheduleError: the nest is not a depthwise-convolution block as described, the block
            has a predicate, or the register block is too large for ``isa``.
    """
    from .tensorize import ISAS, MAX_ACCUMULATORS, affine_coeffs, tensorize_nest
    f, path, chain, blk, where = tensorize_nest(sch, loop, f"dwconv.{isa}")
    st, lx, guard, lw = _split_update(blk, where)
    if not (st.buffer.dtype == lx.dtype == lw.dtype == dtype):
        raise ScheduleError(f"{where}: operand dtypes ({lx.dtype}, {lw.dtype} -> "
                            f"{st.buffer.dtype}) are not {dtype}")
    vmap = {iv.var: b for iv, b in zip(blk.iter_vars, blk.bindings)}
    bounds = {c.var: loop_range(c.extent, {}) for c in list(path) + chain if isinstance(c, For)}
    zero = {c.var: Const(0, "int64") for c in chain if c.extent == 1}

    def norm(e):
        return simplify(substitute(simplify(substitute(e, vmap), bounds), zero))
    cidx = [norm(i) for i in st.indices]
    xidx = [norm(i) for i in lx.indices]
    widx = [norm(i) for i in lw.indices]
    live = [c for c in chain if c.extent > 1]
    ids = {id(c.var) for c in live}
    cc = affine_coeffs(flat_index(st.buffer, cidx), ids, where, "the output index")
    if any(_has_floormod(e, ids) for e in widx):
        return _tensorize_grouped(sch, f, blk, chain, live, st, lx, guard, lw, cidx, xidx, widx,
                                  cc, norm, isa, dtype, where)
    cw = affine_coeffs(flat_index(lw.src, widx), ids, where, "the weight index")
    cx = [affine_coeffs(e, ids, where, f"input index {d}") for d, e in enumerate(xidx)]
    def moves(c):
        return [d for d in range(4) if cx[d].get(id(c.var), 0) != 0]
    lane = [c for c in live if moves(c) == [3]]
    pix = [c for c in live if c not in lane and cc.get(id(c.var), 0) != 0]
    if len(lane) > 1:
        raise ScheduleError(f"{where}: expected at most one channel (lanes) loop, found "
                            f"{[c.var.name for c in lane]}")
    nl = lane[0] if lane else None  # none: a one-channel block
    if nl is not None and not (cx[3][id(nl.var)] == 1 and cw.get(id(nl.var)) == 1
                               and cc.get(id(nl.var)) == 1):
        raise ScheduleError(f"{where}: the lanes loop {nl.var.name} must have unit stride in the "
                            f"output, the input's channels and the weights")
    ml, sw, th, tw, kh, kw, dh, dw = _pixel_and_taps(
        blk, live, pix, (nl,), cx, lambda c: cw.get(id(c.var), 0), where)
    wr = ml.extent if ml is not None else 1
    nr = nl.extent if nl is not None else 1
    nv = -(-nr // ISAS[isa])
    if wr * nv > MAX_ACCUMULATORS[isa]:
        raise ScheduleError(f"{where}: register block {wr}x{nr} needs {wr * nv} accumulators; "
                            f"{isa} has room for {MAX_ACCUMULATORS[isa]}")
    _, H, W, Cx = lx.src.shape
    params = (wr, nr, kh, kw, sw, dh, dw, H, W, W * Cx, Cx,
              cw.get(id(th.var), 0) if th else 0, cw.get(id(tw.var), 0) if tw else 0,
              cc.get(id(ml.var), 0) if ml else 0, int(guard is not None))
    _replace_by_call(sch, f, blk, chain, live, st, lx, lw, guard, norm, (cidx, xidx, widx),
                     params, isa, dtype, where, "dwconv")


def _pixel_and_taps(blk, live, pix, skip, cx, wstride, where):
    """The output pixel loop and the tap loops of a depthwise or grouped block, shared by both
    forms: ``pix`` (at most one loop) must move only the input's ``w`` index (stride ``sw``) and
    not the weights (``wstride(c)``: the weights' element stride along ``c``); every other live
    loop not in ``skip`` is a reduction over the taps moving exactly one of the input's ``h`` and
    ``w`` indices. Returns ``(ml, sw, th, tw, kh, kw, dh, dw)`` (``None`` / extent 1 for absent
    loops; ``dh``/``dw``: the dilations).

    Raises:
        ScheduleError: more than one pixel loop, or a loop of neither form."""
    from .tensorize import check_reduction_loops
    if len(pix) > 1:
        raise ScheduleError(f"{where}: expected at most one output pixel loop, found "
                            f"{[c.var.name for c in pix]}")

    def moves(c):
        return [d for d in range(4) if cx[d].get(id(c.var), 0) != 0]
    ml = pix[0] if pix else None
    sw = 1
    if ml is not None:
        if moves(ml) != [2] or wstride(ml):
            raise ScheduleError(f"{where}: the pixel loop {ml.var.name} must move only the "
                                f"input's w index and not the weights")
        sw = cx[2][id(ml.var)]
    taps = {}
    for c in live:
        if c is ml or any(c is s for s in skip):
            continue
        check_reduction_loops(blk, [c], where)
        m = moves(c)
        if len(m) != 1 or m[0] not in (1, 2) or m[0] in taps:
            raise ScheduleError(f"{where}: reduction loop {c.var.name} must move exactly one of "
                                f"the input's h and w indices (moves dims {m})")
        taps[m[0]] = c
    th, tw = taps.get(1), taps.get(2)
    kh, kw = (th.extent if th else 1), (tw.extent if tw else 1)
    dh = cx[1][id(th.var)] if th else 1
    dw = cx[2][id(tw.var)] if tw else 1
    return ml, sw, th, tw, kh, kw, dh, dw


def _replace_by_call(sch, f, blk, chain, live, st, lx, lw, guard, norm, idx, params, isa, dtype,
                     where, family) -> None:
    """Replace the block's nest by the ``family`` (``dwconv`` or ``gconv``) micro-kernel call
    with ``params``: the operands' addresses at loop iteration 0 (``idx``: the normalized
    output, input and weight indices) and the input coordinates of tap (0, 0).

    Raises:
        ScheduleError: the guard does not bound the loaded pixel by the image, or the
            accumulate flag cannot be derived (``accumulate_flag``)."""
    from .tensorize import accumulate_flag, dtype_short, replace_nest
    cidx, xidx, widx = idx
    if guard is not None:
        _check_guard(norm(guard), xidx[1:3], lx.src.shape, where)
    accumulate = accumulate_flag(blk, chain, where)
    zmap = {c.var: Const(0, "int64") for c in live}

    def at0(e):
        return simplify(substitute(e, zmap))
    z = Const(0, "int64")
    call = dwconv_kernel_call(isa, dtype, params, AddressOf(st.buffer, [at0(i) for i in cidx]),
                              AddressOf(lx.src, [at0(xidx[0]), z, z, at0(xidx[3])]),
                              AddressOf(lw.src, [at0(i) for i in widx]),
                              at0(xidx[1]), at0(xidx[2]), accumulate, family=family)
    replace_nest(sch, f, blk, chain, call, f"dwconv.{isa}.{dtype_short(dtype)}")


def _has_floormod(e: Expr, ids: set) -> bool:
    """Whether ``e`` takes a ``floormod`` of an expression over the loops ``ids`` (the
    grouped weights' rotation index; outer loops may appear in floormods of either form)."""
    from ..arith import collect
    from ..expr import Var
    return any(any(id(v) in ids for v in collect(m, lambda x: isinstance(x, Var)))
               for m in collect(e, lambda x: isinstance(x, BinOp) and x.op == "floormod"))


def _tensorize_grouped(sch, f, blk, chain, live, st, lx, guard, lw, cidx, xidx, widx, cc, norm,
                       isa, dtype, where) -> None:
    """The grouped form of ``tensorize_dwconv``: ``cg`` input = output channels per group, the
    weights packed rotated (``Wt[r, s, (k - o % cg) mod cg, (o // cg) * cg + k]``, see
    ``ember.codegen.microkernel_dwconv``). Loops: ``k`` (reduction, extent ``cg``: moves only
    the input's channel, by 1, and the weights' lanes, by 1), ``m`` (extent ``cg``: the output
    channel inside a group; output stride 1, not the input), an optional ``gi`` (the groups of
    the block: stride ``cg`` in the output, the input's channel and the weights' lanes), the
    pixel loop and the taps as in the depthwise form."""
    from .tensorize import ISAS, MAX_ACCUMULATORS, affine_coeffs, check_reduction_loops
    from ..arith import collect
    from ..expr import Var
    ids = {id(c.var) for c in live}
    cx = [affine_coeffs(e, ids, where, f"input index {d}") for d, e in enumerate(xidx)]
    rots = [d for d, e in enumerate(widx) if _has_floormod(e, ids)]
    if len(rots) != 1 or rots[0] == len(widx) - 1:
        raise ScheduleError(f"{where}: the grouped weights need one rotation index before the "
                            f"lanes")
    rd = rots[0]
    wd = [d for d in range(len(widx)) if d != rd]
    wsh = lw.src.shape
    wst = [int(np.prod(wsh[d + 1:], dtype=np.int64)) for d in range(len(wsh))]
    cwd = {d: affine_coeffs(widx[d], ids, where, f"weight index {d}") for d in wd}

    def wstride(c):  # the weights' element stride along loop c, the rotation index aside
        return sum(cwd[d].get(id(c.var), 0) * wst[d] for d in wd) if c else 0

    def moves(c):
        return [d for d in range(4) if cx[d].get(id(c.var), 0) != 0]
    kk = [c for c in live if cc.get(id(c.var), 0) == 0 and moves(c) == [3]]
    mm = [c for c in live if cc.get(id(c.var), 0) == 1 and not moves(c)]
    if len(kk) != 1 or len(mm) != 1 or kk[0].extent != mm[0].extent:
        raise ScheduleError(f"{where}: a grouped block needs one in-group reduction loop and one "
                            f"in-group output channel loop of the same extent")
    kl, ml_c = kk[0], mm[0]
    cg = kl.extent
    check_reduction_loops(blk, [kl], where)
    if not (cx[3][id(kl.var)] == 1 and wstride(kl) == 1 and wstride(ml_c) == 0):
        raise ScheduleError(f"{where}: the in-group loops must step the input channel and the "
                            f"weights' lanes by 1")
    # the rotation index must be (k - m) mod cg exactly (it depends on those two loops only)
    rot = widx[rd]
    if any(not (v is kl.var or v is ml_c.var) for v in collect(rot, lambda x: isinstance(x, Var))):
        raise ScheduleError(f"{where}: the weights' rotation index depends on other loops")
    from ..expr import Const as _C
    for a in range(cg):
        for b in range(cg):
            val = simplify(substitute(rot, {kl.var: _C(a, "int64"), ml_c.var: _C(b, "int64")}))
            if not (isinstance(val, _C) and int(val.value) == (a - b) % cg):
                raise ScheduleError(f"{where}: the weights are not packed rotated "
                                    f"((k - m) mod {cg} at k={a}, m={b})")
    gl = [c for c in live if c not in (kl, ml_c) and cc.get(id(c.var), 0) == cg
          and moves(c) == [3] and cx[3][id(c.var)] == cg and wstride(c) == cg]
    gi = gl[0] if gl else None
    pix = [c for c in live if c not in (kl, ml_c, gi) and cc.get(id(c.var), 0) != 0]
    ml, sw, th, tw, kh, kw, dh, dw = _pixel_and_taps(blk, live, pix, (kl, ml_c, gi), cx,
                                                     wstride, where)
    wr = ml.extent if ml is not None else 1
    nr = cg * (gi.extent if gi is not None else 1)
    nv = -(-nr // ISAS[isa])
    lanes = ISAS[isa]
    if isa != "scalar" and lanes % cg:
        raise ScheduleError(f"{where}: {cg} channels per group do not divide {isa}'s {lanes} lanes")
    if wr * nv * cg > MAX_ACCUMULATORS[isa]:
        raise ScheduleError(f"{where}: register block {wr}x{nr} with {cg} rotations needs "
                            f"{wr * nv * cg} accumulators; {isa} has room for "
                            f"{MAX_ACCUMULATORS[isa]}")
    _, H, W, Cx = lx.src.shape
    params = (cg, wr, nr, kh, kw, sw, dh, dw, H, W, W * Cx, Cx, wstride(th), wstride(tw),
              wst[rd], cc.get(id(ml.var), 0) if ml else 0, int(guard is not None))
    _replace_by_call(sch, f, blk, chain, live, st, lx, lw, guard, norm, (cidx, xidx, widx),
                     params, isa, dtype, where, "gconv")


def dwconv_kernel_call(isa: str, dtype: str, params: tuple, c: AddressOf, x: AddressOf,
                       wt: AddressOf, ih0, iw0, accumulate, epi: tuple | None = None,
                       epi_args: tuple = (), family: str = "dwconv") -> KernelCall:
    """The ``KernelCall`` of the ``dwconv`` micro-kernel (``ember.codegen.microkernel_dwconv``)
    with shape ``params`` (its key after ``(family, isa, dtype)``: ``wr, nr, kh, kw, sw, dh,
    dw, H, W, sxh, sxw, swh, sww, ldc, guarded``); ``c``: the block's first output, ``x``: the
    image's pixel (0, 0) of the block's first channel, ``wt``: tap (0, 0) of that channel;
    ``ih0``/``iw0``: input coordinates of tap (0, 0) of the block's first pixel (int64
    expressions or ints); ``epi``/``epi_args``: a register epilogue as ``gemm_kernel_call``'s;
    ``family="gconv"``: the grouped kernel, ``params`` then ``cg, wr, nr, kh, kw, sw, dh, dw, H,
    W, sxh, sxw, swh, sww, swt, ldc, guarded`` (``microkernel_dwconv.gconv_params``).
    Used by ``tensorize_dwconv`` and ``rules/inverted_residual``."""
    from .tensorize import as_index, call_tail, dtype_short
    params = tuple(params) + ((tuple(epi),) if epi else ())
    key = (family, isa, dtype) + params
    digest = hashlib.sha1(repr(params).encode()).hexdigest()[:8]
    wr, nr, kh, kw = params[1:5] if family == "gconv" else params[:4]
    g = f"g{params[0]}_" if family == "gconv" else ""
    name = f"ember_ukr_{family}_{isa}_{dtype_short(dtype)}_{g}{wr}x{nr}_k{kh}x{kw}_{digest}"
    tail, epi_reads = call_tail(accumulate, epi, epi_args)
    return KernelCall(name, [c, x, wt, as_index(ih0), as_index(iw0)] + tail, key,
                      reads=[x.src, wt.src] + epi_reads, writes=[c.src])
