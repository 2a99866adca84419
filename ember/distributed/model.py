"""``DistributedModel``: a sharded model compiled on a cluster's ranks, run like one model."""

from __future__ import annotations

import itertools

import numpy as np

from ..dtypes import np_dtype
from ..errors import InputError, RankFailedError, ShardingError
from ..target import Target
from .cluster import DeviceCluster
from .executor import RankProgram

__all__ = ["DistributedModel"]

_MODEL_IDS = itertools.count()


def _rank_target(target, cluster: DeviceCluster) -> str:
    t = Target(target)
    if t.num_threads is None and not t.is_gpu:
        t = Target(f"{t} -num-threads={cluster.threads_per_rank}")
    return str(t)


def _owners(sharded) -> list[int]:
    """The rank that returns each model output (the lowest that holds it)."""
    owner = {}
    for sh in sharded.shards:
        for k in sh.outputs:
            owner.setdefault(k, sh.rank)
    return [owner[k] for k in range(len(sharded.output_names))]


class DistributedModel:
    """A ``ShardedModule`` compiled on the ranks of a ``DeviceCluster``; ``run`` returns what the
    single-device model returns.

    Attributes:
        strategy: ``"tensor"`` or ``"pipeline"``.
        weight_bytes: bytes of weights each rank holds (list, by rank).
        info: the plan's info plus ``memory`` (by rank: ``RankProgram.memory_plan``'s
            ``weights`` / ``arenas`` / ``host_values`` / ``comm_buffers`` / ``peak`` bytes, and
            the rank's measured ``rss_before_build`` / ``rss_after_build``; ``None`` for other
            ranks under mpiexec) and ``peak_bytes`` (the planned peak by rank).
        last_stats: per rank, ``compute_s`` / ``comm_s`` (seconds inside the communicator) /
            ``bytes_sent`` / ``calls`` of the last ``run`` or ``run_batches``, and (spawned
            ranks) the measured ``rss_before_run`` / ``rss_peak_run`` bytes (``VmHWM``).
    """

    def __init__(self, sharded, cluster: DeviceCluster, target: str, local=None):
        self.sharded = sharded
        self.cluster = cluster
        self.target = target
        self.strategy = sharded.strategy
        self.output_names = list(sharded.output_names)
        self.input_names = list(sharded.input_names)
        self.weight_bytes = sharded.weight_bytes
        self.owners = _owners(sharded)
        self._local = local       # SPMD: this rank's RankProgram
        # each model input's type, from a shard that reads it: feeds are checked on the driver,
        # so that a wrong dtype or shape is an InputError rather than a rank failure (which
        # costs a restart of the ranks)
        self.input_types = {}
        for sh in sharded.shards:
            for p in sh.mod.main.params:
                if p.name in self.input_names:
                    self.input_types.setdefault(p.name, p.type)
        self.last_stats: list = []
        self.info = dict(sharded.info, strategy=sharded.strategy, num_ranks=sharded.num_ranks,
                         target=target, mode=cluster.mode)

    @classmethod
    def build(cls, sharded, target, cluster: DeviceCluster) -> "DistributedModel":
        """Compile every shard on its rank (spawned ranks compile in parallel).

        Raises:
            InputError: the module was partitioned for another number of ranks.
            RankFailedError: a rank could not build its shard (names it).
            ShardingError: with ``memory_per_device`` given to the partitioner, a rank's
                planned peak (weights + arenas + host values + communication buffers) exceeds
                it (names the rank, each term and the budget).
        """
        from ..driver import build
        cluster.check_usable()
        if sharded.num_ranks != cluster.size:
            raise InputError(f"the module was partitioned for {sharded.num_ranks} ranks, the "
                             f"cluster has {cluster.size}")
        tgt = _rank_target(target, cluster)
        if cluster.mode == "spmd":
            sh = sharded.shards[cluster.comm.rank]
            try:
                prog = RankProgram(sh.mod.main, sh.params, tgt, build)
            except Exception as e:  # noqa: BLE001 - reported with the rank that failed
                raise RankFailedError(f"rank {cluster.comm.rank} failed to build its shard: "
                                      f"{type(e).__name__}: {e}", rank=cluster.comm.rank,
                                      error_type=type(e).__name__) from e
            cluster.comm.barrier()
            model = cls(sharded, cluster, tgt, local=prog)
            memory = [None] * cluster.size
            memory[cluster.comm.rank] = prog.memory_plan()
            model._set_memory(memory)
            return model
        key = next(_MODEL_IDS)
        msgs = [("build", key, sh.mod.text(), sh.params, tgt, cluster.timeout)
                for sh in sharded.shards]
        replies = cluster.request(msgs, "build", cluster.build_timeout)
        model = cls(sharded, cluster, tgt)
        model._key, model._build_messages = key, msgs
        model._set_memory([replies[r]["memory"] for r in range(cluster.size)])
        cluster.register(key, model)
        return model

    def _rebuild(self) -> None:
        """Build this model again on a restarted cluster's new ranks (``DeviceCluster.restart``)."""
        replies = self.cluster._request(self._build_messages, "rebuild", self.cluster.build_timeout)
        self._set_memory([replies[r]["memory"] for r in range(self.cluster.size)])

    def _set_memory(self, memory: list) -> None:
        self.info["memory"] = memory
        self.info["peak_bytes"] = [m["peak"] if m else None for m in memory]
        budget = self.sharded.info.get("memory_per_device")
        for r, m in enumerate(memory):
            if budget is not None and m and m["peak"] > budget:
                raise ShardingError(
                    f"rank {r}'s planned peak memory {m['peak']} bytes exceeds memory_per_device="
                    f"{budget} bytes (weights {m['weights']}, arenas {m['arenas']}, host values "
                    f"{m['host_values']}, communication buffers {m['comm_buffers']}): give a "
                    f"larger budget or more ranks")

    def run(self, inputs) -> list[np.ndarray]:
        """Run one inference: ``inputs`` ``{name: array}`` as for the single-device model;
        returns its outputs (list, model order) on this process.

        Raises:
            InputError: a missing input, or one of the wrong dtype or shape (checked on the
                driver; the cluster stays usable). RankFailedError / CollectiveTimeoutError: a rank
                failed or hangs (names it).
        """
        return self.run_batches([inputs])[0]

    def run_batches(self, batches: list) -> list[list[np.ndarray]]:
        """Run several inputs (micro-batches) in one go: pipeline stages overlap, stage ``s``
        working on batch ``k`` while stage ``s + 1`` works on ``k - 1``. Returns one output
        list per batch."""
        feeds = []
        for b in batches:
            missing = [n for n in self.input_names if n not in b]
            if missing:
                raise InputError(f"missing model inputs {missing} (inputs: {self.input_names})")
            # (np.ascontiguousarray alone would turn a 0-d array into shape (1,))
            feed = {n: np.ascontiguousarray(b[n]).reshape(np.shape(b[n]))
                    for n in self.input_names}
            for n, a in feed.items():
                t = self.input_types.get(n)
                if t is None:
                    continue
                if a.dtype != np_dtype(t.dtype):
                    raise InputError(f"input {n!r}: expected dtype {t.dtype}, got {a.dtype} "
                                     f"(convert with .astype(np.{t.dtype}))")
                if tuple(a.shape) != tuple(t.shape):
                    raise InputError(f"input {n!r}: expected shape {tuple(t.shape)}, got "
                                     f"{tuple(a.shape)}")
            feeds.append(feed)
        if self._local is not None:
            return self._run_spmd(feeds)
        return self._run_feeds(feeds)

    def _run_feeds(self, feeds, trace: bool = False):
        msgs = []
        for sh in self.sharded.shards:
            want = [i for i, k in enumerate(sh.outputs) if self.owners[k] == sh.rank]
            msgs.append(("run", self._key, feeds, want, trace))
        replies = self.cluster.request(msgs, "run", self.cluster.timeout + 3.0)
        outs = [[None] * len(self.output_names) for _ in feeds]
        for sh in self.sharded.shards:
            rep = replies[sh.rank]
            held = [k for k in sh.outputs if self.owners[k] == sh.rank]
            for m, values in enumerate(rep["outputs"]):
                for k, v in zip(held, values):
                    outs[m][k] = v
        self.last_stats = [replies[r]["stats"] for r in range(self.cluster.size)]
        return outs

    def measure_memory(self, inputs) -> list[dict]:
        """Run ``inputs`` once with ``tracemalloc`` on every spawned rank (slower; for checking
        the memory plan) and return, by rank, ``{"traced_peak_run", "run_allocations"}``: the
        heap bytes the run allocated at its peak (measured) and the plan's
        ``run_allocations`` (what the executor's values and collective buffers should take).

        Raises:
            DistributedError: under mpiexec (use ``tracemalloc`` in the job itself).
        """
        from ..errors import DistributedError
        if self._local is not None:
            raise DistributedError("measure_memory is for spawned ranks")
        self._run_feeds([inputs], trace=True)
        return [{"traced_peak_run": s["traced_peak_run"],
                 "run_allocations": self.info["memory"][r]["run_allocations"]}
                for r, s in enumerate(self.last_stats)]

    def benchmark_collectives(self, repeats: int = 20) -> list[dict]:
        """Every spawned rank runs only its collectives of one inference (zero tensors of the
        same types, in the same order, after a barrier), ``repeats`` times; returns by rank
        ``{"median_s", "min_s"}``: the communication time without waiting for another rank's
        compute (``last_stats``' ``comm_s`` includes that waiting)."""
        from ..errors import DistributedError
        if self._local is not None:
            raise DistributedError("benchmark_collectives is for spawned ranks")
        msgs = [("collectives", self._key, int(repeats))] * self.cluster.size
        replies = self.cluster.request(msgs, "collectives", self.cluster.timeout * repeats)
        return [replies[r] for r in range(self.cluster.size)]

    def _run_spmd(self, feeds):
        comm, prog = self.cluster.comm, self._local
        sh = self.sharded.shards[comm.rank]
        comm.reset_stats()
        compute = 0.0
        results = []
        for f in feeds:
            try:
                local = prog.run(f, comm)
            except Exception as e:  # noqa: BLE001
                if isinstance(e, (RankFailedError,)) or type(e).__name__.endswith("TimeoutError"):
                    raise
                raise RankFailedError(f"rank {comm.rank} failed: {type(e).__name__}: {e}",
                                      rank=comm.rank, error_type=type(e).__name__) from e
            compute += prog.timings["compute_s"]
            mine = dict(zip(sh.outputs, local))
            out = []
            for k, t in enumerate(self.sharded.output_types):
                v = mine.get(k) if self.owners[k] == comm.rank else None
                out.append(comm.broadcast(v, self.owners[k], t.shape, t.dtype)
                           if comm.size > 1 else v)
            results.append(out)
        self.last_stats = [dict(comm.stats, compute_s=compute)]
        return results
