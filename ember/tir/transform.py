"""Loop-IR transforms run after scheduling, before code generation.

``lower_blocks`` removes ``Block``s: each block's iteration variables are replaced by their
bindings, its predicate becomes an ``IfThenElse``, and a reduction's ``init`` either becomes a
private scalar accumulator (when the block's reduce loops are innermost and hold only it, the form
the unscheduled lowering produces) or runs under ``if (all reduce iterators == 0)``.
"""

from __future__ import annotations

from .arith import (collect_unique, flat_index, linear_terms, loop_range, map_accesses, prove,
                    simplify,
                    simplify_stmt, stmt_children, stmt_exprs, substitute, substitute_stmt,
                    walk_stmt)
from .expr import AddressOf, BinOp, Call, Cast, Const, Expr, Load, Select, Unary, Var, binop
from .stmt import (Allocate, Block, Buffer, For, IfThenElse, KernelCall, PrimFunc, Seq, Stmt,
                   Store, seq)


def expr_equal(a: Expr, b: Expr) -> bool:
    """Structural equality of two expressions (variables and buffers by identity)."""
    if a is b:
        return True
    if type(a) is not type(b) or a.dtype != b.dtype:
        return False
    if isinstance(a, Const):
        return a.value == b.value
    if isinstance(a, Var):
        return False
    if isinstance(a, BinOp):
        return a.op == b.op and expr_equal(a.a, b.a) and expr_equal(a.b, b.b)
    if isinstance(a, Unary):
        return a.op == b.op and expr_equal(a.a, b.a)
    if isinstance(a, Call):
        return a.name == b.name and len(a.args) == len(b.args) and all(
            expr_equal(x, y) for x, y in zip(a.args, b.args))
    if isinstance(a, Cast):
        return expr_equal(a.value, b.value)
    if isinstance(a, Select):
        return expr_equal(a.cond, b.cond) and expr_equal(a.t, b.t) and expr_equal(a.f, b.f)
    if isinstance(a, (Load, AddressOf)):
        return a.src is b.src and len(a.indices) == len(b.indices) and all(
            expr_equal(x, y) for x, y in zip(a.indices, b.indices))
    return False


def contains_block(s: Stmt) -> bool:
    """True when a ``Block`` occurs in ``s``."""
    return any(isinstance(x, Block) for x in walk_stmt(s))


def lower_blocks(func: PrimFunc) -> PrimFunc:
    """A copy of ``func`` without ``Block`` statements (see the module doc)."""
    if not contains_block(func.body):
        return func
    body = simplify_stmt(_lower(func.body))
    return PrimFunc(func.name, func.params, body, dict(func.attrs))


def _perfect_chain(f: For) -> tuple[list[For], Stmt]:
    chain = [f]
    s = f.body
    while isinstance(s, For):
        chain.append(s)
        s = s.body
    return chain, s


