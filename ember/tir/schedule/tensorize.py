"""tensorize: replace a loop nest by a call of a tensor intrinsic (a native micro-kernel).

Intrinsic names are ``family.isa.dtype``. The ``gemm`` family matches a perfect loop nest around
one block whose update is ``C[..] = C[..] + A[..] * B[..]`` with indices affine in the nest's
loops, and classifies the loops by the element strides they give each operand:

- the *n* loop: stride 1 in ``C`` and ``B``, absent from ``A`` (the SIMD lanes, extent ``nr``);
- the *m* loop (optional): strided in ``C`` and ``A``, absent from ``B`` (register rows, ``mr``);
- reduction loops: absent from ``C``; any strides in ``A`` and ``B`` (at most 4 of them).

The call becomes ``ember_ukr_gemm_<isa>_<dtype>_<mr>x<nr>_r<k>(C, A, B, ldc, lda, (extent,
stride_a, stride_b) per reduction loop, accumulate)`` whose C definition the code generator takes
from its micro-kernel registry (``ember.codegen.microkernel``), keyed by ISA x register block x
dtype. A block with a zero ``init`` whose reduction lies entirely inside the nest starts from zero
(``accumulate = 0``); otherwise it must have been decomposed (``decompose_reduction``) first.
The ``dwconv`` family (depthwise convolution register blocks, and grouped ones with a few
channels per group: the ``gconv`` kernels) is matched by ``tensorize_dwconv``.
"""

from __future__ import annotations

import hashlib

from ...errors import ScheduleError
from ..arith import linear_terms, loop_range, prove, simplify, substitute
from ..expr import (AddressOf, BinOp, Cast, Const, Expr, Load, Unary, Var, binop,
                    is_static_extent)
from ..stmt import Block, For, IfThenElse, KernelCall, Seq
from .analysis import replace_node

ISAS = {"avx512": 16, "avx2": 8, "scalar": 4}
DTYPES = {"f32": "float32", "bf16": "bfloat16"}  # bf16: vdpbf16ps (``_bf16_pair_loop``)
MAX_ACCUMULATORS = {"avx512": 28, "avx2": 12, "scalar": 64}
MAX_REDUCTION_LOOPS = 4
FAMILIES = ("gemm", "dwconv")  # dwconv: ``tensorize_dwconv`` (depthwise convolution blocks)


def parse_intrin(name: str) -> tuple[str, str, str]:
    """``(family, isa, dtype)`` of an intrinsic name such as ``"gemm.avx512.f32"``; a ``gemm``
    name may end in options (``"gemm.avx512.f32.pfnext"``, see ``intrin_options``).

    Raises:
        ScheduleError: unknown family, ISA, dtype or option.
    """
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) < 3 or parts[0] not in FAMILIES or parts[1] not in ISAS \
            or parts[2] not in DTYPES or (parts[3:] and parts[0] != "gemm") \
            or any(o not in GEMM_OPTIONS and _tail_rows(o) is None for o in parts[3:]):
        raise ScheduleError(f"tensorize: unknown intrinsic {name!r}; known: <family>.<isa>.<dtype> "
                            f"with family in {list(FAMILIES)}, isa in {sorted(ISAS)} and dtype in "
                            f"{sorted(DTYPES)}, then for gemm options from {sorted(GEMM_OPTIONS)}")
    return parts[0], parts[1], DTYPES[parts[2]]


# Options of the gemm intrinsic (dot-separated after the dtype):
# pfnext: also prefetch (into L2) the B block one whole call ahead, i.e. ``B + k * sb`` of the
#   innermost reduction loop, fetched while the current block is reused by other output rows
#   (the weights stream from memory): in a K-blocked convolution the next ``kc x nr`` weight
#   slice, elsewhere the next weight panel (``rules/gemm._default_prefetch``).
# tailR (R >= 2 rows): the row tail of a split that does not divide (``rows % mr == R``: the
#   gemm rule's ``row_tail_tile``) is one R-row call rather than R one-row calls.
GEMM_OPTIONS = ("pfnext",)


