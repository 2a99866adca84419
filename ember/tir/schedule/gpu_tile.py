"""The GPU primitive ``tile_gemm``: a GEMM-like reduction block run on shared-memory tiles and
per-thread register tiles (the classic blocked GPU matrix product; Volkov & Demmel, "Benchmarking
GPUs to tune dense linear algebra", SC'08; TVM's ``cache_read(..., "shared")`` + ``compute_at``
GEMM schedules).

A block ``C[s] = C[s] + X * Y`` (or ``+ select(c, X * Y, 0)``, a convolution's padding) is
*GEMM-like* when its spatial iterators split into three groups:

- ``M``: iterators that ``Y`` does not read (rows of the product; a convolution's batch and
  output pixels);
- ``N``: iterators that ``Y`` reads and ``X`` does not (columns; output channels);
- ``batch``: iterators both read (a batched matmul's leading axes);

and its reduce iterators form ``K``. Each group is fused row-major into one index (``m``, ``n``,
``k``; a convolution's operand ``X`` becomes its implicit im2col matrix). The block's nest
becomes one launch:

    for bz in B  blockIdx.z:                 # batch (absent when B = 1)
      for by in ceil(M / tm)  blockIdx.y:
        for bx in ceil(N / tn)  blockIdx.x:
          alloc As: shared[tk, tm]; alloc Bs: shared[tk, tn]
          for t in (tm/rm)*(tn/rn)  threadIdx.x:        # ty = t // (tn/rn), tx = t % (tn/rn)
            alloc acc: local[rm, rn] = init
            for ko in ceil(K / tk):
              As <- X tile (each thread copies every T-th element, zero beyond M/K)
              Bs <- Y tile (likewise, zero beyond N/K)
              barrier
              for ki in tk:  a <- As[ki, ty*rm:], b <- Bs[ki, tx*rn:]; acc += outer(a, b)
              barrier
            C <- acc (guarded beyond M/N)

Copies are coalesced: consecutive threads copy consecutive elements along the operand's
contiguous axis (``k`` when the operand's last index reads the last reduce iterator, else
``m``/``n``). Tails are zero-filled in shared memory, so the sum over ``k`` is the serial order's
sum plus exact zeros.
"""

from __future__ import annotations

from ...errors import ScheduleError
from ..arith import collect, post_order, substitute
from ..expr import BinOp, Const, Load, Select, Var, binop
from ..stmt import Allocate, Barrier, Block, Buffer, For, IfThenElse, Seq, Store, seq
from .analysis import loop_vars_used, replace_node


def _c(v: int) -> Const:
    return Const(v, "int64")


def _and(a, b):
    if a is None:
        return b
    return b if b is None else binop("and", a, b)


def _unfuse(idx, ivs) -> dict:
    """``{iter var: expr of idx}`` decomposing row-major fused index ``idx`` over ``ivs``."""
    out, stride = {}, 1
    for iv in reversed(ivs):
        e = idx if stride == 1 else binop("floordiv", idx, _c(stride))
        if iv is not ivs[0]:
            e = binop("floormod", e, _c(iv.extent))
        out[iv.var] = _c(0) if iv.extent == 1 else e
        stride *= iv.extent
    return out


def _prod(ivs) -> int:
    n = 1
    for iv in ivs:
        n *= iv.extent
    return n


