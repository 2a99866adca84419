"""Compute-location primitives: compute_at, reverse_compute_at, compute_inline,
reverse_compute_inline. Moving a block under a loop shrinks the buffer it communicates through
to the region one iteration of that loop uses (the buffer keeps full-tensor coordinates through
its ``origin``)."""

from __future__ import annotations

from ...errors import ScheduleError
from ..arith import INF, interval, map_accesses, post_order, prove, simplify, substitute, walk_stmt
from ..expr import BinOp, Const, Expr, IterVar, Load, Var, binop
from ..stmt import Allocate, Block, Buffer, For, KernelCall, Seq, Stmt, Store, seq
from ..symbolic import as_dim, is_symbolic
from .analysis import (block_access_indices, block_reads, block_writes, blocks_in,
                       check_in_scope, exclusive_nest, find_path, loop_bounds, preorder_index, prune, region,
                       replace_node)

LOCAL_LIMIT_BYTES = 64 * 1024  # compacted buffers up to this size live on the stack


def _single_store_block(b: Block, prim: str) -> tuple[Store, Buffer]:
    if not isinstance(b.body, Store):
        raise ScheduleError(f"{prim}: block {b.name!r} is not a single store (it holds "
                            f"{type(b.body).__name__})")
    st = b.body
    sp = [iv for iv in b.iter_vars if iv.kind == "spatial"]
    if len(st.indices) != len(sp) or not all(i is iv.var for i, iv in zip(st.indices, sp)):
        raise ScheduleError(f"{prim}: block {b.name!r} does not store at exactly its spatial "
                            f"iterators ({[iv.var.name for iv in sp]}) in order")
    return st, st.buffer


def _is_param(sch, buf: Buffer) -> bool:
    return any(p is buf for p in sch.func.params)


def _blocks_between(sch, a: Stmt, b: Stmt) -> list[Block]:
    """Blocks strictly after statement ``a``'s subtree and before ``b`` in program order."""
    order = preorder_index(sch.body)
    end_a = max(order[id(x)] for x in walk_stmt(a))
    start_b = order[id(b)]
    return [blk for blk in blocks_in(sch.body) if end_a < order[id(blk)] < start_b]


def _check_inputs_ready(sch, blk: Block, first: Stmt, last: Stmt, prim: str) -> None:
    reads = {id(x) for x in block_reads(blk)}
    for other in _blocks_between(sch, first, last):
        if other is blk:
            continue
        for w in block_writes(other):
            if id(w) in reads:
                raise ScheduleError(f"{prim}: block {blk.name!r} reads {w.name}, which block "
                                    f"{other.name!r} writes between the old and the new "
                                    f"position")


def _inner_loops(path_to_block, loop: For) -> list[For]:
    k = next(i for i, s in enumerate(path_to_block) if s is loop)
    return [s for s in path_to_block[k + 1:] if isinstance(s, For)]


def _build_nest(blk: Block, spatial_dims, reduce_full=True, prim="compute_at"):
    """Loops and a new block computing ``blk`` over ``spatial_dims`` = [(iv, base, extent)],
    plus full loops for its other iterators. Returns (stmt, predicate conds)."""
    loops = []
    binds = []
    conds = []
    dims = {id(iv): (base, ext) for iv, base, ext in spatial_dims}
    for iv in blk.iter_vars:
        v = Var(iv.var.name + "_c")
        if id(iv) in dims:
            base, ext = dims[id(iv)]
            loops.append((v, ext))
            e = simplify(binop("add", base, v))
            binds.append(e)
            lo, hi = interval(e, {**_BOUNDS.get(),
                                  v: (0, ext - 1 if isinstance(ext, int) else INF)})
            if isinstance(iv.extent, Expr):  # symbolic: kept unless the region proves it
                if not (_below_symbolic(e, v, ext, iv.extent)
                        or _whole_extent(e, v, ext, iv.extent)):
                    if lo < 0:
                        conds.append(binop("ge", e, Const(0, "int64")))
                    conds.append(binop("lt", e, iv.extent))
            else:
                if lo < 0:
                    conds.append(binop("ge", e, Const(0, "int64")))
                if hi > iv.extent - 1:
                    conds.append(binop("lt", e, Const(iv.extent, "int64")))
        else:
            loops.append((v, iv.extent))
            binds.append(v)
    pred = None
    for c in conds:
        pred = c if pred is None else binop("and", pred, c)
    nb = Block(blk.name, blk.iter_vars, binds, blk.body, blk.init, pred, dict(blk.annotations))
    s: Stmt = nb
    # spatial loops outside, reduce loops inside, each group in iterator order
    order = [k for k, iv in enumerate(blk.iter_vars) if iv.kind != "reduce"] + \
            [k for k, iv in enumerate(blk.iter_vars) if iv.kind == "reduce"]
    for k in reversed(order):
        v, ext = loops[k]
        s = For(v, ext, s)
    return s