def _tail_rows(option: str) -> int | None:
    """``R`` of a ``tailR`` gemm option (``R >= 2``), else ``None``."""
    if option.startswith("tail") and option[4:].isdigit() and int(option[4:]) >= 2:
        return int(option[4:])
    return None


def intrin_options(name: str) -> tuple[str, ...]:
    """The options of intrinsic ``name`` (``parse_intrin`` checked it)."""
    return tuple(name.split(".")[3:])


def dtype_short(dtype: str) -> str:
    """The short name of a micro-kernel dtype in intrinsic and symbol names (``"float32"`` ->
    ``"f32"``, the inverse of ``DTYPES``).

    Raises:
        KeyError: a dtype without micro-kernels."""
    return {v: k for k, v in DTYPES.items()}[dtype]


def microkernel_name(isa: str, dtype: str, mr: int, nr: int, nred: int,
                     a_vec: bool = False, pf_next: bool = False, groups: int = 1) -> str:
    """The C symbol of a gemm micro-kernel (``_av``: lane-aligned ``A``; ``_pn``: prefetches
    the next call's ``B`` block, option ``pfnext``; ``_gG``: ``G`` row groups, see
    ``ember.tir.transform.row_groups``)."""
    short = dtype_short(dtype)
    return (f"ember_ukr_gemm_{isa}_{short}_{mr}x{nr}_r{nred}{'_av' if a_vec else ''}"
            f"{'_pn' if pf_next else ''}{f'_g{groups}' if groups > 1 else ''}")


def _match_update(blk: Block, where: str):
    st = blk.body
    from ..stmt import Store
    if not isinstance(st, Store) or not isinstance(st.value, BinOp) or st.value.op != "add":
        raise ScheduleError(f"{where}: block {blk.name!r} is not an update C = C + A * B")
    from ..transform import expr_equal
    a, b = st.value.a, st.value.b
    for acc, prod in ((a, b), (b, a)):
        if isinstance(acc, Load) and acc.src is st.buffer and all(
                expr_equal(x, y) for x, y in zip(acc.indices, st.indices)):
            while isinstance(prod, Cast):
                prod = prod.value
            if isinstance(prod, BinOp) and prod.op == "mul":
                x, y = _widened_bf16(prod.a), _widened_bf16(prod.b)
                if isinstance(x, Load) and isinstance(y, Load):
                    return st, x, y
            raise ScheduleError(f"{where}: block {blk.name!r} adds {type(prod).__name__} "
                                f"(not a product of two loads: padding or a cast left in the "
                                f"operand? materialize it first)")
    raise ScheduleError(f"{where}: block {blk.name!r} does not accumulate into its own output")


def _widened_bf16(e: Expr) -> Expr:
    """The bfloat16 load under a ``float32`` cast of it (a bf16 GEMM operand: ToMixedPrecision's
    bf16 storage read in float32); any other expression unchanged."""
    if isinstance(e, Cast) and e.dtype == "float32" and isinstance(e.value, Load) \
            and e.value.dtype == "bfloat16":
        return e.value
    return e


def coalesce_reduction_loops(red: list) -> list:
    """Reduction loops ``[(extent, stride_a, stride_b), ...]`` (outermost first) with each
    loop merged into the one around it where the outer one's strides are the inner one's
    times its extent (one contiguous run in both operands: a convolution's kernel columns and
    channels in NHWC, ``(kw, C, C*nr)`` and ``(C, 1, nr)`` -> ``(kw*C, 1, nr)``), so the
    micro-kernel's innermost loop is longer. Used for the bf16 kernels (ResNet's 4-channel
    stem: 7 taps x 2 channel pairs -> 14 pair steps in one loop), without ``pfnext`` (whose
    prefetch distance is the innermost loop's whole extent)."""
    out: list = []
    for ext, sa, sb in red:
        if out and all(isinstance(v, int) for v in (*out[-1], ext, sa, sb)):
            e0, a0, b0 = out[-1]
            if a0 == ext * sa and b0 == ext * sb:
                out[-1] = (e0 * ext, sa, sb)
                continue
        out.append((ext, sa, sb))
    return out


