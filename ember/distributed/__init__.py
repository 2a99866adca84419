"""Multi-device compilation: partition a model over a cluster of ranks (MPI).

    from ember.distributed import DeviceCluster, partition_for_distributed
    cluster = DeviceCluster(["cpu:0", "cpu:1"])
    with cluster:
        sharded = partition_for_distributed(mod, params, strategy="tensor")
        model = ember.build(sharded, target="llvm")
    y, = model.run(feeds)        # equals the single-device result

See docs/distributed.md. Modules: ``placement`` (mesh, Replicate/Shard), ``tensor_parallel``
(Megatron layers found by placement propagation), ``pipeline`` (stages by a roofline cost
model), ``partition`` (strategies, memory budget), ``comm`` (communicator interface, MPI),
``executor`` (a rank's segments and collectives), ``cluster`` (ranks: spawned or mpiexec),
``model`` (``DistributedModel``), ``artifact`` (save/load), ``worker`` (a spawned rank),
``comm_nccl`` (NCCL communicator for GPU ranks), ``memory`` (a rank's measured RSS).
"""

from .artifact import load_sharded  # noqa: F401
from .cluster import DeviceCluster, current_cluster  # noqa: F401
from .comm import MPI_MISSING, Communicator, MPICommunicator, mpi_available  # noqa: F401
from .comm_nccl import NCCL_MISSING, NCCLCommunicator, check_nccl  # noqa: F401
from .model import DistributedModel  # noqa: F401
from .partition import STRATEGIES, RankShard, ShardedModule, partition_for_distributed  # noqa: F401
from .placement import DeviceMesh, Replicate, Shard, split_sizes  # noqa: F401

__all__ = ["DeviceCluster", "partition_for_distributed", "ShardedModule", "RankShard",
           "DistributedModel", "Communicator", "MPICommunicator", "DeviceMesh", "Replicate",
           "Shard", "split_sizes", "mpi_available", "MPI_MISSING", "STRATEGIES",
           "current_cluster", "load_sharded", "NCCLCommunicator", "NCCL_MISSING", "check_nccl"]