def _below_symbolic(e, v, ext, extent) -> bool:
    """True when index ``e`` (``base + v``, ``v`` in ``[0, ext)``) is provably in
    ``[0, extent)`` for a symbolic ``extent``: a one-point region whose index is an enclosing
    loop's variable of that very extent, or a part of a fused loop's variable
    (``floordiv(L, inner)`` with the loop's extent ``extent * inner``, ``floormod(.., extent)``)
    -- the forms ``fuse`` writes. Inside the loop its extent is positive, so the divisors are."""
    if ext != 1:
        return False
    base = simplify(substitute(e, {v: Const(0, "int64")}))
    return _in_range(base, extent)


def _whole_extent(e, v, ext, extent) -> bool:
    """True when index ``e`` is ``v`` itself over a region of the whole symbolic ``extent``
    (a compute_at row buffer of ``seq`` elements)."""
    from ..symbolic import dims_equal
    return e is v and not isinstance(ext, int) and dims_equal(ext, extent)


def _in_range(e, extent) -> bool:
    from ..symbolic import as_dim, dims_equal, prod
    if isinstance(e, Var):
        loop_ext = _BOUNDS.extents.get(id(e))
        return loop_ext is not None and dims_equal(loop_ext, extent)
    if isinstance(e, BinOp) and e.op == "floormod":
        return dims_equal(e.b, extent) and _nonneg(e.a)
    if isinstance(e, BinOp) and e.op == "floordiv":
        # floordiv(x, c) < n when x < n * c
        return _nonneg(e.a) and _in_range(e.a, as_dim(prod([extent, e.b])))
    return False


def _nonneg(e) -> bool:
    """``e >= 0`` for loop variables and their floor divisions/moduli by positive divisors."""
    if isinstance(e, Var):
        return id(e) in _BOUNDS.extents
    if isinstance(e, BinOp) and e.op in ("floordiv", "floormod"):
        return _nonneg(e.a)
    return False


class _Bounds:
    """Bounds of the loops enclosing the insertion point (set while building a nest)."""

    def __init__(self):
        self.value = {}
        self.extents = {}  # id(loop var) -> extent of the enclosing loops (symbolic ones)

    def get(self):
        return self.value


_BOUNDS = _Bounds()


def _compact(sch, buf: Buffer, loop_var: Var, reg) -> None:
    """Shrink allocated ``buf`` to ``reg`` and allocate it inside the loop ``loop_var`` when
    every access to it is inside that loop."""
    alloc_path = find_path(sch.body, lambda s: isinstance(s, Allocate) and s.buffer is buf)
    if alloc_path is None:
        return
    loop_path = find_path(sch.body, lambda s: isinstance(s, For) and s.var is loop_var)
    loop = loop_path[-1]
    total = sum(1 for k, b, _ in _all_accesses(sch.body) if b is buf)
    inside = sum(1 for k, b, _ in _all_accesses(loop.body) if b is buf)
    if total != inside:
        return
    shape = [ext for _, ext in reg]
    origin = [base for base, _ in reg]
    if any(is_symbolic(e) for e in shape):
        # a symbolic region (a row of ``seq`` elements): a workspace, which the C printer
        # allocates once per task of a parallel loop rather than per iteration
        scope = "global"
    else:
        nbytes = int(max(1, _prod(shape))) * _itemsize(buf.dtype)
        scope = "local" if nbytes <= LOCAL_LIMIT_BYTES else buf.scope
    nb = Buffer(buf.name, shape, buf.dtype, scope, None, origin)
    alloc = alloc_path[-1]
    body = replace_node(sch.body, alloc, alloc.body)
    loop = find_path(body, lambda s: isinstance(s, For) and s.var is loop_var)[-1]
    inner = map_accesses(loop.body, lambda b, idx: (nb, idx) if b is buf else (b, idx))
    sch.body = replace_node(body, loop, For(loop.var, loop.extent, Allocate(nb, inner),
                                            loop.kind, dict(loop.annotations)))


