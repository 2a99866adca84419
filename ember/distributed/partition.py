"""``partition_for_distributed``: one graph and its weights -> one shard per rank.

Strategies:

- ``"tensor"``: Megatron tensor parallelism over all ranks (``tensor_parallel.py``).
- ``"pipeline"``: one contiguous stage per rank (``pipeline.py``).
- ``"auto"``: with ``memory_per_device``, the first of tensor, pipeline whose every rank's
  weights fit the budget (tensor first: it divides the big matmuls' weights and their work;
  pipeline next: it divides every weight but runs the stages one after another for one
  input); without a budget, tensor.

Each shard holds only its own weights (``RankShard.params``); ``ShardedModule.weight_bytes[r]``
is what rank r holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ShardingError
from ..graph.ir import IRModule, Var
from . import pipeline, tensor_parallel
from .cluster import current_cluster

__all__ = ["RankShard", "ShardedModule", "partition_for_distributed", "STRATEGIES"]

STRATEGIES = ("tensor", "pipeline", "auto")


@dataclass
class RankShard:
    """Rank ``rank``'s graph (``mod``, with ``dist.*`` collectives), its weights and which of the
    model's outputs (indices) it returns."""

    rank: int
    mod: IRModule
    params: dict
    outputs: list

    @property
    def weight_bytes(self) -> int:
        return int(sum(np.asarray(a).nbytes for a in self.params.values()))


@dataclass
class ShardedModule:
    """The result of ``partition_for_distributed``: ``ember.build(sharded, target)`` compiles
    every rank's shard on its rank and returns a ``DistributedModel``.

    Attributes:
        shards: one ``RankShard`` per rank.
        strategy: ``"tensor"`` or ``"pipeline"`` (what ``"auto"`` chose).
        input_names, output_names, output_types: the model's (single-device) interface.
        info: ``weight_bytes`` per rank, ``stages`` (pipeline), ``memory_per_device``.
    """

    shards: list
    strategy: str
    input_names: list
    output_names: list
    output_types: list
    info: dict = field(default_factory=dict)

    @property
    def num_ranks(self) -> int:
        return len(self.shards)

    @property
    def weight_bytes(self) -> list[int]:
        return [s.weight_bytes for s in self.shards]

    def text(self, rank: int) -> str:
        """Rank ``rank``'s graph in the IR's text form."""
        return self.shards[rank].mod.text()

    def save(self, path) -> None:
        """Write every rank's graph, weights and the plan to one zip file
        (``ember.distributed.load_sharded`` reads it back)."""
        from .artifact import save_sharded
        save_sharded(self, path)

    def build(self, target="llvm", cluster=None):
        """Compile the shards on the cluster's ranks (``ember.build`` calls this)."""
        from .model import DistributedModel
        return DistributedModel.build(self, target, cluster or current_cluster(required=True))


def _tensor(func, params, n):
    plan = tensor_parallel.plan_tensor_parallel(func, params, n)
    shards = []
    for r in range(n):
        f, p = tensor_parallel.shard_function(func, params, plan, r)
        shards.append(RankShard(r, IRModule.from_function(f), p, list(range(len(func.outputs)))))
    return shards, {"sharded_weights": sorted(plan.weights)}


def _pipeline(func, params, n, budget):
    starts = pipeline.cut_stages(func, params, n, budget)
    shards = []
    for r in range(n):
        f, p, held = pipeline.stage_function(func, params, starts, r)
        shards.append(RankShard(r, IRModule.from_function(f), p, held))
    return shards, {"stages": starts}


def _largest(shards):
    name, arr, rank = max(((k, np.asarray(v), s.rank) for s in shards for k, v in s.params.items()),
                          key=lambda t: t[1].nbytes)
    return f"{name} {arr.shape} {arr.dtype} ({arr.nbytes} bytes, on rank {rank})"


def partition_for_distributed(mod: IRModule, params, strategy: str = "auto", *,
                              memory_per_device: int | None = None,
                              num_ranks: int | None = None) -> ShardedModule:
    """Split ``mod["main"]`` and its weights over the ranks of the current ``DeviceCluster``.

    Args:
        mod: the model's graph (``ember.frontend.from_onnx``), static shapes.
        params: ``{weight name: ndarray}`` of ``mod``'s weight parameters.
        strategy: ``"tensor"``, ``"pipeline"`` or ``"auto"`` (module doc).
        memory_per_device: bytes of weights one rank may hold; every shard is checked
            against it.
        num_ranks: ranks to split over; default the size of the current ``DeviceCluster``.

    Returns:
        ``ShardedModule``; ``ember.build(sharded, target="llvm")`` compiles it.

    Raises:
        ShardingError: unknown strategy; no cluster and no ``num_ranks``; a shard does not fit
            ``memory_per_device`` (names the largest tensor, its rank, and the budget).
    """
    if strategy not in STRATEGIES:
        raise ShardingError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if num_ranks is None:
        cluster = current_cluster(required=False)
        if cluster is None:
            raise ShardingError("partition_for_distributed needs the number of ranks: call it "
                                "inside `with DeviceCluster([...]):` or pass num_ranks=")
        num_ranks = cluster.size
    n = int(num_ranks)
    func = mod.main
    params = {k: np.asarray(v) for k, v in (params or {}).items()}
    if strategy == "auto":
        tries = ["tensor", "pipeline"]
    else:
        tries = [strategy]
    failures = []
    for s in tries:
        try:
            shards, info = (_tensor(func, params, n) if s == "tensor"
                            else _pipeline(func, params, n, memory_per_device))
        except ShardingError as e:
            failures.append(f"{s}: {e}")
            continue
        worst = max(sh.weight_bytes for sh in shards)
        if memory_per_device is not None and worst > memory_per_device:
            failures.append(f"{s}: a rank holds {worst} bytes of weights; largest tensor "
                            f"{_largest(shards)}")
            continue
        names = list(func.attrs.get("output_names") or
                     [o.name if isinstance(o, Var) else f"output{k}"
                      for k, o in enumerate(func.outputs)])
        info.update(memory_per_device=memory_per_device,
                    weight_bytes=[sh.weight_bytes for sh in shards],
                    total_weight_bytes=int(sum(a.nbytes for a in params.values())))
        return ShardedModule(shards, s, [p.name for p in func.params if p.name not in params],
                             names, [o.type for o in func.outputs], info)
    big = max(params, key=lambda k: params[k].nbytes) if params else None
    largest = (f"; its largest tensor is {big} {params[big].shape} {params[big].dtype} "
               f"({params[big].nbytes} bytes)" if big else "")
    raise ShardingError(f"the model cannot be split over {n} ranks to fit memory_per_device="
                        f"{memory_per_device} bytes{largest}: " + "; ".join(failures)
                        + ": give a larger budget or more ranks")
