"""Multi-level tiling of a single-reduction kernel, the loop structure tuning searches over.

``as_reduction_nest(func)`` recognizes the loop nest that ``te.create_prim_func`` emits for one
reduction stage (conv, matmul, dense, pooling... with any inlined padding or epilogue)::

    for s0 .. sn:                       # spatial loops
      acc = init
      for r0 .. rm: acc = update(acc, s, r)
      out[s] = epilogue(acc, s)

``tile_reduction_nest(nest, TileSpec)`` rewrites it as::

    for so0 .. son:                     # outer spatial tiles (so0 parallel, optionally collapsed)
      local acc[ti0, .., tin]           # register/L1 block of outputs
      for si: acc[si] = init
      for r0 .. rm:                     # reduction between the tile levels ("SSRS")
        for si0 .. sin: acc[si] = update(acc[si], so*t + si, r)   # inner loops unrolled/vectorized
      for si: out[so*t + si] = epilogue(acc[si], so*t + si)

or, with ``reduce_inside=True``, keeps the reduction innermost with a scalar accumulator (plain
spatial tiling). Factors must divide their loop's extent (``SplitKnob`` policy ``"factors"``).
Every rewrite computes the same values in the same per-output order, so results are bitwise
those of the untuned kernel up to floating-point contraction.

This is the one schedule shape the ``tile`` template and the template-free sketches need; it is
written over plain loop IR so tuning works before the general schedule primitives
(``ember.tir.schedule``) are available, and maps onto them as split + reorder + cache_write +
annotate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..errors import ScheduleError
from ..tir.arith import post_order, simplify_stmt, substitute, substitute_stmt
from ..tir.expr import BinOp, Const, Load, Var
from ..tir.stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt, Store, seq


@dataclass
class ReductionNest:
    """The parts of a single-reduction PrimFunc (see ``as_reduction_nest``)."""

    func: PrimFunc
    spatial: list           # For loops, outermost first
    reduce: list            # For loops, outermost first
    acc: Buffer             # scalar local accumulator
    init: Store
    update: Store
    epilogue: list          # statements after the reduction (stores reading acc)
    workspaces: list = field(default_factory=list)   # global buffers allocated around it
    prologue: list = field(default_factory=list)     # loop nests filling them first


def _for_chain(s: Stmt) -> tuple[list, Stmt]:
    loops = []
    while isinstance(s, For):
        loops.append(s)
        s = s.body
    return loops, s


def as_reduction_nest(func: PrimFunc) -> ReductionNest:
    """Recognize a kernel made of one reduction stage, optionally after stages that fill
    workspaces (a materialized padded input).

    Raises:
        ScheduleError: the kernel has another shape (several stages, no reduction...).
    """
    from ..tir.transform import lower_blocks
    func = lower_blocks(func)
    body = func.body
    workspaces, prologue = [], []
    while isinstance(body, Allocate) and body.buffer.scope == "global":
        workspaces.append(body.buffer)
        body = body.body
    if isinstance(body, Seq) and len(body.stmts) >= 2 and workspaces:
        # stages that fill workspaces first (a materialized padded input): kept, run before
        prologue, body = list(body.stmts[:-1]), body.stmts[-1]
        if not all(isinstance(x, For) for x in prologue):
            raise ScheduleError(f"tile: kernel {func.name} is not one reduction stage")
    spatial, inner = _for_chain(body)
    if isinstance(inner, Allocate):
        inner = _scalar_accumulator(inner)
    elif isinstance(inner, Seq):
        spatial, inner = _output_accumulator(spatial, inner)
    if not isinstance(inner, Allocate) or inner.buffer.scope != "local" or inner.buffer.shape:
        raise ScheduleError(f"tile: kernel {func.name} is not one reduction stage (expected "
                            f"spatial loops around a scalar accumulator)")
    acc = inner.buffer
    stmts = inner.body.stmts if isinstance(inner.body, Seq) else [inner.body]
    if len(stmts) < 3 or not isinstance(stmts[0], Store) or stmts[0].buffer is not acc:
        raise ScheduleError(f"tile: kernel {func.name}: accumulator is not initialised first")
    reduce, upd = _for_chain(stmts[1])
    if not reduce or not isinstance(upd, Store) or upd.buffer is not acc:
        raise ScheduleError(f"tile: kernel {func.name}: no reduction loop nest updating the "
                            f"accumulator")
    if any(lp.kind != "serial" for lp in spatial + reduce):
        raise ScheduleError(f"tile: kernel {func.name} is already scheduled")
    return ReductionNest(func, spatial, reduce, acc, stmts[0], upd, stmts[2:], workspaces,
                         prologue)


def _scalar_accumulator(alloc: Allocate) -> Allocate:
    """Rewrite the guarded-init form of a reduction, ``local acc[1]; for r..: { if (r == 0)
    acc[0] = init; acc[0] = update }; epilogue``, to the scalar-accumulator form ``acc = init;
    for r..: acc = update; epilogue`` (``lower_blocks`` emits the former where it cannot prove
    the latter); other statements are returned unchanged."""
    acc = alloc.buffer
    if acc.scope != "local" or not acc.shape or any(n != 1 for n in acc.shape):
        return alloc
    stmts = alloc.body.stmts if isinstance(alloc.body, Seq) else [alloc.body]
    reduce, inner = _for_chain(stmts[0])
    if not reduce or not isinstance(inner, Seq) or len(inner.stmts) != 2:
        return alloc
    guard, upd = inner.stmts
    if not (isinstance(guard, IfThenElse) and guard.else_ is None
            and isinstance(guard.then, Store) and guard.then.buffer is acc
            and isinstance(upd, Store) and upd.buffer is acc):
        return alloc
    from ..tir.arith import collect
    rvars = {id(lp.var) for lp in reduce}
    for term in _conjuncts(guard.cond):
        if not (isinstance(term, BinOp) and term.op == "eq" and isinstance(term.b, Const)
                and term.b.value == 0 and isinstance(term.a, Var) and id(term.a) in rvars):
            return alloc
    if any(collect(guard.then.value, lambda n: isinstance(n, Var) and id(n) in rvars)):
        return alloc
    scalar = Buffer(acc.name, (), acc.dtype, scope="local")
    init = _replace_acc(guard.then, acc, scalar, ())
    update: Stmt = _replace_acc(upd, acc, scalar, ())
    for lp in reversed(reduce):
        update = For(lp.var, lp.extent, update, lp.kind, dict(lp.annotations))
    rest = [_replace_acc(x, acc, scalar, ()) for x in stmts[1:]]
    return Allocate(scalar, Seq([init, update] + rest))


def _output_accumulator(chain: list, inner: Seq) -> tuple[list, Stmt]:
    """Rewrite a reduction that accumulates in its output, ``for s..: for r..: { if (r == 0)
    out[s] = init; out[s] = update(out[s]) }``, to the scalar-accumulator form around the
    spatial loops; returns ``(spatial loops, Allocate)``, or the input unchanged."""
    from ..tir.arith import collect
    from ..tir.transform import expr_equal
    if len(inner.stmts) != 2:
        return chain, inner
    guard, upd = inner.stmts
    if not (isinstance(guard, IfThenElse) and guard.else_ is None
            and isinstance(guard.then, Store) and isinstance(upd, Store)
            and guard.then.buffer is upd.buffer and upd.buffer.scope == "global"):
        return chain, inner
    gvars = []
    for term in _conjuncts(guard.cond):
        if not (isinstance(term, BinOp) and term.op == "eq" and isinstance(term.b, Const)
                and term.b.value == 0 and isinstance(term.a, Var)):
            return chain, inner
        gvars.append(id(term.a))
    nr = len(gvars)
    if nr == 0 or nr >= len(chain) or {id(lp.var) for lp in chain[-nr:]} != set(gvars):
        return chain, inner
    spatial, reduce = chain[:-nr], chain[-nr:]
    out, idx = upd.buffer, upd.indices
    same = lambda a: len(a) == len(idx) and all(expr_equal(x, y) for x, y in zip(a, idx))  # noqa
    rvars = set(gvars)
    if not same(guard.then.indices) or any(
            collect(i, lambda n: isinstance(n, Var) and id(n) in rvars) for i in idx):
        return chain, inner
    reads = collect(upd.value, lambda n: isinstance(n, Load) and n.src is out)
    if any(not same(r.indices) for r in reads):
        return chain, inner
    acc = Buffer(f"acc_{out.name}", (), out.dtype, scope="local")
    value = post_order(upd.value, lambda n: Load(acc, ()) if isinstance(n, Load)
                       and n.src is out else n)
    update: Stmt = Store(acc, (), value)
    for lp in reversed(reduce):
        update = For(lp.var, lp.extent, update, lp.kind, dict(lp.annotations))
    body = Allocate(acc, Seq([Store(acc, (), guard.then.value), update,
                              Store(out, idx, Load(acc, ()))]))
    return spatial, body


def _conjuncts(e):
    if isinstance(e, BinOp) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


@dataclass
class TileSpec:
    """How to tile a ``ReductionNest``.

    Attributes:
        inner: inner tile size of each spatial loop (divides its extent; 1 = untiled).
        reduce_inside: keep the reduction innermost with a scalar accumulator.
        inner_order: order of the inner tile loops (positions into the spatial loops),
            innermost last; default: original order.
        outer_order: order of the outer tile loops (positions), outermost first; default:
            original order.
        reduce_order: order of the reduction loops (positions), outermost first.
        reduce_split: inner factor of the innermost reduction loop, hoisted below the inner
            spatial tile when ``reduce_inside`` (1 = no split).
        parallel: number of outer loops fused into the parallel loop (0 = serial).
        vectorize: mark the innermost inner tile loop ``vectorized``.
        unroll: mark the other inner tile loops ``unrolled``.
        hoist_pad: materialize a padded copy of a guarded input first and read it without
            the guard (see ``ember.tune.padding``; ignored where it does not apply).
    """

    inner: Sequence[int]
    reduce_inside: bool = False
    inner_order: Sequence[int] | None = None
    outer_order: Sequence[int] | None = None
    reduce_order: Sequence[int] | None = None
    reduce_split: int = 1
    parallel: int = 1
    vectorize: bool = True
    unroll: bool = True
    hoist_pad: bool = False


def _replace_acc(stmt: Stmt, old: Buffer, new: Buffer, idx: tuple) -> Stmt:
    """``stmt`` with every access of ``old`` turned into ``new[idx]``."""
    from ..tir.arith import map_accesses
    return map_accesses(stmt, lambda b, i: (new, idx) if b is old else (b, i))


def tile_reduction_nest(nest: ReductionNest, spec: TileSpec) -> PrimFunc:
    """The tiled kernel (a new PrimFunc; ``nest.func`` is unchanged).

    Raises:
        ScheduleError: a factor that does not divide its loop, or a bad ``inner_order``.
    """
    sp = nest.spatial
    if len(spec.inner) != len(sp):
        raise ScheduleError(f"tile: {len(spec.inner)} tile sizes for {len(sp)} spatial loops")
    outer_vars, inner_vars, vmap = [], [], {}
    for lp, t in zip(sp, spec.inner):
        if t < 1 or lp.extent % t:
            raise ScheduleError(f"tile: factor {t} does not divide loop {lp.var.name} of "
                                f"extent {lp.extent}")
        o, i = Var(lp.var.name + "_o"), Var(lp.var.name + "_i")
        outer_vars.append((o, lp.extent // t))
        inner_vars.append((i, t))
        vmap[lp.var] = o * t + i if t > 1 else o
        if t == lp.extent:
            vmap[lp.var] = i
    order = list(spec.inner_order) if spec.inner_order is not None else list(range(len(sp)))
    if sorted(order) != list(range(len(sp))):
        raise ScheduleError(f"tile: inner_order {order} is not a permutation of the spatial loops")
    inner_loops = [inner_vars[k] for k in order if inner_vars[k][1] > 1]
    oorder = list(spec.outer_order) if spec.outer_order is not None else list(range(len(sp)))
    rorder = (list(spec.reduce_order) if spec.reduce_order is not None
              else list(range(len(nest.reduce))))
    if sorted(oorder) != list(range(len(sp))) or sorted(rorder) != list(range(len(nest.reduce))):
        raise ScheduleError(f"tile: outer_order {oorder} / reduce_order {rorder} is not a "
                            f"permutation of the loops")

    def wrap_inner(body: Stmt, annotate: bool) -> Stmt:
        for n, (v, ext) in enumerate(reversed(inner_loops)):
            kind = "serial"
            if annotate:
                if n == 0 and spec.vectorize:
                    kind = "vectorized"
                elif spec.unroll:
                    kind = "unrolled"
            body = For(v, ext, body, kind)
        return body

    update, pad = nest.update, None
    if spec.hoist_pad:
        from .padding import hoist_padding
        pad = hoist_padding(nest.update, nest.acc, list(nest.spatial) + list(nest.reduce))
        if pad is not None:
            update = pad[0]
    upd = substitute_stmt(update, vmap)
    init = substitute_stmt(nest.init, vmap)
    epi = [substitute_stmt(s, vmap) for s in nest.epilogue]
    red = [nest.reduce[k] for k in rorder]
    if spec.reduce_inside:
        acc = nest.acc
        rbody: Stmt = upd
        rsplit = spec.reduce_split
        last = red[-1]
        if rsplit > 1 and last.extent % rsplit == 0 and rsplit < last.extent:
            ro, ri = Var(last.var.name + "_o"), Var(last.var.name + "_i")
            rbody = substitute_stmt(rbody, {last.var: ro * rsplit + ri})
            rbody = For(ri, rsplit, rbody, "unrolled")
            red = red[:-1] + [For(ro, last.extent // rsplit, Seq([]))]
        for lp in reversed(red):
            rbody = For(lp.var, lp.extent, rbody)
        body = wrap_inner(Allocate(acc, seq([init, rbody] + epi)), annotate=False)
        # inner loops hold a full reduction: unrolling them only bloats code
    else:
        shape = tuple(ext for _, ext in inner_vars)
        acc = Buffer(nest.acc.name + "_tile", shape, nest.acc.dtype, scope="local")
        idx = tuple(v if ext > 1 else Const(0, "int64") for v, ext in inner_vars)
        init_t = wrap_inner(_replace_acc(init, nest.acc, acc, idx), annotate=True)
        upd_t: Stmt = wrap_inner(_replace_acc(upd, nest.acc, acc, idx), annotate=True)
        for lp in reversed(red):
            upd_t = For(lp.var, lp.extent, upd_t)
        epi_t = wrap_inner(seq([_replace_acc(s, nest.acc, acc, idx) for s in epi]),
                           annotate=True)
        body = Allocate(acc, seq([init_t, upd_t, epi_t]))
    outer = [outer_vars[k] for k in oorder if outer_vars[k][1] > 1]
    for n, (v, ext) in enumerate(reversed(outer)):
        body = For(v, ext, body)
    if spec.parallel and outer:
        c = max(1, min(spec.parallel, len(outer)))
        body = For(body.var, body.extent, body.body, "parallel",
                   {"collapse": c} if c > 1 else {})
    if pad is not None:
        from .padding import annotate_fill
        body = Allocate(pad[1], seq([annotate_fill(pad[2], bool(spec.parallel), spec.vectorize),
                                     body]))
    if nest.prologue:
        from .padding import annotate_fill
        body = seq([annotate_fill(p, bool(spec.parallel), spec.vectorize)
                    for p in nest.prologue] + [body])
    for ws in reversed(nest.workspaces):
        body = Allocate(ws, body)
    body = simplify_stmt(body)
    return PrimFunc(nest.func.name, list(nest.func.params), body, dict(nest.func.attrs))