def _gemm_parts(b: Block, where: str):
    """``(X, Y, M iters, N iters, batch iters, K iters, k-contiguous X?, k-contiguous Y?)`` of a
    GEMM-like block (see the module doc), else a ``ScheduleError`` saying why not."""
    from .gpu import _reduction_parts
    parts = _reduction_parts(b)
    if parts is None or parts[0] != "add" or b.init is None or b.predicate is not None:
        raise ScheduleError(f"{where}: block {b.name!r} is not a sum of its own output and a "
                            f"product")
    if not isinstance(b.init, Store) or not isinstance(b.init.value, Const):
        raise ScheduleError(f"{where}: block {b.name!r} starts from a computed value, not a "
                            f"constant")
    value, cond = parts[1], None
    if isinstance(value, Select) and isinstance(value.f, Const) and value.f.value == 0:
        cond, value = value.cond, value.t
    if not (isinstance(value, BinOp) and value.op == "mul"):
        raise ScheduleError(f"{where}: block {b.name!r} sums {type(value).__name__}, not a "
                            f"product of two operands")
    if b.body.buffer.dtype != "float32":
        raise ScheduleError(f"{where}: block {b.name!r} accumulates {b.body.buffer.dtype}; "
                            f"tiling is for float32")
    if any(not isinstance(iv.extent, int) for iv in b.iter_vars):
        raise ScheduleError(f"{where}: block {b.name!r} has symbolic extents; tiles need "
                            f"static shapes")
    x, y = value.a, value.b
    sp = [iv for iv in b.iter_vars if iv.kind != "reduce"]
    red = [iv for iv in b.iter_vars if iv.kind == "reduce"]
    ux, uy = loop_vars_used(x), loop_vars_used(y)
    if not any(id(iv.var) in ux for iv in sp if id(iv.var) not in uy):
        x, y, ux, uy = y, x, uy, ux
    nside = [iv for iv in sp if id(iv.var) in uy and id(iv.var) not in ux]
    batch = [iv for iv in sp if id(iv.var) in uy and id(iv.var) in ux]
    mside = [iv for iv in sp if id(iv.var) not in uy]
    if not red or not nside or not mside:
        raise ScheduleError(f"{where}: block {b.name!r} has no row/column/reduction structure "
                            f"(M {len(mside)}, N {len(nside)}, K {len(red)} iterators)")
    if cond is not None:
        uc = loop_vars_used(cond)
        if any(id(iv.var) in uc for iv in nside):
            raise ScheduleError(f"{where}: the guard of block {b.name!r} reads a column "
                                f"iterator")
        x = Select(cond, x, Const(0.0, "float32"))
    for e in (x, y):
        for ld in collect(e, lambda n: isinstance(n, Load)):
            if ld.src is b.body.buffer:
                raise ScheduleError(f"{where}: an operand reads the output")

    def k_contig(e):
        loads = [n for n in collect(e, lambda n: isinstance(n, Load))]
        return bool(loads) and id(red[-1].var) in loop_vars_used(loads[0].indices[-1])
    return x, y, mside, nside, batch, red, k_contig(x), k_contig(y)


