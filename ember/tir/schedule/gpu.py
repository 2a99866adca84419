"""The GPU loop primitive ``bind``: a loop's iterations become the blocks or threads of a GPU
launch (TVM's ``sch.bind(loop, "threadIdx.x")``)."""

from __future__ import annotations

from ...errors import ScheduleError
from ..arith import walk_stmt
from ..stmt import THREAD_TAGS, For
from .analysis import loop_vars_used
from .loops import check_independent


def bind(sch, loop, thread_tag: str) -> None:
    """Implementation of ``Schedule.bind`` on ``sch``: mark ``loop`` as a ``thread_binding``
    loop with ``annotations["thread_tag"] = thread_tag``.

    Preconditions (each refused with a ``ScheduleError`` naming the loop):
      - ``thread_tag`` is one of ``THREAD_TAGS`` (``blockIdx.{x,y,z}``, ``threadIdx.{x,y,z}``);
      - the loop is serial (not already parallel, vectorized, unrolled or bound);
      - its variable drives no reduction iterator (threads do not combine partial results
        without an explicit cooperative reduction) and the blocks under it share no buffer
        allocated outside it (iterations would race);
      - no enclosing or enclosed loop is bound to the same tag; a ``blockIdx`` loop is not
        nested in a ``threadIdx`` loop (blocks contain threads, not the other way round);
      - it is not nested in a CPU ``parallel`` or ``vectorized`` loop.
    """
    f, path = sch.find_loop(loop, "bind")
    where = f"bind of loop {f.var.name} (extent {f.extent}) to {thread_tag}"
    if thread_tag not in THREAD_TAGS:
        raise ScheduleError(f"{where}: unknown thread tag; use one of {list(THREAD_TAGS)}")
    if f.kind != "serial":
        raise ScheduleError(f"{where}: the loop is already {f.kind}"
                            + (f" ({f.annotations.get('thread_tag')})"
                               if f.kind == "thread_binding" else ""))
    check_independent(f, where, " (bind a spatial loop, or rfactor first)")
    outer = [s for s in path[:-1] if isinstance(s, For)]
    inner = [s for s in walk_stmt(f.body) if isinstance(s, For)]
    for s in outer + inner:
        if s.kind == "thread_binding" and s.annotations.get("thread_tag") == thread_tag:
            raise ScheduleError(f"{where}: loop {s.var.name} is already bound to {thread_tag}")
        if s.kind in ("parallel", "vectorized") and s in outer:
            raise ScheduleError(f"{where}: it is nested in {s.kind} loop {s.var.name}")
    if thread_tag.startswith("blockIdx"):
        for s in outer:
            if s.kind == "thread_binding" and s.annotations["thread_tag"].startswith("threadIdx"):
                raise ScheduleError(f"{where}: it is nested in loop {s.var.name}, bound to "
                                    f"{s.annotations['thread_tag']} (blocks contain threads)")
    ann = dict(f.annotations)
    ann["thread_tag"] = thread_tag
    from .analysis import replace_node
    sch.body = replace_node(sch.body, f, For(f.var, f.extent, f.body, "thread_binding", ann))


__all__ = ["bind"]


_COMBINERS = ("add", "max", "min", "mul")


def _reduction_parts(block):
    """``(combiner, value)`` of a reduction block whose update is ``buf[idx] = op(buf[idx],
    value)`` (or ``op(value, buf[idx])``), else ``None``."""
    from ..expr import BinOp, Load
    from ..stmt import Store
    from ..transform import expr_equal
    upd = block.body
    if not isinstance(upd, Store) or not isinstance(upd.value, BinOp) or \
            upd.value.op not in _COMBINERS:
        return None

    def is_self(e):
        return isinstance(e, Load) and e.src is upd.buffer and len(e.indices) == len(
            upd.indices) and all(expr_equal(a, b) for a, b in zip(e.indices, upd.indices))
    v = upd.value
    if is_self(v.a) and not any(is_self(x) for x in _loads(v.b)):
        return v.op, v.b
    if is_self(v.b) and not any(is_self(x) for x in _loads(v.a)):
        return v.op, v.a
    return None


def _loads(e):
    from ..arith import collect
    from ..expr import Load
    return collect(e, lambda n: isinstance(n, Load))