def _accumulator_form(f: For) -> Stmt | None:
    """The scalar-accumulator form of a reduction block whose reduce loops start at ``f``."""
    chain, inner = _perfect_chain(f)
    if not isinstance(inner, Block) or inner.init is None:
        return None
    blk = inner
    if any(c.kind != "serial" for c in chain):
        return None
    red = [(iv, b) for iv, b in zip(blk.iter_vars, blk.bindings) if iv.kind == "reduce"]
    loop_vars = {id(c.var) for c in chain}
    if not all(isinstance(b, Var) for _, b in red) or {id(b) for _, b in red} != loop_vars:
        return None
    if len(red) != len(chain):
        return None
    for iv, b in zip(blk.iter_vars, blk.bindings):
        if iv.kind != "reduce" and any(isinstance(n, Var) and id(n) in loop_vars
                                       for n in _vars(b)):
            return None
    if blk.predicate is not None:
        return None
    upd, init = blk.body, blk.init
    if not (isinstance(upd, Store) and isinstance(init, Store) and upd.buffer is init.buffer
            and all(expr_equal(a, b) for a, b in zip(upd.indices, init.indices))):
        return None
    buf, idx = upd.buffer, upd.indices
    acc = Buffer(f"acc_{buf.name}", (), buf.dtype, scope="local")

    def repl(e: Expr) -> Expr:
        from .arith import post_order

        def g(n):
            if isinstance(n, Load) and n.src is buf and all(
                    expr_equal(a, b) for a, b in zip(n.indices, idx)):
                return Load(acc, ())
            return n
        return post_order(e, g)

    new_val = repl(upd.value)
    if any(isinstance(n, Load) and n.src is buf for n in _loads(new_val)):
        return None  # reads other elements of its own output: keep the general form
    vmap = {iv.var: b for iv, b in zip(blk.iter_vars, blk.bindings)}
    loop: Stmt = Store(acc, (), substitute(new_val, vmap))
    for c in reversed(chain):
        loop = For(c.var, c.extent, loop, c.kind, dict(c.annotations))
    out_idx = tuple(substitute(i, vmap) for i in idx)
    return Allocate(acc, seq([Store(acc, (), substitute(init.value, vmap)), loop,
                              Store(buf, out_idx, Load(acc, ()))]))


def _vars(e: Expr):
    from .arith import collect
    return collect(e, lambda n: isinstance(n, Var))


def _loads(e: Expr):
    from .arith import collect
    return collect(e, lambda n: isinstance(n, Load))


def _lower(s: Stmt) -> Stmt:
    if isinstance(s, For):
        acc = _accumulator_form(s)
        if acc is not None:
            return acc
        return For(s.var, s.extent, _lower(s.body), s.kind, dict(s.annotations))
    if isinstance(s, Block):
        vmap = {iv.var: b for iv, b in zip(s.iter_vars, s.bindings)}
        body = substitute_stmt(_lower(s.body), vmap)
        if s.init is not None:
            red = [b for iv, b in zip(s.iter_vars, s.bindings) if iv.kind == "reduce"]
            init = substitute_stmt(_lower(s.init), vmap)
            if red:
                cond = None
                for b in red:
                    c = binop("eq", b, Const(0, b.dtype))
                    cond = c if cond is None else binop("and", cond, c)
                init = IfThenElse(cond, init)
            body = seq([init, body])
        if s.predicate is not None:
            body = IfThenElse(s.predicate, body)
        return body
    if isinstance(s, Seq):
        return seq([_lower(x) for x in s.stmts])
    if isinstance(s, Allocate):
        fused = _fused_accumulator(s)
        if fused is not None:
            return fused
        return Allocate(s.buffer, _lower(s.body))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _lower(s.then), _lower(s.else_) if s.else_ is not None else None)
    return s


def _fused_accumulator(alloc: Allocate) -> Stmt | None:
    """``Allocate(one-element local buf, [reduction into buf, statements reading it])`` (what
    ``create_prim_func`` emits for a reduction with an elementwise epilogue) as a scalar
    accumulator followed by the epilogue reading it:
    ``acc = init; for r: acc = update; <epilogue with buf -> acc>``."""
    buf = alloc.buffer
    if buf.scope != "local" or buf.size != 1 or not isinstance(alloc.body, Seq):
        return None
    first, rest = alloc.body.stmts[0], alloc.body.stmts[1:]
    if not isinstance(first, For) or not rest:
        return None
    acc_form = _accumulator_form(first)
    if acc_form is None or not isinstance(acc_form.body, Seq):
        return None
    init, loop, store = acc_form.body.stmts
    if store.buffer is not buf:
        return None
    acc = acc_form.buffer
    lowered_rest = [_lower(x) for x in rest]
    tail = [map_accesses(x, lambda b, i: (acc, ()) if b is buf else (b, i)) for x in lowered_rest]
    for x in tail:
        if any(isinstance(n, Store) and n.buffer is acc for n in walk_stmt(x)):
            return None
    return Allocate(acc, seq([init, loop] + tail))


