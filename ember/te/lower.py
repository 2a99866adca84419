"""Lower a graph of tensor expressions to one loop-IR ``PrimFunc``.

Each output and each reduction stage becomes a loop nest around one named ``Block`` writing a
buffer; other intermediate stages (injective ones: padding, broadcasting, elementwise math) are
inlined into their consumers, as TVM's default ``compute_inline`` does. A reduction block has an
``init`` (the combiner's identity) and an update ``buf[i] = combine(buf[i], source)``; its reduce
loops are innermost. Block names are the stage names (made unique with a numeric suffix).

When a reduction's only reader is an elementwise stage of the same shape that reads it at its
own index (conv -> + bias -> relu), that stage's block is placed inside the reduction's spatial
loops, after its reduce loops, and the reduction writes a one-element local buffer (the
structure ``reverse_compute_at`` produces): the result never goes through memory, and
``ember.tir.transform.lower_blocks`` turns it into a scalar accumulator that the epilogue reads.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import LoweringError
from ..tir.arith import collect, collect_unique, post_order, simplify_stmt, substitute
from ..tir.expr import Call, Expr, Load, Reduce, Select, Var, binop

# narrow float stages inlined into a consumer are rounded to their dtype, as a store would: each
# operator's float16/bfloat16 result is then the same whether or not it was fused
ROUNDED_DTYPES = ("float16", "bfloat16")
from ..tir.stmt import Allocate, Block, Buffer, For, PrimFunc, Store, seq
from ..tir.symbolic import symbols_of
from .tensor import ComputeOp, PlaceholderOp, Tensor, index_check_attrs


def _stages(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Compute tensors reachable from ``outputs``, producers before consumers."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor):
        if id(t) in seen:
            return
        seen.add(id(t))
        if isinstance(t.op, ComputeOp):
            for i in t.op.inputs:
                visit(i)
            order.append(t)
        else:
            order.append(t)

    for o in outputs:
        visit(o)
    return order


def _combine(combiner: str, acc: Expr, x: Expr) -> Expr:
    op = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}[combiner]
    return binop(op, acc, x)


def create_prim_func(args: Sequence[Tensor], name: str = "main", num_outputs: int = 1,
                     inline: bool = True) -> PrimFunc:
    """Lower tensors to a ``PrimFunc`` whose parameters are ``args`` (inputs then the last
    ``num_outputs`` outputs, all as dense row-major buffers).

    Index tensors among the inputs that a compute declared ``checks`` on are recorded in
    ``attrs["index_checks"]`` (``[{"param", "bounds", "what"}]``); the C code checks them first.

    Raises:
        LoweringError: a tensor is read that is neither in ``args`` nor computable from them.
    """
    args = list(args)
    outputs = args[len(args) - num_outputs:]
    inputs = args[:len(args) - num_outputs]
    arg_ids = {id(t) for t in args}
    stages = _stages(outputs)
    for t in stages:
        if isinstance(t.op, PlaceholderOp) and id(t) not in arg_ids:
            raise LoweringError(f"{name}: placeholder {t.name} is not a parameter of the function")

    out_ids = {id(t) for t in outputs}
    inlinable = {id(t) for t in stages
                 if inline and isinstance(t.op, ComputeOp) and id(t) not in out_ids
                 and not isinstance(t.op.body, Reduce) and not t.op.materialize}

    buffers: dict[int, Buffer] = {}
    params = []
    for k, t in enumerate(args):
        buf = Buffer(f"{_cname(t.name)}_{k}", t.shape, t.dtype)
        buffers[id(t)] = buf
        params.append(buf)
    workspaces: list[Buffer] = []
    for t in stages:
        if id(t) not in buffers and id(t) not in inlinable:
            buf = Buffer(f"ws_{_cname(t.name)}", t.shape, t.dtype)
            buffers[id(t)] = buf
            workspaces.append(buf)

    inlined_cache: dict[int, Expr] = {}

    def rewrite(e: Expr) -> Expr:
        def f(n: Expr) -> Expr:
            if isinstance(n, Load) and isinstance(n.src, Tensor):
                t = n.src
                if id(t) in inlinable:
                    body = inlined_cache.get(id(t))
                    if body is None:
                        body = rewrite(t.op.body)
                        if t.dtype in ROUNDED_DTYPES:  # the stage's result, as if stored
                            body = Call("round_dtype", [body], t.dtype)
                        inlined_cache[id(t)] = body
                    vmap = {a.var: i for a, i in zip(t.op.axis, n.indices)}
                    return substitute(body, vmap)
                if id(t) not in buffers:
                    raise LoweringError(f"{name}: tensor {t.name} is read but never produced")
                return Load(buffers[id(t)], n.indices)
            return n
        return post_order(e, f, shared=True)

    nest_stages = [t for t in stages if isinstance(t.op, ComputeOp) and id(t) not in inlinable
                   and not (id(t) in arg_ids and id(t) not in out_ids)]
    epilogue_of = _epilogues(nest_stages, buffers, out_ids | arg_ids, rewrite) if inline else {}
    fused = {id(r) for r in epilogue_of.values()}
    workspaces = [w for w in workspaces if not any(buffers[f] is w for f in fused)]

    nests = []
    names: set[str] = set()

    def block_name(t: Tensor) -> str:
        base = _cname(t.name)
        bname, k = base, 1
        while bname in names:
            bname, k = f"{base}_{k}", k + 1
        names.add(bname)
        return bname

    for t in nest_stages:
        if id(t) in fused:
            continue  # emitted at its consumer, with the consumer as epilogue
        if id(t) in epilogue_of:
            red = epilogue_of[id(t)]
            nests.append(_lower_fused(red, buffers[id(red)], block_name(red), t, buffers[id(t)],
                                      block_name(t), rewrite))
        else:
            nests.append(_lower_stage(t, buffers[id(t)], rewrite, block_name(t)))

    body = seq(nests)
    for ws in reversed(workspaces):
        body = Allocate(ws, body)
    body = simplify_stmt(body)
    attrs = {"num_inputs": len(inputs), "num_outputs": num_outputs}
    symbols = symbols_of(d for t in args for d in t.shape)
    if symbols:  # symbolic dimensions: the kernel takes their values as int64 arguments
        attrs["symbols"] = symbols
    checks = index_check_attrs([c for t in stages for c in t.checks],
                               lambda x: next((j for j, a in enumerate(inputs) if a is x), None))
    if checks:
        attrs["index_checks"] = checks
    return PrimFunc(name, params, body, attrs)


def _epilogues(nest_stages, buffers, pinned: set, rewrite) -> dict:
    """``{id(consumer): reduction}`` for each reduction whose only reader is an elementwise
    consumer stage of the same shape reading it at the consumer's own index."""
    readers: dict[int, list] = {}
    loads_of: dict[int, list] = {}
    for t in nest_stages:
        body = t.op.body
        exprs = [body.source] + ([body.where] if body.where is not None else []) \
            if isinstance(body, Reduce) else [body]
        for e in exprs:
            for ld in collect_unique(rewrite(e), lambda n: isinstance(n, Load)):
                readers.setdefault(id(ld.src), []).append(t)
                loads_of.setdefault((id(ld.src), id(t)), []).append(ld)
    out: dict[int, Tensor] = {}
    for r in nest_stages:
        if not isinstance(r.op.body, Reduce) or id(r) in pinned:
            continue
        buf = buffers[id(r)]
        users = {id(u): u for u in readers.get(id(buf), [])}
        if len(users) != 1:
            continue
        c = next(iter(users.values()))
        if isinstance(c.op.body, Reduce) or c.shape != r.shape or id(c) in out:
            continue
        axis = c.op.axis
        # every read at the consumer's own index (a unit dim can only be read at 0)
        if all(len(ld.indices) == len(axis) and all(x is a.var or a.extent == 1 for x, a in
                                                     zip(ld.indices, axis))
               for ld in loads_of[(id(buf), id(c))]):
            out[id(c)] = r
    return out


