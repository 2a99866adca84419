"""Cache primitives: cache_read and cache_write add a copy block between a block and one of its
buffers, so the block reads (or writes) a new buffer of the requested ``scope``. Used with
``compute_at`` to stage tiles in fast memory (and to repack operands)."""

from __future__ import annotations

from ...errors import ScheduleError
from ..arith import map_accesses, walk_stmt
from ..expr import IterVar, Load, Var
from ..stmt import Allocate, Block, Buffer, For, Seq, Stmt, Store, seq
from .analysis import block_reads, block_writes, blocks_in, replace_node

SCOPES = ("global", "shared", "local")  # shared: GPU block memory


def _copy_nest(name: str, dst: Buffer, src: Buffer) -> Stmt:
    ivs = [IterVar(n, f"{name}_v{k}") for k, n in enumerate(src.shape)]
    lvs = [Var(f"{name}_l{k}") for k in range(len(ivs))]
    s: Stmt = Block(name, ivs, list(lvs), Store(dst, tuple(iv.var for iv in ivs),
                                                 Load(src, tuple(iv.var for iv in ivs))))
    for iv, lv in reversed(list(zip(ivs, lvs))):
        s = For(lv, iv.extent, s)
    return s


def _unique_name(sch, base: str) -> str:
    names = set(sch.block_names())
    name, k = base, 1
    while name in names:
        name, k = f"{base}_{k}", k + 1
    return name


def _top_statement(sch, bpath) -> tuple[Stmt, Stmt]:
    """The statement of the function's top-level sequence that holds the block, and its parent
    (a ``Seq``, or ``None`` when it is the whole body below the allocations)."""
    k = 0
    while k < len(bpath) - 1 and isinstance(bpath[k], Allocate):
        k += 1
    if isinstance(bpath[k], Seq):
        return bpath[k + 1], bpath[k]
    return bpath[k], None


def _insert(sch, anchor: Stmt, parent, new: Stmt, before: bool) -> None:
    items = [new, anchor] if before else [anchor, new]
    if parent is None:
        sch.body = replace_node(sch.body, anchor, Seq(items))
    else:
        stmts = []
        for s in parent.stmts:
            stmts += items if s is anchor else [s]
        sch.body = replace_node(sch.body, parent, Seq(stmts))


def _hide(s: Stmt, buf: Buffer) -> Stmt:
    dummy = Buffer("_", (), buf.dtype)
    return map_accesses(s, lambda b, i: (dummy, ()) if b is buf else (b, i))


def _inside(top: Stmt, node: Stmt) -> bool:
    return any(x is node for x in walk_stmt(top))


def _check_scope(prim: str, scope: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(f"{prim}: unknown storage scope {scope!r} (known: {SCOPES})")


def cache_read(sch, block: str, index: int, scope: str) -> str:
    """Implementation of ``Schedule.cache_read`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.cache_read`` records it and restores the function if this raises).
    Returns the name of the inserted copy block.

    Raises:
        ScheduleError: unknown ``scope`` (not in ``SCOPES``), ``index`` out of range of the block's
            reads, or the buffer is produced inside the block's own loop nest."""
    prim = "cache_read"
    _check_scope(prim, scope)
    blk, bpath = sch.find_block(block, prim)
    reads = block_reads(blk)
    if not 0 <= index < len(reads):
        raise ScheduleError(f"{prim}: block {block!r} reads {len(reads)} buffers "
                            f"({[b.name for b in reads]}); read_buffer_index {index} is out of "
                            f"range")
    buf = reads[index]
    top, parent = _top_statement(sch, bpath)
    for b in blocks_in(top):
        if any(w is buf for w in block_writes(b)):
            raise ScheduleError(f"{prim}: {buf.name} is produced by block {b.name!r} inside the "
                                f"same loop nest as {block!r}; the copy would run before it "
                                f"is computed")
    name = _unique_name(sch, f"{buf.name}_{scope}")
    nb = Buffer(f"{buf.name}_{scope}", buf.shape, buf.dtype, scope)
    newblk = Block(blk.name, blk.iter_vars, blk.bindings,
                   map_accesses(blk.body, lambda b, i: (nb, i) if b is buf else (b, i)),
                   blk.init, blk.predicate, dict(blk.annotations))
    sch.body = replace_node(sch.body, blk, newblk)
    _, bpath = sch.find_block(block, prim)
    top, parent = _top_statement(sch, bpath)
    from .analysis import check_in_scope
    nest = _copy_nest(name, nb, buf)
    check_in_scope(sch.body, _hide(nest, nb), [p for p in bpath if p is not top and
                                               not _inside(top, p)], prim)
    _insert(sch, top, parent, nest, before=True)
    sch.body = Allocate(nb, sch.body)
    return name


def cache_write(sch, block: str, index: int, scope: str, dtype: str | None = None) -> str:
    """Implementation of ``Schedule.cache_write`` on ``sch`` (rewrites ``sch.body`` in place;
    ``Schedule.cache_write`` records it and restores the function if this raises).
    Returns the name of the inserted copy-out block.

    Raises:
        ScheduleError: unknown ``scope``, ``index`` out of range of the block's writes, or another
            block in the same loop nest accesses the buffer."""
    prim = "cache_write"
    _check_scope(prim, scope)
    blk, bpath = sch.find_block(block, prim)
    writes = block_writes(blk)
    if not 0 <= index < len(writes):
        raise ScheduleError(f"{prim}: block {block!r} writes {len(writes)} buffers; "
                            f"write_buffer_index {index} is out of range")
    buf = writes[index]
    top, parent = _top_statement(sch, bpath)
    for b in blocks_in(top):
        if b is not blk and any(r is buf for r in block_reads(b) + block_writes(b)):
            raise ScheduleError(f"{prim}: block {b.name!r} also accesses {buf.name} inside the "
                                f"same loop nest as {block!r}; it would see the stale original")
    name = _unique_name(sch, f"{buf.name}_{scope}")
    nb = Buffer(f"{buf.name}_{scope}", buf.shape, dtype or buf.dtype, scope)

    def fn(b, i):
        return (nb, i) if b is buf else (b, i)
    newblk = Block(blk.name, blk.iter_vars, blk.bindings, map_accesses(blk.body, fn),
                   map_accesses(blk.init, fn) if blk.init is not None else None,
                   blk.predicate, dict(blk.annotations))
    sch.body = replace_node(sch.body, blk, newblk)
    _, bpath = sch.find_block(block, prim)
    top, parent = _top_statement(sch, bpath)
    from .analysis import check_in_scope
    nest = _copy_nest(name, buf, nb)
    check_in_scope(sch.body, _hide(nest, nb), [p for p in bpath if p is not top and
                                               not _inside(top, p)], prim)
    _insert(sch, top, parent, nest, before=False)
    sch.body = Allocate(nb, sch.body)
    return name