def _bf16_pair_loop(red: list, where: str) -> list:
    """The reduction loops of a bf16 gemm call without the pair loop: ``vdpbf16ps`` consumes
    two adjacent reduction elements per step, so one reduction loop must have extent 2 and unit
    strides in ``A`` and in ``B`` (the K-pair-interleaved packing, ``rules/gemm``).

    Raises:
        ScheduleError: no such loop, or it is not the only extent-2 unit-stride one."""
    pairs = [r for r in red if r[0] == 2 and r[1] == 1 and r[2] == 1]
    if len(pairs) != 1 or len(red) < 2:
        raise ScheduleError(f"{where}: a bf16 micro-kernel needs one reduction loop of extent 2 "
                            f"with unit strides in A and B (the K pairs) and an outer one; "
                            f"reduction loops (extent, stride A, stride B): {red}")
    return [r for r in red if r is not pairs[0]]


def affine_coeffs(e: Expr, loop_ids: set, where: str, what: str) -> dict:
    """Per loop variable id in ``loop_ids`` its coefficient in the integer index ``e`` (``what``
    names it in errors).

    Raises:
        ScheduleError: ``e`` is not a linear integer index, or a loop variable occurs in it
            other than linearly."""
    lt = linear_terms(e)
    if lt is None:
        raise ScheduleError(f"{where}: {what} is not an integer index")
    out = {}
    for atom, c in lt[0].values():
        if isinstance(atom, Var) and id(atom) in loop_ids:
            out[id(atom)] = c
        elif any(id(v) in loop_ids for v in _vars(atom)):
            sym = _symbolic_coeffs(e, [v for v in _vars(e) if id(v) in loop_ids])
            if sym is None:
                raise ScheduleError(f"{where}: {what} is not affine in the tensorized loops")
            return sym
    return out


def _symbolic_coeffs(e: Expr, loops: list) -> dict | None:
    """Per loop variable of ``loops`` its coefficient in ``e`` when ``e`` is affine in them
    with coefficients that may be symbolic (``int64`` expressions over symbols: the row
    stride ``seq`` of a ``(batch, heads, seq, seq)`` operand), else ``None``. Each
    coefficient is the difference ``e(v = 1) - e(v = 0)`` (the other loops at 0) in the
    symbolic normal form; ``e`` must equal its affine rebuild (equal normal forms)."""
    from ..symbolic import as_dim, dims_equal
    zero = {v: Const(0, "int64") for v in loops}
    base = as_dim(substitute(e, zero))
    out, rebuilt = {}, base
    for v in loops:
        c = as_dim(substitute(e, {**zero, v: Const(1, "int64")}) - base)
        if isinstance(c, Expr) and any(x is u for x in _vars(c) for u in loops):
            return None
        out[id(v)] = c
        rebuilt = rebuilt + c * v
    return out if dims_equal(as_dim(e), as_dim(rebuilt)) else None


def _coeffs(buf, idx, loop_ids, where, what):
    from ..arith import flat_index
    return affine_coeffs(flat_index(buf, idx), loop_ids, where,
                         f"the index of {what} ({buf.name})")


def _vars(e):
    from ..arith import collect
    return collect(e, lambda n: isinstance(n, Var))



