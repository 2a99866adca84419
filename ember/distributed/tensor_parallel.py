"""Megatron-style tensor parallelism on the graph IR: placements propagated binding by binding.

Shoeybi et al., "Megatron-LM" (2019), section 3: in a transformer block the first matmul of a
pair is split by columns (each rank computes some attention heads / some MLP columns with no
communication), the second by rows (each rank's partial product is summed by one all-reduce);
the embedding table is split by vocabulary rows (each rank looks up the ids in its range, an
all-reduce sums them) and the LM head by vocabulary columns (an all-gather joins the logits).

The pass finds those layers by propagating placements, not by naming layers:

1. ``matmul(x, W)`` with ``W`` a weight used once (matched with ``ember.graph.pattern``):
   ``x`` replicated -> column-parallel: ``W`` is ``Shard(1)`` and the result ``Shard(-1)`` in a new
   *shard group*; ``x`` sharded on its last axis -> row-parallel: ``W`` is ``Shard(0)`` and a
   ``dist.all_reduce`` follows the matmul (before any bias is added).
2. ``take(E, ids, axis=0)`` with ``E`` a weight: vocabulary-parallel lookup + ``dist.all_reduce``.
3. Elementwise / broadcast operators, softmax and reductions over other axes, transposes,
   reshapes that split or merge the sharded axis, batched matmuls sharded on a batch axis keep
   the shard (a bias or constant broadcast along it is sharded with it); anything else, and a
   sharded model output, gets ``dist.all_gather`` first.

A shard group's tensors are split in the same number of units (``blocks``): a column-parallel
matmul starts a group of ``N`` columns; a reshape into ``(heads, head_dim)`` reduces the group
to ``gcd(blocks, heads)`` so every rank holds whole heads. Units are dealt unevenly when the
ranks do not divide them (8 heads over 3 ranks: 3, 3, 2 heads). A group of fewer units than
ranks is not split (its column-parallel matmuls stay replicated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ShardingError
from ..graph.builder import FunctionBuilder, const
from ..graph.ir import Constant, Function, TensorType, Var
from ..graph.pattern import is_op, is_var, match, wildcard
from ..ops import OpPattern, get_op, normalize_axis
from .placement import shard_extents

__all__ = ["TensorParallelPlan", "plan_tensor_parallel", "shard_function"]

_REDUCTIONS = {"mean", "sum", "max", "min", "prod"}
_SOFTMAX = {"nn.softmax", "nn.log_softmax"}


@dataclass
class _Step:
    kind: str = "local"           # local | col | row | vocab | gather
    gather: list = field(default_factory=list)     # arg indices to all-gather first
    slices: dict = field(default_factory=dict)     # arg index -> (axis, group): slice locally


@dataclass
class TensorParallelPlan:
    """The placements the pass chose for one function over ``n`` ranks.

    Attributes:
        n: number of ranks.
        place: ``id(var) -> (axis, group)`` for sharded values (others are replicated).
        weights: ``weight name -> (axis, group)`` of the sharded weights.
        steps: one ``_Step`` per binding (what the rank graph does there).
        blocks: ``group -> number of units`` after union-find merging (``root`` resolves).
    """

    n: int
    place: dict
    weights: dict
    steps: list
    parent: dict
    blocks: dict
    seeds: dict  # group -> binding index of the matmul that started it

    def root(self, g: int) -> int:
        while self.parent[g] != g:
            g = self.parent[g]
        return g

    def extents(self, size: int, g: int) -> list[tuple[int, int]]:
        """``(offset, extent)`` per rank of an axis of ``size`` in group ``g``."""
        return shard_extents(size, self.blocks[self.root(g)], self.n)


class _Analysis:
    def __init__(self, func: Function, params, n: int, exclude: set):
        self.func, self.params, self.n, self.exclude = func, params, n, exclude
        self.place: dict = {}
        self.weights: dict = {}
        self.parent: dict = {}
        self.blocks: dict = {}
        self.seeds: dict = {}
        self.uses = func.uses()
        self.weight_vars = {id(p) for p in func.params if p.name in params}

    # shard groups (union-find with gcd of units) ------------------------------------------
    def new_group(self, blocks: int, seed: int) -> int:
        g = len(self.parent)
        self.parent[g] = g
        self.blocks[g] = int(blocks)
        self.seeds[g] = seed
        return g

    def root(self, g):
        while self.parent[g] != g:
            g = self.parent[g]
        return g

    def merge(self, a, b) -> int:
        a, b = self.root(a), self.root(b)
        if a != b:
            self.parent[b] = a
            self.blocks[a] = math.gcd(self.blocks[a], self.blocks[b])
        return a

    def restrict(self, g, units: int):
        r = self.root(g)
        self.blocks[r] = math.gcd(self.blocks[r], int(units))

    # helpers -------------------------------------------------------------------------------
    def pl(self, v):
        return self.place.get(id(v)) if isinstance(v, Var) else None

    def is_free_weight(self, v) -> bool:
        return (isinstance(v, Var) and id(v) in self.weight_vars and self.uses.get(id(v), 0) == 1
                and v.name not in self.weights)

    def run(self) -> TensorParallelPlan:
        steps = []
        w = is_var().where(self.is_free_weight)
        weight_matmul = is_op("matmul")(wildcard(), w)
        weight_take = is_op("take")(w, wildcard())
        for i, b in enumerate(self.func.bindings):
            step = _Step()
            steps.append(step)
            c = b.call
            out = b.outputs[0] if len(b.outputs) == 1 else None
            pls = [self.pl(a) for a in c.args]
            if out is None or c.is_function_call:
                step.gather = [k for k, p in enumerate(pls) if p]
                continue
            nd = out.type.ndim
            if (c.op == "matmul" and match(weight_matmul, out, self.func) is not None
                    and c.args[1].type.ndim == 2):
                x, wv = c.args
                px = pls[0]
                if px and px[0] == x.type.ndim - 1:
                    step.kind = "row"
                    self.weights[wv.name] = (0, px[1])
                    continue
                if px is None and i not in self.exclude and wv.type.shape[1] >= self.n:
                    step.kind = "col"
                    g = self.new_group(wv.type.shape[1], i)
                    self.weights[wv.name] = (1, g)
                    self.place[id(out)] = (nd - 1, g)
                    continue
            if (c.op == "take" and normalize_axis(c.attrs.get("axis", 0), c.args[0].type.ndim) == 0
                    and match(weight_take, out, self.func) is not None and pls[1] is None
                    and c.args[0].type.ndim == 2 and c.args[0].type.shape[0] >= self.n
                    and i not in self.exclude):
                step.kind = "vocab"
                self.weights[c.args[0].name] = (0, self.new_group(c.args[0].type.shape[0], i))
                continue
            if not any(pls):
                continue
            res = self.propagate(b, pls, step)
            if res is None:
                step.kind = "gather"
                step.gather = [k for k, p in enumerate(pls) if p]
                step.slices = {}
            else:
                self.place[id(out)] = res
        return TensorParallelPlan(self.n, self.place, self.weights, steps, self.parent,
                                  self.blocks, self.seeds)

    def propagate(self, b, pls, step):
        """The output placement of a binding with sharded inputs, or ``None`` (gather)."""
        c, out = b.call, b.outputs[0]
        op = get_op(c.op)
        nd = out.type.ndim
        if op.pattern <= OpPattern.BROADCAST and "shape" not in op.attrs:
            oaxes, group = set(), None
            for a, p in zip(c.args, pls):
                if p:
                    oaxes.add(p[0] + nd - a.type.ndim)
                    group = p[1] if group is None else self.merge(group, p[1])
            if len(oaxes) != 1:
                return None
            oa = oaxes.pop()
            for k, (a, p) in enumerate(zip(c.args, pls)):
                ax = oa - (nd - a.type.ndim)
                if p or ax < 0 or a.type.shape[ax] == 1:
                    continue
                if a.type.shape[ax] != out.type.shape[oa]:
                    return None
                if self.is_free_weight(a):
                    self.weights[a.name] = (ax, group)
                else:
                    step.slices[k] = (ax, group)
            return (oa, group)
        (x, px) = c.args[0], pls[0]
        if c.op in _SOFTMAX:
            ok = px and normalize_axis(c.attrs["axis"], nd) != px[0] and not any(pls[1:])
            return px if ok else None
        if c.op in _REDUCTIONS:
            axes = c.attrs.get("axes")
            if axes is None or not px:
                return None
            axes = [normalize_axis(a, x.type.ndim) for a in axes]
            if px[0] in axes:
                return None
            ax = px[0] if c.attrs.get("keepdims", 1) else px[0] - sum(a < px[0] for a in axes)
            return (ax, px[1])
        if c.op == "transpose" and px:
            perm = c.attrs.get("perm")
            perm = list(range(nd))[::-1] if perm is None else [normalize_axis(p, nd) for p in perm]
            return (perm.index(px[0]), px[1])
        if c.op == "reshape" and px:
            return self.reshape(x.type.shape, out.type.shape, px)
        if c.op == "matmul":
            a, bb = c.args
            pa, pb = pls
            if a.type.ndim == bb.type.ndim == nd and nd >= 3 and pa and pb and pa[0] == pb[0] \
                    and pa[0] < nd - 2 and a.type.shape[pa[0]] == bb.type.shape[pb[0]]:
                return (pa[0], self.merge(pa[1], pb[1]))
            if pa and pb is None and pa[0] == a.type.ndim - 2:
                return (nd - 2, pa[1])
            return None
        return None

    def reshape(self, ishape, oshape, px):
        a, g = px
        outer = int(np.prod(ishape[:a], dtype=np.int64))
        size = ishape[a]
        pre = 1
        for j, d in enumerate(oshape):
            if pre == outer:
                if size % d == 0 and size >= d:        # the axis splits into (d, ...)
                    self.restrict(g, d)
                    return (j, g)
                m = a + 1                             # axes a..m-1 merge into d
                prod = size
                while prod < d and m < len(ishape):
                    prod *= ishape[m]
                    m += 1
                if prod == d:
                    return (j, g)
                return None
            if pre > outer:
                return None
            pre *= d
        return None


def plan_tensor_parallel(func: Function, params, n: int) -> TensorParallelPlan:
    """Placements of ``func``'s values and weights over ``n`` ranks (see the module doc).

    Shard groups that end up with fewer units than ranks are retried with their seed matmuls
    replicated.
    """
    exclude: set = set()
    for _ in range(64):
        plan = _Analysis(func, params, n, exclude).run()
        # every group merged into a too-small root is retried without its seed matmul
        small = {plan.seeds[g] for g in plan.parent if plan.blocks[plan.root(g)] < n}
        if not small:
            return plan
        exclude |= small
    raise ShardingError("tensor parallelism: shard groups kept shrinking below the rank count")


def _local_weight(name, arr, plan: TensorParallelPlan, rank: int) -> np.ndarray:
    if name not in plan.weights:
        return arr
    ax, g = plan.weights[name]
    off, ext = plan.extents(arr.shape[ax], g)[rank]
    idx = [slice(None)] * arr.ndim
    idx[ax] = slice(off, off + ext)
    return np.ascontiguousarray(arr[tuple(idx)])


def shard_function(func: Function, params, plan: TensorParallelPlan, rank: int
                   ) -> tuple[Function, dict]:
    """Rank ``rank``'s graph and weights under ``plan``: local shapes, ``dist.*`` collectives.

    Returns ``(Function, {weight name: local array})``; the function returns the same
    (replicated) outputs as ``func``.
    """
    fb = FunctionBuilder(func.name)
    env: dict = {}
    local_params = {}
    for p in func.params:
        if p.name in params:
            arr = _local_weight(p.name, np.asarray(params[p.name]), plan, rank)
            local_params[p.name] = arr
            env[id(p)] = fb.param(p.name, TensorType(arr.shape, p.type.dtype))
        else:
            env[id(p)] = fb.param(p.name, p.type)

    def extents(v, ax, g):
        return plan.extents(v.type.shape[ax], g)

    def gathered(v):
        lv = env[id(v)]
        p = plan.place.get(id(v))
        if not p:
            return lv
        ax, g = p
        key = ("gathered", id(v))
        if key not in env:
            env[key] = fb.call("dist.all_gather", [lv], {
                "axis": ax, "sizes": [e for _, e in extents(v, ax, g)]}, names=[v.name + "_full"])
        return env[key]

    def local(a):
        return env[id(a)] if isinstance(a, Var) else a

    for b, step in zip(func.bindings, plan.steps):
        c = b.call
        names = [o.name for o in b.outputs]
        args = [local(a) for a in c.args]
        for k in step.gather:
            args[k] = gathered(c.args[k])
        for k, (ax, g) in step.slices.items():
            a = c.args[k]
            off, ext = plan.extents(a.type.shape[ax], g)[rank]
            if isinstance(a, Constant):
                idx = [slice(None)] * a.type.ndim
                idx[ax] = slice(off, off + ext)
                args[k] = Constant(np.ascontiguousarray(a.data[tuple(idx)]), a.name_hint)
            else:
                begin = [0] * a.type.ndim
                end = list(a.type.shape)
                begin[ax], end[ax] = off, off + ext
                args[k] = fb.call("strided_slice", [args[k]], {
                    "begin": begin, "end": end, "strides": [1] * a.type.ndim},
                    names=[a.name + "_local"])
        attrs = dict(c.attrs)
        if step.kind == "vocab":
            res = _vocab_lookup(fb, args, c, plan, rank, names[0])
        else:
            pout = plan.place.get(id(b.outputs[0]))
            if c.op == "reshape" and pout:
                ax, g = pout
                shape = list(b.outputs[0].type.shape)
                shape[ax] = extents(b.outputs[0], ax, g)[rank][1]
                attrs["newshape"] = shape
            reduce = step.kind == "row"
            res = fb.call(c.op, args, attrs,
                          names=[n + "_partial" for n in names] if reduce else names)
            if reduce:
                res = fb.call("dist.all_reduce", [res], names=names)
        for o, r in zip(b.outputs, res if isinstance(res, tuple) else (res,)):
            env[id(o)] = r
    outs = [gathered(o) if isinstance(o, Var) else o for o in func.outputs]
    f = fb.finish(outs)
    f.attrs = dict(func.attrs)
    if "output_names" not in f.attrs:
        f.attrs["output_names"] = [o.name if isinstance(o, Var) else f"output{k}"
                                   for k, o in enumerate(func.outputs)]
    return f, local_params


def _vocab_lookup(fb, args, call, plan, rank, name):
    """Rows ``[off, off + ext)`` of the table on this rank: ids outside give zeros, the
    all-reduce adds the ranks' lookups (Megatron's VocabParallelEmbedding).

    ONNX Gather's index semantics are kept: negative ids count from the end of the whole
    vocabulary (normalized by ``+ V`` before the range test), and an id outside ``[-V, V)``
    is an ``InputError`` on rank 0, which also gathers from a ``(V, 1)`` column of zeros (the
    single-device bound check and message; the zeros are added to its partial) instead of
    every rank silently looking up nothing.
    """
    table, ids = args
    w = call.args[0]
    ax, g = plan.weights[w.name]
    off, ext = plan.extents(w.type.shape[0], g)[rank]
    vocab = int(w.type.shape[0])
    dt = ids.type.dtype
    ids = fb.call("where", [fb.call("less", [ids, const(0, dt)]),
                            fb.call("add", [ids, const(vocab, dt)]), ids], names=[name + "_ids"])
    inr = fb.call("logical_and", [fb.call("greater_equal", [ids, const(off, dt)]),
                                  fb.call("less", [ids, const(off + ext, dt)])],
                  names=[name + "_in_range"])
    safe = fb.call("where", [inr, fb.call("subtract", [ids, const(off, dt)]), const(0, dt)])
    rows = fb.call("take", [table, safe], {"axis": 0})
    keep = fb.call("reshape", [inr], {"newshape": list(ids.type.shape) + [1]})
    part = fb.call("where", [keep, rows, const(0, table.type.dtype)], names=[name + "_partial"])
    if rank == 0:
        zeros = fb.call("broadcast_to", [const(0, table.type.dtype)], {"shape": [vocab, 1]},
                        names=[name + "_bounds"])
        probe = fb.call("take", [zeros, args[1]], {"axis": 0}, names=[name + "_bound_check"])
        part = fb.call("add", [part, probe], names=[name + "_partial_checked"])
    return fb.call("dist.all_reduce", [part], names=[name])