def cross_thread_reduce(sch, loop, threads: int) -> None:
    """Implementation of ``Schedule.cross_thread_reduce``: the reduction loop ``loop``, which
    directly holds one reduction block with one reduce iterator, becomes a cooperative
    reduction of ``threads`` threads (``threadIdx.x``) of one block: each thread folds a strided
    slice of the reduction into a private partial, the partials go to a ``shared`` buffer and
    are combined by a tree of halving steps separated by barriers; thread 0 stores the result.
    The block is replaced by loop IR (a terminal primitive, like ``tensorize``).

    Raises:
        ScheduleError: ``threads`` not a power of two >= 2; the loop does not directly hold a
            single reduction block driven only by it, whose update is ``sum``/``max``/``min``/
            ``prod`` of its own output and a value; the block has a predicate; the loop is
            inside a ``threadIdx`` loop (the threads are this primitive's)."""
    from ..arith import substitute, substitute_stmt
    from ..expr import Const, IterVar, Load, Var, binop, reduce_identity
    from ..stmt import Allocate, Barrier, Block, Buffer, For, IfThenElse, Store, seq
    f, path = sch.find_loop(loop, "cross_thread_reduce")
    where = f"cross_thread_reduce of loop {f.var.name} (extent {f.extent})"
    if threads < 2 or threads & (threads - 1):
        raise ScheduleError(f"{where}: threads must be a power of two >= 2, got {threads}")
    b = f.body
    if not isinstance(b, Block) or b.init is None:
        raise ScheduleError(f"{where}: the loop must directly hold one reduction block")
    if b.predicate is not None:
        raise ScheduleError(f"{where}: block {b.name!r} has a predicate")
    red = [(iv, bd) for iv, bd in zip(b.iter_vars, b.bindings) if iv.kind == "reduce"]
    if not red or any(loop_vars_used(bd) - {id(f.var)} for _, bd in red) or \
            not any(id(f.var) in loop_vars_used(bd) for _, bd in red):
        raise ScheduleError(f"{where}: the reduce iterators of block {b.name!r} must be driven "
                            f"by this loop alone (fuse the reduction loops first)")
    for iv, bd in zip(b.iter_vars, b.bindings):
        if iv.kind != "reduce" and id(f.var) in loop_vars_used(bd):
            raise ScheduleError(f"{where}: the loop also drives spatial iterator {iv.var.name}")
    for s in path[:-1]:
        if isinstance(s, For) and s.kind == "thread_binding" and \
                s.annotations["thread_tag"].startswith("threadIdx"):
            raise ScheduleError(f"{where}: it is inside loop {s.var.name}, bound to "
                                f"{s.annotations['thread_tag']}")
    parts = _reduction_parts(b)
    if parts is None:
        raise ScheduleError(f"{where}: block {b.name!r} is not a sum/max/min/prod of its own "
                            f"output and a value")
    op, value = parts
    combiner = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}[op]
    upd = b.body
    dtype = upd.buffer.dtype
    vmap = {iv.var: bd for iv, bd in zip(b.iter_vars, b.bindings)}
    t = [Var(f"{f.var.name}_t{k}") for k in range(3)]
    ko = Var(f"{f.var.name}_o")
    chunks = -(-f.extent // threads)
    kexpr = binop("add", binop("mul", ko, Const(threads, "int64")), t[0])
    part = Buffer(f"{b.name}_part", (), dtype, scope="local")
    shared = Buffer(f"{b.name}_red", (threads,), dtype, scope="shared")
    val = substitute(substitute(value, vmap), {f.var: kexpr})
    fold = Store(part, (), binop(op, Load(part, ()), val))
    if chunks * threads > f.extent:
        fold = IfThenElse(binop("lt", kexpr, Const(f.extent, "int64")), fold)
    tx = {"thread_tag": "threadIdx.x"}
    stmts = [For(t[0], threads, Allocate(part, seq([
        Store(part, (), reduce_identity(combiner, dtype)), For(ko, chunks, fold),
        Store(shared, (t[0],), Load(part, ()))])), "thread_binding", dict(tx)), Barrier()]
    stride = threads // 2
    while stride >= 1:
        tv = Var(f"{f.var.name}_s{stride}")
        comb = Store(shared, (tv,), binop(op, Load(shared, (tv,)),
                                          Load(shared, (binop("add", tv, Const(stride, "int64")),))))
        stmts += [For(tv, threads, IfThenElse(binop("lt", tv, Const(stride, "int64")), comb),
                      "thread_binding", dict(tx)), Barrier()]
        stride //= 2
    # thread 0 stores init-combined result: out = op(init, total) equals the serial order's
    # value for the identity init the lowering gives every reduction
    out_idx = tuple(substitute(i, vmap) for i in upd.indices)
    init_val = substitute(b.init.value, vmap) if isinstance(b.init, Store) else None
    total = Load(shared, (Const(0, "int64"),))
    res = total if init_val is None else binop(op, init_val, total)
    stmts.append(For(t[1], threads, IfThenElse(binop("eq", t[1], Const(0, "int64")),
                                                Store(upd.buffer, out_idx, res)),
                     "thread_binding", dict(tx)))
    from .analysis import replace_node
    new = Allocate(shared, seq(stmts))
    sch.body = replace_node(sch.body, f, substitute_stmt(new, {}))


__all__ += ["cross_thread_reduce"]