def _block(t: Tensor, buf: Buffer, rewrite, name: str) -> Block:
    op: ComputeOp = t.op
    spatial = list(op.axis)
    idx = tuple(a.var for a in spatial)
    body = op.body
    if isinstance(body, Reduce):
        src = rewrite(body.source)
        upd = _combine(body.combiner, Load(buf, idx), src)
        if body.where is not None:
            upd = Select(rewrite(body.where), upd, Load(buf, idx))
        return Block(name, spatial + list(body.axis), [], Store(buf, idx, upd),
                     init=Store(buf, idx, body.identity()))
    if _contains_reduce(body):
        raise LoweringError(f"compute {t.name}: a reduction must be the top-level expression "
                            f"of its compute body")
    return Block(name, spatial, [], Store(buf, idx, rewrite(body)))


def _loop_var(iv) -> Var:
    return Var(iv.var.name.replace("_i", "_l", 1) if iv.kind == "spatial" else iv.var.name)


def _lower_stage(t: Tensor, buf: Buffer, rewrite, name: str) -> object:
    block = _block(t, buf, rewrite, name)
    loop_vars = [_loop_var(iv) for iv in block.iter_vars]
    block.bindings = list(loop_vars)
    stmt = block
    for iv, lv in reversed(list(zip(block.iter_vars, loop_vars))):
        stmt = For(lv, iv.extent, stmt)
    return stmt


def _lower_fused(red: Tensor, red_buf: Buffer, red_name: str, epi: Tensor, epi_buf: Buffer,
                 epi_name: str, rewrite) -> object:
    """The reduction and its elementwise consumer in one spatial nest (see the module doc)."""
    rb = _block(red, red_buf, rewrite, red_name)
    eb = _block(epi, epi_buf, rewrite, epi_name)
    sp = [iv for iv in rb.iter_vars if iv.kind == "spatial"]
    rd = [iv for iv in rb.iter_vars if iv.kind == "reduce"]
    sp_vars = [_loop_var(iv) for iv in sp]
    rd_vars = [_loop_var(iv) for iv in rd]
    local = Buffer(red_buf.name, (1,) * len(sp), red_buf.dtype, "local", None, tuple(sp_vars))
    from ..tir.arith import map_accesses

    def fn(b, idx):
        return (local, idx) if b is red_buf else (b, idx)
    rb = Block(rb.name, rb.iter_vars, sp_vars + rd_vars, map_accesses(rb.body, fn),
               map_accesses(rb.init, fn))
    eb = Block(eb.name, eb.iter_vars, list(sp_vars), map_accesses(eb.body, fn))
    inner = rb
    for iv, lv in reversed(list(zip(rd, rd_vars))):
        inner = For(lv, iv.extent, inner)
    stmt = Allocate(local, seq([inner, eb]))
    for iv, lv in reversed(list(zip(sp, sp_vars))):
        stmt = For(lv, iv.extent, stmt)
    return stmt


def _contains_reduce(e: Expr) -> bool:
    return bool(collect_unique(e, lambda n: isinstance(n, Reduce)))


def _cname(s: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in s)
    return out if out and not out[0].isdigit() else "t" + out