def _inside(root: Stmt, node: Stmt) -> bool:
    return any(x is node for x in walk_stmt(root))


def _all_accesses(s):
    from .analysis import accesses
    return accesses(s)


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


def _itemsize(dtype: str) -> int:
    import numpy as np
    from ...dtypes import itemsize
    return itemsize(dtype)


def compute_at(sch, block: str, loop) -> None:
    """Implementation of ``Schedule.compute_at`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.compute_at`` records it and restores the function if this raises).
    The intermediate buffer is compacted to the region read per iteration of ``loop``.

    Raises:
        ScheduleError: the block is not a single store at its spatial iterators, writes a function
            output, has no consumer or one outside ``loop``, comes after ``loop``, or its inputs
            are not ready there."""
    prim = "compute_at"
    blk, bpath = sch.find_block(block, prim)
    f, lpath = sch.find_loop(loop, prim)
    where = f"{prim} of block {block!r} at loop {f.var.name}"
    hoist = any(s is f for s in bpath)  # already inside: move it up to that loop's level
    st, buf = _single_store_block(blk, where)
    if _is_param(sch, buf):
        raise ScheduleError(f"{where}: the block writes function output {buf.name}; computing "
                            f"only a region of it per iteration would leave parts unwritten")
    writers = [b for b in blocks_in(sch.body) if any(w is buf for w in block_writes(b))]
    if len(writers) != 1:
        raise ScheduleError(f"{where}: {buf.name} is written by {len(writers)} blocks")
    readers = [b for b in blocks_in(sch.body) if b is not blk
               and any(r is buf for r in block_reads(b))]
    if not readers:
        raise ScheduleError(f"{where}: no block reads {buf.name}")
    under = {id(b) for b in blocks_in(f.body)}
    for r in readers:
        if id(r) not in under:
            raise ScheduleError(f"{where}: consumer block {r.name!r} of {buf.name} is not "
                                f"inside loop {f.var.name}")
    nest = exclusive_nest(bpath)
    if nest is f:
        raise ScheduleError(f"{where}: the loop holds only this block")
    order = preorder_index(sch.body)
    if not hoist:
        if order[id(nest)] > order[id(f)]:
            raise ScheduleError(f"{where}: the block comes after the loop in program order")
        _check_inputs_ready(sch, blk, nest, f, where)
    else:
        k = next(i for i, s in enumerate(bpath) if s is f)
        for s in bpath[k + 1:]:
            if isinstance(s, For) and s is not nest and not _inside(nest, s):
                for r in readers:
                    rp = find_path(s, lambda x: x is r)
                    if rp is None:
                        raise ScheduleError(f"{where}: loop {s.var.name} between holds the block "
                                            f"but not its consumer {r.name!r}")
    # the region of buf the consumers read in one iteration of f
    tuples, inner = [], []
    for r in readers:
        rpath = find_path(f, lambda s: s is r)
        loops_in = [s for s in rpath[1:] if isinstance(s, For)]
        for t in block_access_indices(r, buf, "read"):
            tuples.append((t, loops_in))
    outer_bounds = loop_bounds(lpath)
    sp = [iv for iv in blk.iter_vars if iv.kind == "spatial"]
    reg = _union_region(tuples, [iv.extent for iv in sp], outer_bounds)
    _BOUNDS.value = outer_bounds
    _BOUNDS.extents = {id(x.var): x.extent for x in lpath if isinstance(x, For)}
    new_nest = _build_nest(blk, [(iv, base, ext) for iv, (base, ext) in zip(sp, reg)])
    check_in_scope(sch.body, _without(new_nest, buf), lpath, where)
    body = replace_node(sch.body, nest, Seq([]))
    f2 = find_path(body, lambda s: isinstance(s, For) and s.var is f.var)[-1]
    body = replace_node(body, f2, For(f2.var, f2.extent, seq([new_nest, f2.body]), f2.kind,
                                      dict(f2.annotations)))
    sch.body = prune(body)
    _compact(sch, buf, f.var, reg)


