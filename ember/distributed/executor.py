"""One rank's executor: compiled segments with the communicator called between them.

As the staged executor (``ember.frontend.staging``) runs compiled segments with host kernels
between them, a rank's graph is cut at every ``dist.*`` binding: each run of ordinary bindings
is one ``ember.build`` (static plan, its weights in its own arena), and each collective is a
call of the rank's ``Communicator``. Nothing else runs between kernels.
"""

from __future__ import annotations

import time

import numpy as np

from ..graph.ir import Function, IRModule, Var
from ..graph.segments import Segment, cut_function, run_items
from ..ops.collective import COLLECTIVE_OPS
from .comm import Communicator

__all__ = ["RankProgram"]


class RankProgram:
    """Rank ``rank``'s compiled shard.

    Args:
        func: the rank's graph (``dist.*`` bindings between ordinary ones).
        params: ``{weight name: array}`` the rank holds (only its own shards).
        target: the ``ember.build`` target of the segments.
        build: ``(IRModule, target, params) -> CompiledModel`` (``ember.driver.build``).

    Attributes:
        items: ``Segment``s (``ember.graph.segments``) and collective bindings, in order.
        weight_bytes: bytes of the weights this rank holds.
        timings: ``{"compute_s", "comm_s"}`` of the last ``run``.
    """

    def __init__(self, func: Function, params: dict, target, build):
        self.func = func
        self.output_names = list(func.attrs.get("output_names") or [])
        self.weight_bytes = int(sum(np.asarray(a).nbytes for a in params.values()))
        self.weight_names = set(params)
        self.items = cut_function(func, lambda b: b.call.op in COLLECTIVE_OPS)
        for item in self.items:
            if isinstance(item, Segment):
                weights = {a.name: params[a.name] for a in item.inputs if a.name in params}
                item.model = build(IRModule.from_function(item.func), target, weights)
                item.inputs = [a for a in item.inputs if a.name not in params]
        self.timings = {"compute_s": 0.0, "comm_s": 0.0}

    def memory_plan(self) -> dict:
        """The bytes this rank holds while it runs (``ember.distributed.memory``), from the
        compiled plans and the graph's types.

        Returns ``{"weights", "arenas", "host_values", "comm_buffers", "peak"}`` (bytes):
        ``weights``: the arrays the segments' kernels read (their aligned copies);
        ``arenas``: the segments' static arenas, summed; ``host_values``: every value the
        executor keeps in its environment during a run (the feeds, segment outputs,
        collective results; a run keeps them all until it returns); ``comm_buffers``: the
        largest staging buffer beside a collective's result, plus the outputs pickled back to
        the driver; ``peak``: their sum. Also ``feed_bytes`` and ``reply_bytes`` (parts of
        the two terms before) and ``run_allocations``: what a run itself allocates on the heap
        (host values less the feeds, plus the staging buffer), which a traced run measures.
        """
        segs = [it for it in self.items if isinstance(it, Segment)]
        weights = sum(int(np.asarray(a).nbytes) for s in segs for a in s.model.params.values())
        arenas = sum(int(s.model.plan["arena_bytes"]) for s in segs)
        host = sum(p.type.nbytes for p in self.func.params if p.name not in self.weight_names)
        scratch = 0
        for it in self.items:
            if isinstance(it, Segment):
                host += sum(o.type.nbytes for o in it.outputs)
                continue
            op, out = it.call.op, it.outputs[0].type.nbytes
            if op != "dist.send":
                host += out
            if op in ("dist.all_gather", "dist.reduce_scatter"):
                scratch = max(scratch, it.call.args[0].type.nbytes + out)
            elif op == "dist.broadcast":
                scratch = max(scratch, out)
        feeds = sum(p.type.nbytes for p in self.func.params if p.name not in self.weight_names)
        reply = sum(o.type.nbytes for o in self.func.outputs)
        comm = scratch + reply
        return {"weights": weights, "arenas": arenas, "host_values": host,
                "comm_buffers": comm, "peak": weights + arenas + host + comm,
                "feed_bytes": feeds, "reply_bytes": reply,
                "run_allocations": host - feeds + scratch}

    def run(self, feeds: dict, comm: Communicator) -> list:
        """Run the shard on ``feeds`` (``{input name: array}``); returns this rank's outputs
        (in ``output_names`` order)."""
        env: dict = {}
        names = {p.name: p for p in self.func.params}
        for name, arr in feeds.items():
            if name in names:
                env[id(names[name])] = arr
        compute, comm_s = run_items(self.items, env,
                                    lambda b, env_: self._collective(b, env_, comm))
        t0 = time.perf_counter()
        comm.flush()
        comm_s += time.perf_counter() - t0
        self.timings = {"compute_s": compute, "comm_s": comm_s}
        return [env[id(o)] if isinstance(o, Var) else o.data for o in self.func.outputs]

    def run_collectives(self, comm: Communicator) -> float:
        """Only this rank's collectives, in order, on zero tensors of their types (no
        segment runs): the seconds one inference spends communicating when no rank waits for
        another's compute. Every rank must call it together (after a barrier)."""
        env: dict = {}
        for item in self.items:
            if isinstance(item, Segment):
                continue
            for a in item.call.args:
                if isinstance(a, Var) and id(a) not in env:
                    env[id(a)] = np.zeros(a.type.shape, a.type.dtype)
        comm.barrier()
        t0 = time.perf_counter()
        for item in self.items:
            if not isinstance(item, Segment):
                self._collective(item, env, comm)
        comm.flush()
        return time.perf_counter() - t0

    @staticmethod
    def _collective(b, env, comm: Communicator):
        c = b.call
        a = c.attrs
        args = [env[id(x)] if isinstance(x, Var) else x.data for x in c.args]
        if c.op == "dist.all_reduce":
            return comm.all_reduce(args[0], a["op"])
        if c.op == "dist.all_gather":
            return comm.all_gather(args[0], int(a["axis"]) % args[0].ndim, a["sizes"])
        if c.op == "dist.reduce_scatter":
            return comm.reduce_scatter(args[0], int(a["axis"]) % args[0].ndim, a["sizes"])
        if c.op == "dist.send":
            comm.send(args[0], a["peer"], a["tag"])
            return args[0]
        if c.op == "dist.recv":
            return comm.recv(a["shape"], a["dtype"], a["peer"], a["tag"])
        t = b.outputs[0].type
        return comm.broadcast(args[0] if args else None, a["root"], t.shape, t.dtype)