def tensorize_nest(sch, loop, intrin: str, allow_predicate: bool = False):
    """The perfect loop nest that ``tensorize`` replaces, checked: ``(loop, path to it, the
    loops from ``loop`` inwards, the one block they surround, the error prefix)``.
    ``allow_predicate``: the block may have a predicate (the caller handles it: ``gemm``'s
    row tail).

    Raises:
        ScheduleError: the loops do not nest perfectly around one block, the block has a
            predicate (a split that does not divide), or a loop is parallel/vectorized.
    """
    f, path = sch.find_loop(loop, "tensorize")
    where = f"tensorize of loop {f.var.name} with {intrin}"
    chain = [f]
    s = f.body
    while isinstance(s, For):
        chain.append(s)
        s = s.body
    if not isinstance(s, Block):
        raise ScheduleError(f"{where}: the loops below must nest perfectly around one block")
    blk = s
    if blk.predicate is not None and not allow_predicate:
        raise ScheduleError(f"{where}: block {blk.name!r} has a predicate (a split that does not "
                            f"divide); use divisible tiles")
    for c in chain:
        if c.kind not in ("serial", "unrolled"):
            raise ScheduleError(f"{where}: loop {c.var.name} is {c.kind}")
    return f, path, chain, blk, where


def check_reduction_loops(blk: Block, loops, where: str) -> None:
    """Each loop of ``loops`` (the nest's loops that do not move the output) may drive only
    reduction iterators of ``blk``.

    Raises:
        ScheduleError: a loop drives a spatial iterator."""
    for c in loops:
        bound_to = [iv for iv, b in zip(blk.iter_vars, blk.bindings)
                    if any(v is c.var for v in _vars(b))]
        if any(iv.kind != "reduce" for iv in bound_to):
            raise ScheduleError(f"{where}: loop {c.var.name} does not move the output but drives "
                                f"spatial iterator(s) {[iv.var.name for iv in bound_to]}")


def accumulate_flag(blk: Block, chain: list, where: str) -> int:
    """The micro-kernel's ``accumulate`` argument: 0 when ``blk`` has a zero ``init`` and its
    whole reduction lies in the nest ``chain`` (the kernel starts from zero), 1 without init.

    Raises:
        ScheduleError: an init that is not zero or a reduction partly outside the nest."""
    if blk.init is None:
        return 1
    init_ok = (isinstance(blk.init.value, Const) and blk.init.value.value == 0)
    inside = {id(c.var) for c in chain}
    complete = all(all(id(v) in inside for v in _vars(b))
                   for iv, b in zip(blk.iter_vars, blk.bindings) if iv.kind == "reduce")
    if not (init_ok and complete):
        raise ScheduleError(f"{where}: block {blk.name!r} initializes inside a reduction "
                            f"that is not entirely in the nest; decompose_reduction first")
    return 0


def replace_nest(sch, f: For, blk: Block, chain: list, call: KernelCall, tag: str) -> None:
    """Replace the nest at ``f`` by ``blk`` with body ``call``, keeping only the iterators not
    bound to the nest's loops ``chain``, annotated ``tensorized=tag``."""
    chain_ids = {id(c.var) for c in chain}
    keep = [(iv, b) for iv, b in zip(blk.iter_vars, blk.bindings)
            if not any(id(v) in chain_ids for v in _vars(b))]
    new = Block(blk.name, [iv for iv, _ in keep], [b for _, b in keep], call, None, None,
                {**blk.annotations, "tensorized": tag})
    sch.body = replace_node(sch.body, f, new)