def _union_region(tuples_with_loops, shape, outer_bounds):
    """Region covering index tuples, each varying over its own inner loops."""
    regs = [region([t], loops, shape, outer_bounds) for t, loops in tuples_with_loops]
    out = []
    from .analysis import _const_diff
    for d, n in enumerate(shape):
        bases = [r[d] for r in regs]
        b0 = bases[0][0]
        diffs = [_const_diff(b, b0) for b, _ in bases]
        if all(x is not None for x in diffs) and any(is_symbolic(e) for _, e in bases):
            # a symbolic extent (a row of ``seq`` elements): one region when every tuple
            # reads the same one
            from ..symbolic import dims_equal
            if len(set(diffs)) == 1 and all(dims_equal(e, bases[0][1]) for _, e in bases):
                out.append((simplify(binop("add", b0, Const(diffs[0], "int64"))),
                            as_dim(bases[0][1])))
            else:
                out.append((Const(0, "int64"), n))
        elif all(x is not None for x in diffs):
            lo = min(diffs)
            hi = max(dd + ext - 1 for dd, (_, ext) in zip(diffs, bases))
            out.append((simplify(binop("add", b0, Const(lo, "int64"))), hi - lo + 1))
        else:
            out.append((Const(0, "int64"), n))
    return out


def reverse_compute_at(sch, block: str, loop) -> None:
    """Implementation of ``Schedule.reverse_compute_at`` on ``sch`` (rewrites ``sch.body`` in
    place; ``Schedule.reverse_compute_at`` records it and restores the function if this raises).

    Raises:
        ScheduleError: the block is a reduction, is already inside ``loop``, does not read exactly
            one buffer produced in ``loop`` elementwise, comes before ``loop``, or a producer
            reduces over a loop outside ``loop``."""
    prim = "reverse_compute_at"
    blk, bpath = sch.find_block(block, prim)
    f, lpath = sch.find_loop(loop, prim)
    where = f"{prim} of block {block!r} at loop {f.var.name}"
    if any(s is f for s in bpath):
        raise ScheduleError(f"{where}: the block is already inside that loop")
    if blk.init is not None or any(iv.kind == "reduce" for iv in blk.iter_vars):
        raise ScheduleError(f"{where}: the block is a reduction; only spatial consumers can be "
                            f"moved under their producer's loop")
    under = blocks_in(f.body)
    produced = {}
    for p in under:
        for w in block_writes(p):
            produced.setdefault(id(w), (w, []))[1].append(p)
    ins = [(b, produced[id(b)][1]) for b in block_reads(blk) if id(b) in produced]
    if len(ins) != 1:
        raise ScheduleError(f"{where}: the block must read exactly one buffer produced inside "
                            f"the loop, it reads {len(ins)}")
    buf, producers = ins[0]
    sp = [iv for iv in blk.iter_vars if iv.kind == "spatial"]
    loads = [ld for s in (blk.body,) for ld in _loads_of(s, buf)]
    dim_iv = None
    for ld in loads:
        if not all(isinstance(i, Var) for i in ld.indices):
            raise ScheduleError(f"{where}: the block reads {buf.name} at {ld.indices}, not at "
                                f"plain iterators (it is not elementwise in {buf.name})")
        ivs = []
        for i in ld.indices:
            m = [iv for iv in sp if iv.var is i]
            if not m:
                raise ScheduleError(f"{where}: index {i.name} of {buf.name} is not a spatial "
                                    f"iterator of the block")
            ivs.append(m[0])
        if len({id(x) for x in ivs}) != len(ivs):
            raise ScheduleError(f"{where}: an iterator indexes two dims of {buf.name}")
        if dim_iv is not None and [id(x) for x in dim_iv] != [id(x) for x in ivs]:
            raise ScheduleError(f"{where}: the block reads {buf.name} at different indices")
        dim_iv = ivs
    for p in producers:
        ppath = find_path(sch.body, lambda s: s is p)
        for s in ppath:
            if isinstance(s, For):
                for iv, b in zip(p.iter_vars, p.bindings):
                    if iv.kind == "reduce" and _uses(b, s.var):
                        raise ScheduleError(f"{where}: producer {p.name!r} reduces over loop "
                                            f"{s.var.name}, which is not inside the target "
                                            f"loop; its result is incomplete in one iteration")
            if s is f:
                break
    nest = exclusive_nest(bpath)
    order = preorder_index(sch.body)
    if order[id(nest)] < order[id(f)]:
        raise ScheduleError(f"{where}: the block comes before the loop in program order")
    _check_inputs_ready(sch, blk, f, nest, where)
    tuples = []
    for p in producers:
        ppath = find_path(f, lambda s: s is p)
        loops_in = [s for s in ppath[1:] if isinstance(s, For)]
        for t in block_access_indices(p, buf, "write"):
            tuples.append((t, loops_in))
    outer_bounds = loop_bounds(lpath)
    reg = _union_region(tuples, [iv.extent for iv in dim_iv], outer_bounds)
    _BOUNDS.value = outer_bounds
    _BOUNDS.extents = {id(x.var): x.extent for x in lpath if isinstance(x, For)}
    new_nest = _build_nest(blk, [(iv, base, ext) for iv, (base, ext) in zip(dim_iv, reg)])
    check_in_scope(sch.body, _without(new_nest, buf), lpath, where)
    body = replace_node(sch.body, nest, Seq([]))
    f2 = find_path(body, lambda s: isinstance(s, For) and s.var is f.var)[-1]
    body = replace_node(body, f2, For(f2.var, f2.extent, seq([f2.body, new_nest]), f2.kind,
                                      dict(f2.annotations)))
    sch.body = prune(body)
    if not _is_param(sch, buf):
        _compact(sch, buf, f.var, reg)