def _tile_copy(dst: Buffer, src_expr, t: Var, threads: int, rows: int, tk: int, k_contig: bool,
               row0, k0, nrows: int, nk: int, rowvars, kvars, name: str):
    """Cooperative copy of a ``tk x rows`` tile of ``src_expr`` into shared ``dst[kk, rr]``."""
    total = rows * tk
    steps = -(-total // threads)
    lv = Var(f"{name}_l")
    e = binop("add", binop("mul", lv, _c(threads)), t) if steps > 1 else t
    if k_contig:
        rr, kk = binop("floordiv", e, _c(tk)), binop("floormod", e, _c(tk))
    else:
        kk, rr = binop("floordiv", e, _c(rows)), binop("floormod", e, _c(rows))
    g_r, g_k = binop("add", row0, rr), binop("add", k0, kk)
    vmap = dict(_unfuse(g_r, rowvars))
    vmap.update(_unfuse(g_k, kvars))
    val = substitute(src_expr, vmap)
    inb = None
    if nrows % rows:
        inb = _and(inb, binop("lt", g_r, _c(nrows)))
    if nk % tk:
        inb = _and(inb, binop("lt", g_k, _c(nk)))
    if isinstance(val, Select) and isinstance(val.f, Const) and val.f.value == 0:
        inb, val = _and(inb, val.cond), val.t
    if inb is not None:
        val = Select(inb, val, Const(0.0, "float32"))
    body = Store(dst, (kk, rr), val)
    if steps * threads > total:
        body = IfThenElse(binop("lt", e, _c(total)), body)
    return For(lv, steps, body) if steps > 1 else body


def _nest_shape(b: Block, path, where: str):
    """``(loops around b, fused-epilogue buffer or None, epilogue blocks)``: the block's nest
    must be a perfect chain of serial loops, optionally with a one-element buffer allocated
    between the spatial and reduce loops whose value the blocks after the reduction finish (a
    bias / activation fused by ``compute_at``)."""
    loops, ws, epilogue = [], None, []
    k = next((i for i, s in enumerate(path) if isinstance(s, For)), None)
    if k is None:
        raise ScheduleError(f"{where}: the block sits in no loop")
    for i in range(k, len(path) - 1):
        s, nxt = path[i], path[i + 1]
        if isinstance(s, For):
            if s.kind != "serial" or s.body is not nxt:
                raise ScheduleError(f"{where}: the block must sit in a perfect chain of serial "
                                    f"(unscheduled) loops")
            loops.append(s)
        elif isinstance(s, Allocate) and ws is None and s.buffer.alloc_size == 1 and \
                s.buffer.scope == "local" and s.body is nxt and b.body.buffer is s.buffer:
            ws = s.buffer
        elif isinstance(s, Seq) and ws is not None and not epilogue and s.stmts[0] is nxt:
            epilogue = list(s.stmts[1:])
            if not epilogue or any(not isinstance(e, Block) or e.init is not None or
                                   e.predicate is not None or not isinstance(e.body, Store)
                                   for e in epilogue):
                raise ScheduleError(f"{where}: what follows the reduction is not a chain of "
                                    f"element-wise blocks")
        else:
            raise ScheduleError(f"{where}: its loop nest holds more than the block")
    if ws is not None and not epilogue:
        raise ScheduleError(f"{where}: local buffer {ws.name} is never read")
    return loops, ws, epilogue


def _epilogue_store(e: Block, lmap: dict, ws: Buffer, value):
    """Epilogue block ``e`` at output coordinates ``lmap`` (loop var -> expr), with its loads
    of ``ws`` replaced by ``value``."""
    from ..arith import substitute_stmt
    vmap = {iv.var: substitute(bd, lmap) for iv, bd in zip(e.iter_vars, e.bindings)}
    st = substitute_stmt(e.body, vmap)

    def repl(x):
        return value if isinstance(x, Load) and x.src is ws else x
    return Store(st.buffer, st.indices, post_order(st.value, repl))


def tile_gemm(sch, block: str, tm: int, tn: int, tk: int, rm: int, rn: int) -> None:
    """Implementation of ``Schedule.tile_gemm``: GEMM-like reduction block ``block`` (see the
    module doc), alone in an unscheduled loop nest, becomes a launch of ``ceil(M/tm) x
    ceil(N/tn)`` blocks (x batch) of ``(tm/rm)*(tn/rn)`` threads, each thread accumulating an
    ``rm x rn`` register tile from ``tk``-deep shared tiles (a terminal primitive, like
    ``cross_thread_reduce``).

    Raises:
        ScheduleError: the block is not GEMM-like, or not alone in a nest of serial loops that
            bind its iterators one to one; ``rm``/``rn`` do not divide ``tm``/``tn``; a batch
            above 65,535 blocks.
    """
    b, path = sch.find_block(block, "tile_gemm")
    where = f"tile_gemm of block {block!r}"
    if tm % rm or tn % rn or min(tm, tn, tk, rm, rn) < 1:
        raise ScheduleError(f"{where}: tiles {tm}x{tn}x{tk} / registers {rm}x{rn} do not divide")
    loops, ws, epilogue = _nest_shape(b, path, where)
    top = loops[0]
    lvars = {id(lp.var): lp for lp in loops}
    seen = set()
    for iv, bd in zip(b.iter_vars, b.bindings):
        ok = (isinstance(bd, Var) and id(bd) in lvars and lvars[id(bd)].extent == iv.extent
              and id(bd) not in seen) or (isinstance(bd, Const) and iv.extent == 1)
        if not ok:
            raise ScheduleError(f"{where}: iterator {iv.var.name} is not bound to one loop")
        if isinstance(bd, Var):
            seen.add(id(bd))
    if any(id(lp.var) not in seen and lp.extent != 1 for lp in loops):
        raise ScheduleError(f"{where}: a loop drives no iterator")
    loop_iter = {id(bd): iv for iv, bd in zip(b.iter_vars, b.bindings) if isinstance(bd, Var)}
    x, y, mside, nside, batch, red, xk, yk = _gemm_parts(b, where)
    M, N, K, B = _prod(mside), _prod(nside), _prod(red), _prod(batch)
    if B > 65535:
        raise ScheduleError(f"{where}: batch of {B} blocks exceeds blockIdx.z")
    ty_n, tx_n = tm // rm, tn // rn
    threads = ty_n * tx_n
    pre = f"{b.name}"
    bz, by, bx, t = Var(f"{pre}_bz"), Var(f"{pre}_by"), Var(f"{pre}_bx"), Var(f"{pre}_t")
    ko, ki = Var(f"{pre}_ko"), Var(f"{pre}_ki")
    count = [0]

    def loop2(body_of):
        """``for ri in rm: for rj in rn: body_of(ri, rj)`` on fresh variables."""
        count[0] += 1
        i, j = Var(f"{pre}_r{count[0]}i"), Var(f"{pre}_r{count[0]}j")
        return For(i, rm, For(j, rn, body_of(i, j)))
    a_sh = Buffer(f"{pre}_As", (tk, tm), "float32", scope="shared")
    b_sh = Buffer(f"{pre}_Bs", (tk, tn), "float32", scope="shared")
    acc = Buffer(f"{pre}_acc", (rm, rn), "float32", scope="local")
    a_r = Buffer(f"{pre}_a", (rm,), "float32", scope="local")
    b_r = Buffer(f"{pre}_b", (rn,), "float32", scope="local")
    ty = binop("floordiv", t, _c(tx_n)) if ty_n > 1 else _c(0)
    tx = binop("floormod", t, _c(tx_n)) if tx_n > 1 else t
    bmap = _unfuse(bz, batch) if batch else {}

    def sub(e):
        return substitute(e, bmap)
    m0, n0, k0 = binop("mul", by, _c(tm)), binop("mul", bx, _c(tn)), binop("mul", ko, _c(tk))
    copy_a = _tile_copy(a_sh, sub(x), t, threads, tm, tk, xk, m0, k0, M, K, mside, red,
                        f"{pre}_ca")
    copy_b = _tile_copy(b_sh, sub(y), t, threads, tn, tk, yk, n0, k0, N, K, nside, red,
                        f"{pre}_cb")
    ia, jb = Var(f"{pre}_ia"), Var(f"{pre}_jb")
    inner = seq([
        For(ia, rm, Store(a_r, (ia,), Load(a_sh, (ki, binop("add", binop("mul", ty, _c(rm)),
                                                               ia))))),
        For(jb, rn, Store(b_r, (jb,), Load(b_sh, (ki, binop("add", binop("mul", tx, _c(rn)),
                                                               jb))))),
        loop2(lambda i, j: Store(acc, (i, j), binop(
            "add", Load(acc, (i, j)), binop("mul", Load(a_r, (i,)), Load(b_r, (j,))))))])
    kloop = For(ko, -(-K // tk), seq([copy_a, copy_b, Barrier(), For(ki, tk, inner),
                                      Barrier()]))
    init = b.init.value
    out = b.body

    def write(ri, rj):
        gm = binop("add", m0, binop("add", binop("mul", ty, _c(rm)), ri))
        gn = binop("add", n0, binop("add", binop("mul", tx, _c(rn)), rj))
        omap = dict(bmap)
        omap.update(_unfuse(gm, mside))
        omap.update(_unfuse(gn, nside))
        if ws is None:
            store = Store(out.buffer, tuple(substitute(i, omap) for i in out.indices),
                          Load(acc, (ri, rj)))
        else:  # the fused epilogue, reading the accumulator instead of the local ws
            lmap = {lp.var: substitute(loop_iter[id(lp.var)].var, omap) for lp in loops
                    if id(lp.var) in loop_iter}
            store = seq([_epilogue_store(e, lmap, ws, Load(acc, (ri, rj))) for e in epilogue])
        guard = None
        if M % tm:
            guard = _and(guard, binop("lt", gm, _c(M)))
        if N % tn:
            guard = _and(guard, binop("lt", gn, _c(N)))
        return store if guard is None else IfThenElse(guard, store)
    per_thread = Allocate(acc, Allocate(a_r, Allocate(b_r, seq([
        loop2(lambda i, j: Store(acc, (i, j), init)), kloop, loop2(write)]))))
    tx_loop = For(t, threads, per_thread, "thread_binding", {"thread_tag": "threadIdx.x"})
    for n, axis in ((-(-M // tm), "row tiles (blockIdx.x)"), (-(-N // tn), "column tiles "
                                                                "(blockIdx.y)")):
        if n > 65535:
            raise ScheduleError(f"{where}: {n} {axis} exceed 65,535 blocks; use larger tiles")
    # row tiles on blockIdx.x (the printer folds a long x grid), column tiles on blockIdx.y
    nest = For(bx, -(-N // tn), Allocate(a_sh, Allocate(b_sh, tx_loop)), "thread_binding",
               {"thread_tag": "blockIdx.y"})
    nest = For(by, -(-M // tm), nest, "thread_binding", {"thread_tag": "blockIdx.x"})
    if batch:
        nest = For(bz, B, nest, "thread_binding", {"thread_tag": "blockIdx.z"})
    sch.body = replace_node(sch.body, top, nest)


__all__ = ["tile_gemm"]