def tensorize(sch, loop, intrin: str) -> None:
    """Implementation of ``Schedule.tensorize`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.tensorize`` records it and restores the function if this raises).
    ``intrin`` is ``<family>.<isa>.<dtype>``; ``dwconv`` goes to ``tensorize_dwconv``, otherwise
    the nest must be a GEMM-like update ``C[..] += A[..] * B[..]`` replaced by a micro-kernel
    ``KernelCall``.

    Raises:
        ScheduleError: unknown intrinsic, an imperfect nest, a predicate, a non-serial loop, dtype
            mismatch, strides or loop roles that do not fit the kernel, too many accumulators, or
            an init inside a partial reduction."""
    family, isa, dtype = parse_intrin(intrin)
    if family == "dwconv":
        from .tensorize_dwconv import tensorize_dwconv
        return tensorize_dwconv(sch, loop, isa, dtype)
    f, path, chain, blk, where = tensorize_nest(sch, loop, intrin, allow_predicate=True)
    st, la, lb = _match_update(blk, where)
    if (st.buffer.dtype != "float32" if dtype == "bfloat16" else st.buffer.dtype != dtype) \
            or la.dtype != dtype or lb.dtype != dtype:
        raise ScheduleError(f"{where}: operand dtypes ({la.dtype}, {lb.dtype} -> "
                            f"{st.buffer.dtype}) do not match the intrinsic's {dtype}")
    vmap = {iv.var: b for iv, b in zip(blk.iter_vars, blk.bindings)}
    bounds = {c.var: loop_range(c.extent, {}) for c in list(path) + chain if isinstance(c, For)}
    cidx = tuple(simplify(substitute(i, vmap), bounds) for i in st.indices)
    aidx = tuple(simplify(substitute(i, vmap), bounds) for i in la.indices)
    bidx = tuple(simplify(substitute(i, vmap), bounds) for i in lb.indices)
    live = [c for c in chain if not is_static_extent(c.extent) or c.extent > 1]
    zero = {c.var: Const(0, "int64") for c in chain
            if is_static_extent(c.extent) and c.extent == 1}
    cidx, aidx, bidx = ([simplify(substitute(i, zero)) for i in t] for t in (cidx, aidx, bidx))
    ids = {id(c.var) for c in live}
    cc = _coeffs(st.buffer, cidx, ids, where, "the output")
    ca = _coeffs(la.src, aidx, ids, where, "operand A")
    cb = _coeffs(lb.src, bidx, ids, where, "operand B")
    # operands may come in either order: B is the one with unit stride along the lanes
    n_loops = [c for c in live if cc.get(id(c.var)) == 1]
    if len(n_loops) != 1:
        raise ScheduleError(f"{where}: expected exactly one loop with unit stride in the output "
                            f"(the SIMD lanes), found {[c.var.name for c in n_loops]}")
    nl = n_loops[0]
    lane_b = 2 if dtype == "bfloat16" else 1  # bf16 B: a K pair per column (``_bf16_pair_loop``)
    if cb.get(id(nl.var)) != lane_b and ca.get(id(nl.var)) == lane_b:
        la, lb, aidx, bidx, ca, cb = lb, la, bidx, aidx, cb, ca
    a_vec = ca.get(id(nl.var), 0) == 1  # lane-aligned A (depthwise): vector loads of A
    if cb.get(id(nl.var)) != lane_b or ca.get(id(nl.var), 0) not in (0, 1) \
            or (a_vec and lane_b != 1):
        raise ScheduleError(f"{where}: along the lane loop {nl.var.name} operand B must have stride "
                            f"{lane_b} and operand A unit or no stride (strides A="
                            f"{ca.get(id(nl.var), 0)}, B={cb.get(id(nl.var), 0)})")
    m_loops = [c for c in live if c is not nl and cc.get(id(c.var), 0) != 0]
    if len(m_loops) > 1:
        raise ScheduleError(f"{where}: more than one row loop ({[c.var.name for c in m_loops]}); "
                            f"fuse or move the extra output loops outside the tensorized nest")
    ml = m_loops[0] if m_loops else None
    if ml is not None and (cb.get(id(ml.var), 0) != 0 or ca.get(id(ml.var), 0) == 0):
        raise ScheduleError(f"{where}: the row loop {ml.var.name} must move A and not B")
    red = [c for c in live if c is not nl and c is not ml]
    if len(red) > MAX_REDUCTION_LOOPS:
        raise ScheduleError(f"{where}: {len(red)} reduction loops; at most "
                            f"{MAX_REDUCTION_LOOPS} (fuse some)")
    check_reduction_loops(blk, red, where)
    red_args = [(c.extent, ca.get(id(c.var), 0), cb.get(id(c.var), 0)) for c in red]
    if dtype == "bfloat16":
        red_args = _bf16_pair_loop(red_args, where)
        if "pfnext" not in intrin_options(intrin):
            red_args = coalesce_reduction_loops(red_args)
    mr = ml.extent if ml is not None else 1
    nr = nl.extent
    accumulate = accumulate_flag(blk, chain, where)
    row_pred, col_pred = (None, None) if blk.predicate is None else \
        _split_tail_predicate(blk.predicate, chain, ml, nl, where, bounds)

    def block_call(rows: int, row=None, cols: int = nr, col=None):
        """The micro-kernel call of ``rows`` x ``cols`` register block starting at row loop
        value ``row`` and lane loop value ``col`` (``None``: 0)."""
        zmap = {c.var: Const(0, "int64") for c in live}
        if row is not None:
            zmap[ml.var] = row
        if col is not None:
            zmap[nl.var] = col
        return gemm_kernel_call(
            isa, dtype, rows, cols,
            AddressOf(st.buffer, [simplify(substitute(i, zmap)) for i in cidx]),
            AddressOf(la.src, [simplify(substitute(i, zmap)) for i in aidx]),
            AddressOf(lb.src, [simplify(substitute(i, zmap)) for i in bidx]),
            cc.get(id(ml.var), 0) if ml else 0, ca.get(id(ml.var), 0) if ml else 0,
            red_args, accumulate, a_vec, pf_next="pfnext" in intrin_options(intrin), where=where)

    def cols_part(rows: int, row=None):
        """``rows`` rows at ``row``, all ``nr`` columns or the column tail: the whole width
        when its last column is in range, else one call per power of two of the remaining
        width ``w`` (``w = 13``: 8, 4 and 1 columns at 0, 8 and 12)."""
        full = block_call(rows, row)
        if col_pred is None:
            return full
        width = _tail_width(col_pred, nl, nr)
        ends = simplify(binop("and", *[substitute(col_pred, {nl.var: Const(c, "int64")})
                                       for c in (0, nr - 1)]))
        if width is None:  # not a plain ``col + e < bound``: one-column calls
            u = Var(nl.var.name + "_t", "int64")
            tail = For(u, nr, IfThenElse(substitute(col_pred, {nl.var: u}),
                                         block_call(rows, row, 1, u)))
            return IfThenElse(ends, full, tail)
        return IfThenElse(ends, full, Seq(_binary_parts(
            width, nr, lambda b, start: block_call(rows, row, b, start))))

    call = cols_part(mr)
    if row_pred is not None:
        # row tail: the whole block when its first and last rows are in range (each term of
        # the predicate is monotone in the row, so all rows between are), else blocks of
        # 4, 2, 1... rows for the remaining height (one-row calls for the rows the predicate
        # keeps when it is not a plain ``row + e < bound``)
        ends = [substitute(row_pred, {ml.var: Const(r, "int64")}) for r in (0, mr - 1)]
        height = _tail_width(row_pred, ml, mr)
        if height is None:
            t = Var(ml.var.name + "_t", "int64")
            tail = For(t, mr, IfThenElse(substitute(row_pred, {ml.var: t}), cols_part(1, t)))
        else:
            tail = Seq(_binary_parts(height, mr, lambda b, start: cols_part(b, start)))
        rem = [r for r in map(_tail_rows, intrin_options(intrin)) if r is not None]
        if rem and rem[0] < mr:
            # exactly rows 0 .. R-1 in range (the predicate keeps an interval of rows): one
            # R-row call (the ``tailR`` option of the GEMM rule's non-dividing tiles)
            r = rem[0]
            at = [substitute(row_pred, {ml.var: Const(x, "int64")}) for x in (0, r - 1)]
            past = substitute(row_pred, {ml.var: Const(r, "int64")})
            tail = IfThenElse(simplify(binop("and", binop("and", *at), Unary("not", past))),
                              cols_part(r), tail)
        call = IfThenElse(simplify(binop("and", *ends)), call, tail)
    replace_nest(sch, f, blk, chain, call, intrin)