def _without(s: Stmt, buf: Buffer) -> Stmt:
    """``s`` with accesses of ``buf`` hidden (that buffer is re-scoped by compaction)."""
    dummy = Buffer("_", (), buf.dtype)
    return map_accesses(s, lambda b, i: (dummy, ()) if b is buf else (b, i))


def _uses(e: Expr, v: Var) -> bool:
    from .analysis import loop_vars_used
    return id(v) in loop_vars_used(e)


def _loads_of(s: Stmt, buf: Buffer) -> list[Load]:
    from ..arith import collect, stmt_exprs
    out = []
    for x in walk_stmt(s):
        for e in stmt_exprs(x):
            out += collect(e, lambda n: isinstance(n, Load) and n.src is buf)
    return out


def compute_inline(sch, block: str) -> None:
    """Implementation of ``Schedule.compute_inline`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.compute_inline`` records it and restores the function if this raises).

    Raises:
        ScheduleError: the block is a reduction, not a single store, writes a function output,
            reads its own output, is not the sole producer, or a tensorized call reads its
            buffer."""
    prim = "compute_inline"
    blk, bpath = sch.find_block(block, prim)
    where = f"{prim} of block {block!r}"
    if blk.init is not None:
        raise ScheduleError(f"{where}: the block is a reduction; only elementwise blocks inline")
    st, buf = _single_store_block(blk, where)
    if _is_param(sch, buf):
        raise ScheduleError(f"{where}: the block writes function output {buf.name}")
    if _loads_of(blk.body, buf):
        raise ScheduleError(f"{where}: the block reads its own output {buf.name}")
    writers = [b.name for b in blocks_in(sch.body) if any(w is buf for w in block_writes(b))]
    if writers != [block]:
        raise ScheduleError(f"{where}: {buf.name} is written by blocks {writers}; only a sole "
                            f"producer can be inlined")
    nest = exclusive_nest(bpath)
    for x in walk_stmt(sch.body):
        if isinstance(x, KernelCall) and any(b is buf for b in x.reads):
            raise ScheduleError(f"{where}: a tensorized call reads {buf.name}")
    sp = [iv.var for iv in blk.iter_vars]
    value = st.value

    def inline_expr(e: Expr) -> Expr:
        def g(n):
            if isinstance(n, Load) and n.src is buf:
                return substitute(value, dict(zip(sp, n.indices)))
            return n
        return post_order(e, g)

    body = replace_node(sch.body, nest, Seq([]))
    body = _map_exprs(body, inline_expr)
    alloc = find_path(body, lambda s: isinstance(s, Allocate) and s.buffer is buf)
    if alloc is not None:
        body = replace_node(body, alloc[-1], alloc[-1].body)
    sch.body = prune(body)