MAX_EXPAND = 64  # unrolled loops up to this extent may be expanded (see ``expand_unrolled``)


def _conditions(s: Stmt):
    """The conditions of the ``IfThenElse``s and ``Select``s under ``s``, in walk order."""
    for x in walk_stmt(s):
        if isinstance(x, IfThenElse):
            yield x.cond
        for e in stmt_exprs(x):
            yield from (q.cond for q in collect_unique(e, lambda n: isinstance(n, Select)))


def _decides(s: Stmt, v: Var) -> bool:
    """True when ``v`` occurs in the condition of a ``Select`` or ``IfThenElse`` under ``s``."""
    return any(any(n is v for n in collect_unique(c, lambda n: isinstance(n, Var)))
               for c in _conditions(s))


def _resolve(e: Expr, vmap: dict, bounds: dict) -> Expr:
    """``e`` with ``vmap`` substituted, descending only into the taken side of a ``Select``
    whose condition becomes a constant (a long select chain costs one path, not all)."""
    from .arith import map_children
    if isinstance(e, Select):
        c = simplify(substitute(e.cond, vmap), bounds)
        if isinstance(c, Const):
            return _resolve(e.t if c.value else e.f, vmap, bounds)
        return Select(c, _resolve(e.t, vmap, bounds), _resolve(e.f, vmap, bounds))
    if isinstance(e, Var):
        return vmap.get(e, e)
    return map_children(e, lambda x: _resolve(x, vmap, bounds))


def _resolve_stmt(s: Stmt, vmap: dict, bounds: dict) -> Stmt:
    if isinstance(s, For):
        return For(s.var, s.extent, _resolve_stmt(s.body, vmap,
                                                   {**bounds, s.var: loop_range(s.extent, bounds)}),
                   s.kind, dict(s.annotations))
    if isinstance(s, Store):
        return Store(s.buffer, tuple(substitute(i, vmap) for i in s.indices),
                     _resolve(s.value, vmap, bounds))
    if isinstance(s, Seq):
        return seq([_resolve_stmt(x, vmap, bounds) for x in s.stmts])
    if isinstance(s, IfThenElse):
        return IfThenElse(_resolve(s.cond, vmap, bounds), _resolve_stmt(s.then, vmap, bounds),
                          _resolve_stmt(s.else_, vmap, bounds) if s.else_ is not None else None)
    return substitute_stmt(s, vmap)


def _hoist_guards(s: Stmt) -> Stmt:
    """Loops whose whole body is ``if (c)`` with ``c`` independent of the loop variable become
    ``if (c) loop`` (so the loop can be vectorized)."""
    from .arith import collect
    if isinstance(s, For):
        body = _hoist_guards(s.body)
        if isinstance(body, IfThenElse) and body.else_ is None and not any(
                n is s.var for n in collect(body.cond, lambda n: isinstance(n, Var))):
            return IfThenElse(body.cond, For(s.var, s.extent, body.then, s.kind,
                                             dict(s.annotations)))
        return For(s.var, s.extent, body, s.kind, dict(s.annotations))
    if isinstance(s, Seq):
        return seq([_hoist_guards(x) for x in s.stmts])
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _hoist_guards(s.then),
                          _hoist_guards(s.else_) if s.else_ is not None else None)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _hoist_guards(s.body))
    return s


def _map_compound(s: Stmt, fn) -> Stmt:
    """``s`` with ``fn`` applied to the statements directly inside a ``Seq``, ``Allocate`` or
    ``IfThenElse`` (``s`` itself when nothing changed, or when ``s`` is another kind)."""
    if isinstance(s, Seq):
        xs = [fn(x) for x in s.stmts]
        return s if all(a is b for a, b in zip(xs, s.stmts)) else seq(xs)
    if isinstance(s, Allocate):
        b = fn(s.body)
        return s if b is s.body else Allocate(s.buffer, b)
    if isinstance(s, IfThenElse):
        t = fn(s.then)
        e = fn(s.else_) if s.else_ is not None else None
        return s if (t is s.then and e is s.else_) else IfThenElse(s.cond, t, e)
    return s