def _binary_parts(width: Expr, n: int, part) -> list:
    """The tail of a register block of ``n`` rows or columns of which the first ``width``
    (an int64 expression below ``n``) are in range, as one statement per power of two ``b <
    n``: ``part(b, start)`` when bit ``b`` of ``width`` is set, ``start`` the rows or columns
    the larger parts cover (``width = 13``: 8, 4 and 1 at 0, 8 and 12)."""
    parts, b = [], 1
    while b * 2 < n:
        b *= 2
    w = simplify(width)  # repeated in each test: the C compiler computes it once
    while b >= 1:
        m = binop("floormod", w, Const(2 * b, "int64"))
        parts.append(IfThenElse(binop("ge", m, Const(b, "int64")),
                                part(b, simplify(binop("sub", w, m)))))
        b //= 2
    return parts


def _split_tail_predicate(pred: Expr, chain: list, ml, nl, where: str,
                          bounds: dict | None = None) -> tuple:
    """``(row terms, column terms)`` of a block predicate ``tensorize`` turns into tails
    (each a conjunction or ``None``): every term is a comparison ``e < bound`` (``<=``,
    ``>``, ``>=``) with ``e`` affine in either the row loop ``ml`` or the lane loop ``nl``
    (not both), ``bound`` free of them, and no other loop of the nest (a split that does not
    divide: a symbolic row or column count, with ``compute_at``'s bound checks). Terms that
    hold for every point of the loops' ``bounds`` (``col >= 0``) are dropped.

    Raises:
        ScheduleError: any other predicate."""
    msg = (f"{where}: the block's predicate is not a row or column tail (a split of the row "
           f"or lane loop that does not divide); use divisible tiles")
    inner = {id(c.var) for c in chain if c is not ml and c is not nl}
    terms, rows, cols = [pred], [], []
    while terms:
        e = terms.pop()
        if isinstance(e, BinOp) and e.op == "and":
            terms += [e.a, e.b]
            continue
        if not (isinstance(e, BinOp) and e.op in ("lt", "le", "gt", "ge")):
            raise ScheduleError(msg)
        if any(id(v) in inner for v in _vars(e)):
            raise ScheduleError(msg)
        if bounds is not None and prove(e, bounds) is True:
            continue
        for lp, out in ((ml, rows), (nl, cols)):
            if lp is None or not any(v is lp.var for v in _vars(e)):
                continue
            other = nl if lp is ml else ml
            if (other is not None and any(v is other.var for v in _vars(e))) \
                    or any(v is lp.var for v in _vars(e.b)) or lp.extent < 2:
                raise ScheduleError(msg)
            lt = linear_terms(e.a)
            if lt is None or any(atom is not lp.var and any(v is lp.var for v in _vars(atom))
                                 for atom, _ in lt[0].values()):
                raise ScheduleError(msg)  # the loop inside a non-linear term
            out.append(e)
            break
        else:
            raise ScheduleError(msg)  # a term free of both loops: not a tail
    conj = (lambda ts: None if not ts else
            ts[0] if len(ts) == 1 else binop("and", *ts))
    return conj(rows), conj(cols)


