"""Collective and point-to-point communication operators (``dist.*``) of sharded graphs.

They have no kernel: ``ember.distributed``'s executor cuts a rank's graph at each of them, runs
the compiled segments between them and calls the rank's communicator (MPI; see
``ember/distributed/comm.py``) for each one. Their types are what the rank holds afterwards:

- ``dist.all_reduce(x, op="sum")``: every rank's ``x`` summed elementwise (same shape).
- ``dist.all_gather(x, axis, sizes)``: the ranks' shards of ``x`` concatenated along ``axis``;
  ``sizes[r]`` is rank r's extent on that axis (uneven splits allowed); result extent ``sum``.
- ``dist.reduce_scatter(x, axis, sizes)``: summed over ranks, this rank keeps its ``sizes[r]``
  slice of ``axis``.
- ``dist.send(x, peer, tag)``: sends ``x`` to rank ``peer``; its result is ``x`` itself (a value
  the graph may ignore).
- ``dist.recv(peer, tag, shape, dtype)``: a tensor of ``shape``/``dtype`` received from ``peer``.
- ``dist.broadcast(x, root)`` on the root, ``dist.broadcast(root, shape, dtype)`` elsewhere.

Semantics follow the MPI standard's collectives (MPI 4.0, chapter 6) and Megatron-LM's
tensor-parallel layers (Shoeybi et al., 2019).
"""

from __future__ import annotations

from ..errors import ShapeMismatchError
from .registry import REQUIRED, OpPattern, normalize_axis, register_op

__all__ = ["COLLECTIVE_OPS"]


def _tt():
    from ..graph.ir import TensorType
    return TensorType


def _same(types, attrs):
    return [types[0]]


def _gather_type(types, attrs):
    t = types[0]
    ax = normalize_axis(attrs["axis"], t.ndim)
    sizes = [int(s) for s in attrs["sizes"]]
    if t.shape[ax] not in sizes:
        raise ShapeMismatchError(f"dist.all_gather: local extent {t.shape[ax]} on axis {ax} is "
                                 f"none of the ranks' sizes {sizes}")
    shape = list(t.shape)
    shape[ax] = sum(sizes)
    return [_tt()(tuple(shape), t.dtype)]


def _scatter_type(types, attrs):
    t = types[0]
    ax = normalize_axis(attrs["axis"], t.ndim)
    sizes = [int(s) for s in attrs["sizes"]]
    if sum(sizes) != t.shape[ax]:
        raise ShapeMismatchError(f"dist.reduce_scatter: sizes {sizes} do not sum to extent "
                                 f"{t.shape[ax]} of axis {ax}")
    shape = list(t.shape)
    shape[ax] = sizes[int(attrs["rank"])]
    return [_tt()(tuple(shape), t.dtype)]


def _recv_type(types, attrs):
    return [_tt()(tuple(int(d) for d in attrs["shape"]), attrs["dtype"])]


def _bcast_type(types, attrs):
    return [types[0]] if types else _recv_type(types, attrs)


register_op("dist.all_reduce", infer_type=_same, pattern=OpPattern.OPAQUE,
            attrs={"op": "sum"}, num_inputs=(1, 1),
            doc="sum of every rank's tensor (MPI_Allreduce); row-parallel matmul outputs")
register_op("dist.all_gather", infer_type=_gather_type, pattern=OpPattern.OPAQUE,
            attrs={"axis": REQUIRED, "sizes": REQUIRED}, num_inputs=(1, 1),
            doc="ranks' shards concatenated along axis (MPI_Allgatherv); uneven sizes allowed")
register_op("dist.reduce_scatter", infer_type=_scatter_type, pattern=OpPattern.OPAQUE,
            attrs={"axis": REQUIRED, "sizes": REQUIRED, "rank": REQUIRED}, num_inputs=(1, 1),
            doc="sum over ranks, each rank keeps its slice of axis (MPI_Reduce_scatter)")
register_op("dist.send", infer_type=_same, pattern=OpPattern.OPAQUE,
            attrs={"peer": REQUIRED, "tag": 0}, num_inputs=(1, 1),
            doc="send to rank peer (MPI_Isend); result is the input")
register_op("dist.recv", infer_type=_recv_type, pattern=OpPattern.OPAQUE,
            attrs={"peer": REQUIRED, "tag": 0, "shape": REQUIRED, "dtype": REQUIRED},
            num_inputs=(0, 0), doc="tensor received from rank peer (MPI_Irecv)")
register_op("dist.broadcast", infer_type=_bcast_type, pattern=OpPattern.OPAQUE,
            attrs={"root": REQUIRED, "shape": None, "dtype": None}, num_inputs=(0, 1),
            doc="root's tensor on every rank (MPI_Bcast)")

COLLECTIVE_OPS = frozenset({"dist.all_reduce", "dist.all_gather", "dist.reduce_scatter",
                            "dist.send", "dist.recv", "dist.broadcast"})
