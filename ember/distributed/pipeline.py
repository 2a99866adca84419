"""Pipeline parallelism on the graph IR: contiguous stages cut by a cost model.

GPipe (Huang et al., 2019): the bindings, in order, are cut into ``n`` contiguous stages, one
per rank; a value computed in stage ``p`` and read in stage ``c > p`` is sent by
``dist.send`` at the end of ``p`` and received by ``dist.recv`` at the start of ``c``. Each
rank holds only the weights its stage reads. Micro-batches (``DistributedModel.run_batches``)
flow through the stages so that stage ``s`` works on micro-batch ``k`` while stage ``s + 1``
works on ``k - 1``.

Cost model: a binding costs ``max(flops / PEAK_FLOPS, bytes / PEAK_BYTES_PER_S)`` seconds
(a roofline: ``2 M N K`` flops for a matmul, one per output element otherwise; bytes of its
inputs and outputs). Stages are cut at the binding boundaries nearest to equal shares of the
total cost, traded against the bytes sent across each cut (``LINK_BYTES_PER_S``), and
earlier when a stage's weights would exceed ``memory_per_device``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShardingError
from ..graph.builder import FunctionBuilder
from ..graph.ir import Function, Var

__all__ = ["binding_cost", "crossing_bytes", "cut_stages", "stage_function", "PEAK_FLOPS",
           "PEAK_BYTES_PER_S", "LINK_BYTES_PER_S"]

PEAK_FLOPS = 50e9          # one CPU core's float32 FMA rate, order of magnitude
PEAK_BYTES_PER_S = 10e9    # one core's memory bandwidth, order of magnitude
LINK_BYTES_PER_S = 5e9     # rank-to-rank transfer (shared memory between local ranks)


def binding_flops(b) -> int:
    """Floating-point operations of one binding (``2 M N K`` for matmul, else its outputs)."""
    out = b.outputs[0].type
    n_out = sum(o.type.size for o in b.outputs if o.type.is_static)
    if b.call.op in ("matmul", "nn.dense") and out.is_static:
        k = b.call.args[0].type.shape[-1]
        return 2 * n_out * int(k)
    return n_out


def binding_cost(b) -> float:
    """Roofline seconds of one binding (see the module doc)."""
    nbytes = sum(v.type.nbytes for v in list(b.call.args) + list(b.outputs) if v.type.is_static)
    return max(binding_flops(b) / PEAK_FLOPS, nbytes / PEAK_BYTES_PER_S)


def _weights_of(b, params) -> set:
    return {a.name for a in b.call.args if isinstance(a, Var) and a.name in params}


def crossing_bytes(func: Function) -> list[int]:
    """``out[i]``: bytes of the values computed before binding ``i`` and read from ``i`` on
    (what a stage boundary at ``i`` sends)."""
    bs = func.bindings
    last: dict = {}
    for i, b in enumerate(bs):
        for a in b.call.args:
            if isinstance(a, Var):
                last[id(a)] = i
    for o in func.outputs:
        if isinstance(o, Var):
            last[id(o)] = len(bs)
    delta = np.zeros(len(bs) + 2, np.int64)
    for i, b in enumerate(bs):
        for o in b.outputs:
            if last.get(id(o), i) > i and o.type.is_static:
                delta[i + 1] += o.type.nbytes       # live from boundary i + 1 ...
                delta[last[id(o)] + 1] -= o.type.nbytes   # ... to its last reader
    return [int(x) for x in np.cumsum(delta)[:len(bs) + 1]]


def _balanced(cum, cross, n) -> list[int]:
    """Each cut at the boundary minimizing ``|cost so far - k/n of the total| + bytes sent /
    LINK_BYTES_PER_S`` (seconds of imbalance plus seconds of transfer)."""
    total, m = cum[-1], len(cum) - 1
    starts = [0]
    for k in range(1, n):
        share = total * k / n
        lo, hi = starts[-1] + 1, m - (n - k) + 1
        if lo >= hi:
            starts.append(min(lo, m - 1))
            continue
        idx = np.arange(lo, hi)
        score = np.abs(cum[idx] - share) + np.asarray(cross)[idx] / LINK_BYTES_PER_S
        starts.append(int(idx[int(np.argmin(score))]))
    return starts


def cut_stages(func: Function, params, n: int, memory_per_device: int | None = None
               ) -> list[int]:
    """Start indices of the ``n`` stages (``[0, s1, ..., s_{n-1}]``) over ``func.bindings``.

    Each cut is placed at the boundary that minimizes the imbalance (seconds between the cost
    so far and ``k / n`` of the total) plus the seconds to send the values live across it
    (``crossing_bytes / LINK_BYTES_PER_S``; between blocks only the residual stream is
    live). If a stage's
    weights then exceed ``memory_per_device``, stages are instead closed greedily before
    the budget is exceeded.

    Raises:
        ShardingError: fewer bindings than stages, or the weights do not fit ``n`` stages of
            ``memory_per_device`` bytes (names the largest weight and the budget).
    """
    bs = func.bindings
    if len(bs) < n:
        raise ShardingError(f"pipeline parallelism: {len(bs)} bindings cannot form {n} stages")
    costs = np.array([binding_cost(b) for b in bs])
    cum = np.concatenate([[0.0], np.cumsum(costs)])
    starts = _balanced(cum, crossing_bytes(func), n)
    if memory_per_device is None or all(
            _stage_weight_bytes(bs, params, a, b) <= memory_per_device
            for a, b in zip(starts, starts[1:] + [len(bs)])):
        return starts
    return _greedy(bs, params, n, memory_per_device, cum)


def _stage_weight_bytes(bs, params, a, b) -> int:
    names = set().union(*[_weights_of(x, params) for x in bs[a:b]])
    return int(sum(params[w].nbytes for w in names))


def _greedy(bs, params, n, memory_per_device, cum) -> list[int]:
    total = cum[-1]
    starts = [0]
    held: dict = {}
    for i, b in enumerate(bs):
        need = {w: params[w].nbytes for w in _weights_of(b, params)}
        left = n - len(starts)                 # stages still to open after this one
        over = (memory_per_device is not None and
                sum({**held, **need}.values()) > memory_per_device and held)
        share = total * len(starts) / n        # where the current stage should end
        nearer = (i > starts[-1] and left > 0 and cum[i] >= share
                  and abs(cum[i] - share) <= abs(cum[i + 1] - share))
        if (over or nearer) and left > 0 and len(bs) - i >= left:
            starts.append(i)
            held = {}
        elif over:
            big = max(((w, params[w]) for w in set(held) | set(need)), key=lambda t: t[1].nbytes)
            raise ShardingError(
                f"pipeline parallelism: the weights do not fit {n} stages of memory_per_device="
                f"{memory_per_device} bytes (largest weight {big[0]} {big[1].shape} "
                f"{big[1].dtype}: {big[1].nbytes} bytes)")
        held.update(need)
    while len(starts) < n:                     # a tail too cheap to reach its share
        starts.append(starts[-1] + 1 if starts[-1] + 1 < len(bs) else starts[-1])
    return starts


def stage_function(func: Function, params, starts: list[int], stage: int
                   ) -> tuple[Function, dict, list[int]]:
    """Rank ``stage``'s graph: ``dist.recv`` of the values earlier stages computed, its
    bindings, ``dist.send`` of the values later stages read.

    Returns ``(Function, {weight: array}, [indices of func.outputs this stage returns])``.
    """
    n = len(starts)
    bounds = list(starts) + [len(func.bindings)]
    stage_of: dict = {}
    for s in range(n):
        for b in func.bindings[bounds[s]:bounds[s + 1]]:
            for o in b.outputs:
                stage_of[id(o)] = s
    readers: dict = {}
    for s in range(n):
        for b in func.bindings[bounds[s]:bounds[s + 1]]:
            for a in b.call.args:
                if isinstance(a, Var) and id(a) in stage_of and stage_of[id(a)] != s:
                    readers.setdefault(id(a), set()).add(s)
    tags = {}
    for b in func.bindings:
        for o in b.outputs:
            if id(o) in readers:
                tags[id(o)] = len(tags)
    fb = FunctionBuilder(func.name)
    env: dict = {}
    mine = func.bindings[bounds[stage]:bounds[stage + 1]]
    used = {id(a) for b in mine for a in b.call.args if isinstance(a, Var)}
    used |= {id(o) for k, o in enumerate(func.outputs) if isinstance(o, Var)
             and stage_of.get(id(o)) == stage}
    local_params = {}
    for p in func.params:
        if id(p) not in used:
            continue
        env[id(p)] = fb.param(p.name, p.type)
        if p.name in params:
            local_params[p.name] = np.asarray(params[p.name])
    for b in func.bindings[:bounds[stage]]:         # values received from earlier stages
        for o in b.outputs:
            if id(o) in used:
                env[id(o)] = fb.call("dist.recv", [], {
                    "peer": stage_of[id(o)], "tag": tags[id(o)], "shape": list(o.type.shape),
                    "dtype": o.type.dtype}, names=[o.name])
    for b in mine:
        args = [env[id(a)] if isinstance(a, Var) else a for a in b.call.args]
        res = fb.call(b.call.op, args, b.call.attrs, names=[o.name for o in b.outputs])
        for o, r in zip(b.outputs, res if isinstance(res, tuple) else (res,)):
            env[id(o)] = r
    for b in mine:
        for o in b.outputs:
            for s in sorted(readers.get(id(o), ())):
                if s > stage:
                    fb.call("dist.send", [env[id(o)]], {"peer": s, "tag": tags[id(o)]},
                            names=[o.name + f"_to{s}"])
    held = [k for k, o in enumerate(func.outputs)
            if isinstance(o, Var) and (stage_of.get(id(o)) == stage
                                       or (id(o) not in stage_of and stage == 0 and id(o) in env))]
    f = fb.finish([env[id(func.outputs[k])] for k in held])
    names = func.attrs.get("output_names") or [o.name if isinstance(o, Var) else f"output{k}"
                                               for k, o in enumerate(func.outputs)]
    f.attrs = {k: v for k, v in func.attrs.items() if k != "output_names"}
    f.attrs["output_names"] = [names[k] for k in held]
    return f, local_params, held