def _tail_width(col_pred: Expr, nl, nr: int):
    """How many lane values ``0 <= u < nr`` the column terms ``col_pred`` keep, as an int64
    expression, when every term is ``nl + e < bound`` or ``<=`` (the lane loop with
    coefficient 1: a split of the column loop), else ``None``. The kept lanes are then
    ``0 .. width - 1``."""
    terms, bounds = [col_pred], []
    while terms:
        e = terms.pop()
        if isinstance(e, BinOp) and e.op == "and":
            terms += [e.a, e.b]
            continue
        if e.op not in ("lt", "le"):
            return None
        lt = linear_terms(e.a)
        if lt is None:
            return None
        coef = [c for atom, c in lt[0].values() if atom is nl.var]
        if coef != [1]:
            return None
        base = simplify(substitute(e.a, {nl.var: Const(0, "int64")}))
        w = binop("sub", e.b, base)
        bounds.append(binop("add", w, Const(1, "int64")) if e.op == "le" else w)
    width = bounds[0]
    for b in bounds[1:]:
        width = binop("min", width, b)
    return binop("max", binop("min", width, Const(nr, "int64")), Const(0, "int64"))


def gemm_kernel_call(isa: str, dtype: str, mr: int, nr: int, c: AddressOf, a: AddressOf,
                     b: AddressOf, ldc, lda, red, accumulate, a_vec: bool = False,
                     epi: tuple | None = None, epi_args: tuple = (),
                     pf_next: bool = False, where: str = "gemm micro-kernel") -> KernelCall:
    """The ``KernelCall`` of the ``gemm`` micro-kernel (``ember.codegen.microkernel``) for one
    ``mr x nr`` register block: ``C[i*ldc + j] (+)= sum A[i*lda + sum r_t*sa_t] * B[j + sum
    r_t*sb_t]`` with ``red`` the reduction loops ``[(extent, sa, sb), ...]`` (element strides)
    and ``c``, ``a``, ``b`` the addresses of the block's first elements; ``accumulate``
    (0/1, an int32 expression or constant) adds to ``C`` instead of overwriting it. ``epi``:
    the register epilogue ``(bias, residual, lo, hi)`` of ``microkernel.EPI_PARAMS`` with its
    arguments ``epi_args = (bias address, residual address, ldr)`` (an unused address may
    repeat another). Used by ``tensorize`` and by kernels built directly from micro-kernels
    (``rules/inverted_residual``). ``pf_next`` also prefetches the ``B`` block of the next
    call (``B + extent * sb`` of the last reduction loop) into L2 (key position 8). ``where``
    starts error messages (``tensorize`` passes the loop and intrinsic).

    Raises:
        ScheduleError: the block needs more accumulators than ``isa`` has registers for.
    """
    lanes = ISAS[isa]
    if mr * -(-nr // lanes) > MAX_ACCUMULATORS[isa]:
        raise ScheduleError(f"{where}: register block {mr}x{nr} needs "
                            f"{mr * -(-nr // lanes)} accumulators; {isa} has room for "
                            f"{MAX_ACCUMULATORS[isa]}")
    args: list[Expr] = [c, a, b, as_index(ldc), as_index(lda)]
    for ext, sa, sb in red:
        args += [as_index(ext), as_index(sa), as_index(sb)]
    tail, epi_reads = call_tail(accumulate, epi, epi_args)
    args += tail
    pf_next = bool(pf_next and red)
    name = microkernel_name(isa, dtype, mr, nr, len(red), a_vec, pf_next)
    key = ("gemm", isa, dtype, mr, nr, len(red), int(a_vec))
    if epi:
        epi = tuple(epi)
        key += (epi,)
        name += "_e" + hashlib.sha1(repr(epi).encode()).hexdigest()[:8]
    if pf_next:
        key = key + (() if epi else (None,)) + (1,)
    return KernelCall(name, args, key, reads=[a.src, b.src] + epi_reads, writes=[c.src])


def call_tail(accumulate, epi, epi_args: tuple) -> tuple[list, list]:
    """The last arguments of a micro-kernel call, ``accumulate`` (an int32 expression, or 0/1)
    then with a register epilogue ``epi`` its ``epi_args = (bias address, residual address,
    ldr)`` (``EPI_PARAMS``); and the buffers those addresses read. Shared by
    ``gemm_kernel_call`` and ``tensorize_dwconv.dwconv_kernel_call``."""
    args = [accumulate if isinstance(accumulate, Expr) else Const(int(accumulate), "int32")]
    if not epi:
        return args, []
    bias, res, ldr = epi_args
    return args + [bias, res, as_index(ldr)], [bias.src, res.src]


def as_index(v) -> Expr:
    """``v`` (an int or an index expression) as an int64 expression."""
    return v if isinstance(v, Expr) else Const(int(v), "int64")
