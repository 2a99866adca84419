"""Lower a graph of tensor expressions to one loop-IR ``PrimFunc``.

Each output and each reduction stage becomes a loop nest writing a buffer; other intermediate
stages (injective ones: padding, broadcasting, elementwise math) are inlined into their
consumers, as TVM's default ``compute_inline`` does. A reduction becomes a private accumulator
initialised to the combiner's identity, updated over the reduce axes, then stored.

When a reduction's only reader is an elementwise stage of the same shape that reads it at its
own index (conv -> + bias -> relu), that stage is applied to the accumulator before the store
(a ``reverse_compute_inline``): the reduction needs no workspace and its result never goes
through memory.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import LoweringError
from ..tir.arith import collect, post_order, simplify_stmt, substitute
from ..tir.expr import Expr, Load, Reduce, Select, binop
from ..tir.stmt import Allocate, Buffer, For, PrimFunc, Store, seq
from .tensor import ComputeOp, PlaceholderOp, Tensor


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
                 and not isinstance(t.op.body, Reduce)}

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
                        inlined_cache[id(t)] = body
                    vmap = {a.var: i for a, i in zip(t.op.axis, n.indices)}
                    return substitute(body, vmap)
                if id(t) not in buffers:
                    raise LoweringError(f"{name}: tensor {t.name} is read but never produced")
                return Load(buffers[id(t)], n.indices)
            return n
        return post_order(e, f)

    nest_stages = [t for t in stages if isinstance(t.op, ComputeOp) and id(t) not in inlinable
                   and not (id(t) in arg_ids and id(t) not in out_ids)]
    epilogue_of = _epilogues(nest_stages, buffers, out_ids | arg_ids, rewrite) if inline else {}
    fused = {id(r) for r in epilogue_of.values()}
    workspaces = [w for w in workspaces if not any(buffers[f] is w for f in fused)]

    nests = []
    for t in nest_stages:
        if id(t) in fused:
            continue  # emitted at its consumer, with the consumer as epilogue
        if id(t) in epilogue_of:
            red = epilogue_of[id(t)]
            nests.append(_lower_stage(red, buffers[id(t)], rewrite,
                                      _epilogue_fn(t, red, buffers[id(red)], rewrite)))
        else:
            nests.append(_lower_stage(t, buffers[id(t)], rewrite))

    body = seq(nests)
    for ws in reversed(workspaces):
        body = Allocate(ws, body)
    body = simplify_stmt(body)
    return PrimFunc(name, params, body, {"num_inputs": len(inputs), "num_outputs": num_outputs})


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
            for ld in collect(rewrite(e), lambda n: isinstance(n, Load)):
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


def _epilogue_fn(consumer: Tensor, red: Tensor, red_buf: Buffer, rewrite):
    """``acc -> consumer's value`` with the reduction's reads replaced by the accumulator."""
    body = rewrite(consumer.op.body)
    vmap = {a.var: b.var for a, b in zip(consumer.op.axis, red.op.axis)}

    def apply(acc: Expr) -> Expr:
        e = post_order(body, lambda n: acc if isinstance(n, Load) and n.src is red_buf else n)
        return substitute(e, vmap)
    return apply


def _lower_stage(t: Tensor, buf: Buffer, rewrite, epilogue=None) -> object:
    op: ComputeOp = t.op
    idx = tuple(a.var for a in op.axis)
    body = op.body
    if isinstance(body, Reduce):
        acc = Buffer(f"acc_{_cname(t.name)}", (), body.dtype, scope="local")
        src = rewrite(body.source)
        upd = _combine(body.combiner, Load(acc, ()), src)
        if body.where is not None:
            upd = Select(rewrite(body.where), upd, Load(acc, ()))
        inner = Store(acc, (), upd)
        for ax in reversed(body.axis):
            inner = For(ax.var, ax.extent, inner)
        result = Load(acc, ()) if epilogue is None else epilogue(Load(acc, ()))
        stmt = Allocate(acc, seq([Store(acc, (), body.identity()), inner,
                                  Store(buf, idx, result)]))
    else:
        if _contains_reduce(body):
            raise LoweringError(f"compute {t.name}: a reduction must be the top-level expression "
                                f"of its compute body")
        stmt = Store(buf, idx, rewrite(body))
    for ax in reversed(op.axis):
        stmt = For(ax.var, ax.extent, stmt)
    return stmt


def _contains_reduce(e: Expr) -> bool:
    from ..tir.arith import collect
    return bool(collect(e, lambda n: isinstance(n, Reduce)))


def _cname(s: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in s)
    return out if out and not out[0].isdigit() else "t" + out