def _expand(s: Stmt, bounds: dict) -> Stmt:
    if isinstance(s, For):
        inner_bounds = {**bounds, s.var: loop_range(s.extent, bounds)}
        if s.kind == "unrolled" and isinstance(s.extent, int) and s.extent <= MAX_EXPAND and _decides(s.body, s.var):
            copies = []
            for k in range(s.extent):
                c = _resolve_stmt(s.body, {s.var: Const(k, s.var.dtype)}, bounds)
                copies.append(_hoist_guards(_expand(simplify_stmt(c, bounds), bounds)))
            return seq(copies)
        body = _expand(s.body, inner_bounds)
        return s if body is s.body else For(s.var, s.extent, body, s.kind, dict(s.annotations))
    return _map_compound(s, lambda x: _expand(x, bounds))


def expand_unrolled(func: PrimFunc) -> PrimFunc:
    """``func`` (without blocks) with each ``unrolled`` loop of extent at most ``MAX_EXPAND``
    whose variable decides a condition (a ``Select`` or ``IfThenElse`` below it) replaced by
    one copy of its body per iteration, the variable a constant: conditions on it are resolved
    at compile time (a select chain over a tile position becomes straight-line code, see
    ``ember.ops.winograd``), and a remaining guard independent of an inner loop is hoisted out
    of that loop. Other loops are left as they are."""
    body = _expand(func.body, {})
    if body is func.body:
        return func
    return PrimFunc(func.name, func.params, body, dict(func.attrs))


MAX_PARTITION_EXTENT = 4096  # longer loops are not partitioned (the ranges are found by probing)
MAX_PARTITION_PARTS = 3     # e.g. left border, interior, right border of a zero-padded row
MAX_PARTITION_BODY = 64     # loops in the body longer than this: not an innermost-ish loop


def _cond_atoms(s: Stmt, v: Var) -> list:
    """The comparisons of ``v`` (``and``/``or`` split) in the conditions of the ``Select``s and
    ``IfThenElse``s under ``s`` that mention no other loop variable than ``v`` (bounds checks of
    one index, e.g. ``(w - 1) >= 0`` of a zero-padded pad stage)."""
    atoms: dict = {}
    stack = list(_conditions(s))
    while stack:
        c = stack.pop()
        if isinstance(c, BinOp) and c.op in ("and", "or"):
            stack += [c.a, c.b]
            continue
        vs = collect_unique(c, lambda n: isinstance(n, Var))
        if vs and all(n is v for n in vs):
            atoms[id(c)] = c
    return list(atoms.values())


def _partition_ranges(f: For, bounds: dict) -> list | None:
    """``[(lo, hi), ...]`` covering ``[0, f.extent)`` on each of which every bounds check of
    ``f.var`` (``_cond_atoms``) is constant, when that takes 2..``MAX_PARTITION_PARTS``
    ranges; else ``None``."""
    if f.kind != "serial" or not isinstance(f.extent, int) or \
            not 1 < f.extent <= MAX_PARTITION_EXTENT:
        return None
    if any(isinstance(x, For) and (not isinstance(x.extent, int) or x.extent > MAX_PARTITION_BODY or x.kind == "parallel")
           for x in walk_stmt(f.body)):
        return None
    atoms = _cond_atoms(f.body, f.var)
    if not atoms:
        return None
    ranges, prev = [], None
    for k in range(f.extent):
        sig = tuple(prove(a, {**bounds, f.var: (k, k)}) for a in atoms)
        if None in sig:
            return None
        if sig != prev:
            ranges.append([k, k + 1])
            prev = sig
        else:
            ranges[-1][1] = k + 1
    if not 1 < len(ranges) <= MAX_PARTITION_PARTS:
        return None
    return [tuple(r) for r in ranges]