def _map_exprs(s: Stmt, fe) -> Stmt:
    """Apply ``fe`` to every expression held by statements under ``s``."""
    from ..stmt import IfThenElse
    if isinstance(s, Store):
        return Store(s.buffer, tuple(fe(i) for i in s.indices), fe(s.value))
    if isinstance(s, For):
        return For(s.var, s.extent, _map_exprs(s.body, fe), s.kind, dict(s.annotations))
    if isinstance(s, Seq):
        return Seq([_map_exprs(x, fe) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _map_exprs(s.body, fe))
    if isinstance(s, IfThenElse):
        return IfThenElse(fe(s.cond), _map_exprs(s.then, fe),
                          _map_exprs(s.else_, fe) if s.else_ is not None else None)
    if isinstance(s, Block):
        return Block(s.name, s.iter_vars, [fe(b) for b in s.bindings], _map_exprs(s.body, fe),
                     _map_exprs(s.init, fe) if s.init is not None else None,
                     fe(s.predicate) if s.predicate is not None else None, dict(s.annotations))
    if isinstance(s, KernelCall):
        return KernelCall(s.name, [fe(a) for a in s.args], s.key, list(s.reads),
                          list(s.writes))
    return s


def reverse_compute_inline(sch, block: str) -> None:
    """Implementation of ``Schedule.reverse_compute_inline`` on ``sch`` (rewrites ``sch.body`` in
    place; ``Schedule.reverse_compute_inline`` records it and restores the function if this
    raises).

    Raises:
        ScheduleError: the block is a reduction or not a single store, does not read exactly one
            intermediate elementwise, or that buffer's producer is not one single-store
            non-reduction block or has other consumers."""
    prim = "reverse_compute_inline"
    blk, bpath = sch.find_block(block, prim)
    where = f"{prim} of block {block!r}"
    if blk.init is not None or any(iv.kind == "reduce" for iv in blk.iter_vars):
        raise ScheduleError(f"{where}: the block is a reduction")
    if not isinstance(blk.body, Store):
        raise ScheduleError(f"{where}: the block is not a single store")
    st = blk.body
    # the buffer it consumes elementwise
    cands = []
    for b in block_reads(blk):
        loads = _loads_of(blk.body, b)
        ivars = [iv.var for iv in blk.iter_vars]
        ok = all(len(ld.indices) == len(ivars) and all(isinstance(i, Var) for i in ld.indices)
                 and {id(i) for i in ld.indices} == {id(v) for v in ivars} for ld in loads)
        same = all(all(a is b2 for a, b2 in zip(ld.indices, loads[0].indices)) for ld in loads)
        if ok and same and not _is_param(sch, b):
            cands.append((b, loads[0].indices))
    if len(cands) != 1:
        raise ScheduleError(f"{where}: the block must read exactly one intermediate buffer at "
                            f"all of its iterators (elementwise); found {len(cands)} such "
                            f"buffers")
    buf, cidx = cands[0]
    writers = [b for b in blocks_in(sch.body) if any(w is buf for w in block_writes(b))]
    readers = [b for b in blocks_in(sch.body) if any(r is buf for r in block_reads(b))]
    if len(writers) != 1 or writers[0].init is not None or not isinstance(writers[0].body, Store):
        raise ScheduleError(f"{where}: the producer of {buf.name} must be one non-reduction "
                            f"block with a single store")
    if len(readers) != 1:
        raise ScheduleError(f"{where}: {buf.name} has other consumers "
                            f"({[r.name for r in readers if r is not blk]})")
    prod = writers[0]
    pst = prod.body
    # consumer iterator -> producer index expression
    vmap = {v: pst.indices[d] for d, v in enumerate(cidx)}

    def repl(e: Expr) -> Expr:
        def g(n):
            if isinstance(n, Load) and n.src is buf:
                return pst.value
            return n
        return substitute(post_order(e, g), vmap)

    new_store = Store(st.buffer, tuple(substitute(i, vmap) for i in st.indices), repl(st.value))
    newp = Block(prod.name, prod.iter_vars, prod.bindings, new_store, None, prod.predicate,
                 dict(prod.annotations))
    nest = exclusive_nest(bpath)
    body = replace_node(sch.body, nest, Seq([]))
    body = replace_node(body, prod, newp)
    alloc = find_path(body, lambda s: isinstance(s, Allocate) and s.buffer is buf)
    if alloc is not None:
        body = replace_node(body, alloc[-1], alloc[-1].body)
    sch.body = prune(body)