def _partition(s: Stmt, bounds: dict) -> Stmt:
    if isinstance(s, For):
        inner = {**bounds, s.var: loop_range(s.extent, bounds)}
        body = _partition(s.body, inner)
        f = s if body is s.body else For(s.var, s.extent, body, s.kind, dict(s.annotations))
        ranges = _partition_ranges(f, bounds)
        if ranges is None:
            return f
        parts = []
        for lo, hi in ranges:
            if hi - lo == 1:  # one iteration: the variable is a constant, no loop
                c = _resolve_stmt(f.body, {f.var: Const(lo, f.var.dtype)}, bounds)
                parts.append(_hoist_guards(simplify_stmt(c, bounds)))
                continue
            nv = Var(f.var.name, f.var.dtype)
            start = binop("add", nv, Const(lo, f.var.dtype)) if lo else nv
            pb = {**bounds, nv: (0, hi - lo - 1)}
            b = simplify_stmt(_resolve_stmt(f.body, {f.var: start}, pb), pb)
            parts.append(_hoist_guards(For(nv, hi - lo, b, f.kind, dict(f.annotations))))
        return seq(parts)
    return _map_compound(s, lambda x: _partition(x, bounds))


def partition_loops(func: PrimFunc) -> PrimFunc:
    """``func`` (without blocks) with each serial loop whose variable is bounds-checked by the
    conditions below it (``Select``/``IfThenElse`` comparisons of that variable alone, as the
    zero padding of a ``pad`` stage: ``(w - 1) >= 0 && (w - 1) < W``) split into consecutive
    loops over the ranges on which every such check is constant (at most
    ``MAX_PARTITION_PARTS``: left border, interior, right border), each check resolved at
    compile time: the interior copy runs without a per-element select, so the C compiler
    vectorizes it (a channels-last pad of a 3-channel image went from 75 to 15 us). Only
    innermost-ish loops (no loop longer than ``MAX_PARTITION_BODY`` inside, no parallel loop)
    of at most ``MAX_PARTITION_EXTENT`` iterations are considered, innermost first; vectorized,
    unrolled and parallel loops are left as they are."""
    body = _partition(func.body, {})
    if body is func.body:
        return func
    return PrimFunc(func.name, func.params, body, dict(func.attrs))


# Row groups: a loop that only calls a gemm micro-kernel on consecutive row blocks of the output
# (``for r in [0, R): ukernel(C + r * mr * ldc, A + r * sa, B, ...)``, B the same for every r)
# becomes one call per pair of row blocks, with a micro-kernel of twice the rows in two groups
# (``microkernel.register_microkernel``'s ``groups``): each B vector loaded feeds twice the
# FMAs and the calls halve. ResNet-50's 7x7 stage-4 convolutions, whose output rows are 7 wide
# (7 x 32 blocks, 14 accumulators), run as 2 x 7 rows: 28 accumulators, 12-16 % faster per
# kernel (docs/performance.md).
ROW_GROUP_ISAS = ("avx512", "avx2")  # the SIMD generators take ``groups``; the scalar one not


def _row_coeff(e: Expr, v: Var):
    """``e``'s constant coefficient in ``v`` when ``e`` is affine in it (else ``None``)."""
    lt = linear_terms(e)
    if lt is None:
        return None
    coeff = 0
    for atom, c in lt[0].values():
        if atom is v:
            coeff = c
        elif _uses(atom, v):
            return None  # v inside a non-linear term
    return int(coeff)


def _address_coeff(a, v: Var):
    """The element stride of pointer argument ``a`` along ``v`` (``None``: not affine)."""
    if not isinstance(a, AddressOf):
        return None
    return _row_coeff(flat_index(a.src, a.indices), v)


def _uses(e, v: Var) -> bool:
    return any(x is v for x in collect_unique(e, lambda n: isinstance(n, Var)))


def _pair_call(k: KernelCall, v: Var):
    """``(mr, ldc, sa, pair kernel name, pair key)`` when micro-kernel call ``k`` can run two
    row blocks of the loop over ``v`` at once (see ``row_groups``; the output address is
    checked by the caller), else ``None``."""
    from .schedule.rules.gemm import REGISTERS
    from .schedule.tensorize import ISAS, MAX_ACCUMULATORS, microkernel_name
    key = k.key
    if len(key) < 7 or key[0] != "gemm" or key[1] not in ROW_GROUP_ISAS or key[6]:
        return None
    if (len(key) > 7 and key[7] is not None) or (len(key) > 9 and key[9] > 1):
        return None  # a register epilogue reads per-row residuals; already grouped
    isa, mr, nr, nred = key[1], key[3], key[4], key[5]
    lanes = ISAS[isa]
    nv = -(-nr // lanes)
    if 2 * mr * nv > MAX_ACCUMULATORS[isa] or 2 * mr * nv + nv + 1 > REGISTERS[lanes]:
        return None
    args = k.args
    if len(args) != 5 + 3 * nred + 1 or not isinstance(args[3], Const):
        return None
    if any(_uses(a, v) for a in args[3:]) or _uses(args[2], v):
        return None  # B, the strides or the accumulate flag change with the row block
    sa = _address_coeff(args[1], v)
    if not sa:
        return None
    pf = len(key) > 8 and bool(key[8])
    name = microkernel_name(isa, key[2], 2 * mr, nr, nred, False, pf, groups=2)
    key2 = ("gemm", isa, key[2], 2 * mr, nr, nred, 0, None, int(pf), 2)
    return mr, int(args[3].value), sa, name, key2


def _paired(f: For) -> Stmt | None:
    """The row-group form of loop ``f`` (see ``row_groups``), or ``None`` when it does not
    qualify."""
    if f.kind != "serial" or not isinstance(f.extent, int) or f.extent < 2:
        return None
    if isinstance(f.body, KernelCall):
        return _paired_in_place(f)
    b = f.body
    if isinstance(b, Allocate) and isinstance(b.body, Seq) and b.body.stmts \
            and isinstance(b.body.stmts[0], KernelCall):
        return _paired_local(f)
    return None


def _paired_in_place(f: For) -> Stmt | None:
    """``for v: ukernel(C + v * mr * ldc, A + v * sa, B, ...)``: pairs of row blocks."""
    k, v = f.body, f.var
    pc = _pair_call(k, v)
    if pc is None:
        return None
    mr, ldc, sa, name, key2 = pc
    if _address_coeff(k.args[0], v) != mr * ldc:
        return None  # the row blocks' outputs are not consecutive rows of C
    v2 = Var(v.name, v.dtype)
    at = {v: binop("mul", v2, Const(2, v.dtype))}
    args = k.args
    pair = KernelCall(name, [substitute(args[0], at), substitute(args[1], at), args[2], args[3],
                             args[4], Const(sa, "int64")] + list(args[5:]), key2,
                      list(k.reads), list(k.writes))
    out = [For(v2, f.extent // 2, pair, "serial", dict(f.annotations))]
    if f.extent % 2:
        out.append(substitute_stmt(k, {v: Const(f.extent - 1, v.dtype)}))
    return seq(out)


def _paired_local(f: For) -> Stmt | None:
    """``for v: { local acc[mr x ldc]; ukernel(acc, A + v * sa, B, ...); epilogue(v, acc) }``
    (a panels-outer GEMM's row loop): one ``acc`` of two blocks per pair, the epilogue once per
    block on its half."""
    v = f.var
    acc, stmts = f.body.buffer, f.body.body.stmts
    k = stmts[0]
    pc = _pair_call(k, v)
    if pc is None or acc.scope != "local" or acc.strides is not None:
        return None
    mr, ldc, sa, name, key2 = pc
    size = 1
    for n in acc.shape:
        size *= n
    c = k.args[0]
    lt = linear_terms(flat_index(acc, c.indices)) if isinstance(c, AddressOf) else None
    if c.src is not acc or size != mr * ldc or lt is None or lt[1] != 0 \
            or any(co for _, co in lt[0].values()) or list(k.writes) != [acc]:
        return None  # the call does not fill the whole local tile from its start
    acc2 = Buffer(acc.name, (2,) + acc.shape, acc.dtype, "local")
    v2 = Var(v.name, v.dtype)

    def relocated(xs, vmap, new, g):
        # ``xs`` at ``vmap`` with ``acc`` (whose origin may move with v) as ``new`` (no origin;
        # block ``g`` of two, or ``None``: the same shape)
        origin = [substitute(o, vmap) for o in acc.origin] if acc.origin is not None else None

        def fn(buf, idx):
            if buf is not acc:
                return buf, idx
            if idx is None:
                return new, None
            rel = [simplify(binop("sub", i, o)) for i, o in zip(idx, origin)] if origin \
                else list(idx)
            return new, tuple(([Const(g, "int64")] if g is not None else []) + rel)
        return [map_accesses(substitute_stmt(x, vmap), fn) for x in xs]
    at = {v: binop("mul", v2, Const(2, v.dtype))}
    args = k.args
    zero = AddressOf(acc2, [Const(0, "int64")] * len(acc2.shape))
    pair = KernelCall(name, [zero, substitute(args[1], at), args[2], args[3], args[4],
                             Const(sa, "int64")] + list(args[5:]), key2,
                      [acc2 if b is acc else b for b in k.reads], [acc2])
    epis = []
    for g in (0, 1):
        vmap = {v: binop("add", binop("mul", v2, Const(2, v.dtype)), Const(g, v.dtype))}
        epis += relocated(stmts[1:], vmap, acc2, g)
    out = [For(v2, f.extent // 2, Allocate(acc2, seq([pair] + epis)), "serial",
               dict(f.annotations))]
    if f.extent % 2:
        acc1 = Buffer(acc.name, acc.shape, acc.dtype, "local")
        last = {v: Const(f.extent - 1, v.dtype)}
        out.append(Allocate(acc1, seq(relocated(stmts, last, acc1, None))))
    return seq(out)


def _groups(s: Stmt) -> Stmt:
    if isinstance(s, For):
        body = _groups(s.body)
        if body is not s.body:
            s = For(s.var, s.extent, body, s.kind, dict(s.annotations))
        p = _paired(s)
        return p if p is not None else s
    return _map_compound(s, _groups)


def row_groups(func: PrimFunc) -> PrimFunc:
    """``func`` (without blocks) with every serial loop whose body is one ``gemm`` micro-kernel
    call on consecutive ``mr``-row blocks of ``C`` (the output address advances ``mr * ldc``
    per iteration, ``A``'s by a constant, ``B`` and every other argument stay the same: the
    row loop of an image's output rows) rewritten to call a ``2 mr``-row micro-kernel with two
    row groups on each pair of blocks (``A`` rows of the second group ``lda2`` = that constant
    further), plus one ordinary call for an odd last block. A loop whose body computes each
    block into a fresh ``local`` tile and then runs an epilogue on it (``Allocate(acc) { call
    (acc, ...); epilogue }``, a panels-outer GEMM's row loop) gets one tile of two blocks per
    pair and the epilogue once per half (the tile's ``origin``, which moves with the loop, is
    resolved into plain indices). Only where the doubled block still fits the register file
    (``tensorize.MAX_ACCUMULATORS``: ``2 * mr * ceil(nr / lanes)`` accumulators, plus the ``B``
    vectors and one broadcast within ``rules.gemm.REGISTERS``), without a register epilogue
    and with ``A`` broadcast (not lane-aligned). Results are identical: each output element sums the same products in the
    same order."""
    body = _groups(func.body)
    if body is func.body:
        return func
    return PrimFunc(func.name, func.params, body, dict(func.attrs))


__all__ = ["lower_blocks", "expr_equal", "contains_block", "stmt_children", "expand_unrolled",
           "partition_loops", "row_groups"]
