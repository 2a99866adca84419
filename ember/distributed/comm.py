"""The communicator interface of a rank, and its MPI implementation (mpi4py).

``Communicator`` is the one small interface the distributed executor calls: ``all_reduce``,
``all_gather``, ``reduce_scatter``, ``send``/``recv``, ``broadcast`` and ``barrier`` on numpy
arrays. ``MPICommunicator`` implements it with MPI's non-blocking operations (``Iallreduce``,
``Iallgatherv``, ``Ireduce_scatter``, ``Isend``/``Irecv``, ``Ibcast``; MPI 4.0 chapters 3 and 6)
and waits on each request with a deadline, so a rank that died or hangs makes the others raise
``CollectiveTimeoutError`` instead of blocking forever. A GPU communicator (NCCL's
``ncclAllReduce``... on CUDA streams, ``comm_nccl.NCCLCommunicator``) implements the same
methods.

Every method counts the bytes this rank sends and the seconds it spends inside communication
(``stats``), which the benchmark reports apart from compute.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import CollectiveTimeoutError, DistributedError, RunAbortedError

__all__ = ["Communicator", "MPICommunicator", "mpi_available", "MPI_MISSING"]

MPI_MISSING = ("mpi4py is not installed: pip install 'ember[distributed]' (mpi4py and the mpich "
               "wheel, which provides libmpi and mpiexec)")


def mpi_available() -> bool:
    """True when mpi4py imports (with an MPI library it can load)."""
    try:
        from mpi4py import MPI  # noqa: F401
    except ImportError:
        return False
    return True


class Communicator:
    """What a rank can ask of its peers. Arrays are C-contiguous numpy arrays; results are new
    arrays (inputs are not modified).

    Attributes:
        rank, size: this rank's index and the number of ranks.
        stats: ``{"bytes_sent": int, "comm_s": float, "calls": int}`` since the last reset;
            ``bytes_sent`` is the payload this rank hands to operations (its local tensor:
            the shard for all_gather, the full tensor for all_reduce and reduce_scatter, the
            tensor for send and a root's broadcast), not the wire bytes of MPI's algorithm
            (a ring all-reduce moves 2 (p-1)/p of the payload per rank).
    """

    rank: int
    size: int

    def __init__(self):
        self.reset_stats()

    timeout: float = 60.0
    abort_check = None

    def reset_stats(self) -> None:
        self.stats = {"bytes_sent": 0, "comm_s": 0.0, "calls": 0}

    def wait_until(self, done, what: str, nbytes: int, t0: float | None = None,
                   give_up=None) -> None:
        """Poll ``done()`` until it is true: a short spin (latency), then 50 us sleeps (other
        ranks get the core); counts the seconds since ``t0`` and ``nbytes`` in ``stats``.

        Raises:
            RunAbortedError: ``abort_check()`` turned true (the driver aborted the run).
            CollectiveTimeoutError: ``timeout`` seconds passed (names this rank and ``what``).
            ``give_up()`` runs first in both cases (NCCL: ``ncclCommAbort``).
        """
        t0 = time.perf_counter() if t0 is None else t0
        deadline = t0 + self.timeout
        spins = 0
        while not done():
            spins += 1
            if spins <= 2000:
                continue
            time.sleep(5e-5)
            aborted = self.abort_check is not None and self.abort_check()
            if aborted or time.perf_counter() > deadline:
                if give_up is not None:
                    give_up()
                if aborted:
                    raise RunAbortedError(f"rank {self.rank}: {what} abandoned: the driver "
                                          f"aborted the run (another rank failed)",
                                          rank=self.rank)
                raise CollectiveTimeoutError(
                    f"rank {self.rank}: {what} did not complete within {self.timeout:g} s "
                    f"(a peer rank failed or hangs)", rank=self.rank)
        self.stats["comm_s"] += time.perf_counter() - t0
        self.stats["bytes_sent"] += nbytes
        self.stats["calls"] += 1

    def all_reduce(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """Elementwise sum of every rank's ``x`` (same shape and dtype on all ranks)."""
        raise NotImplementedError

    def all_gather(self, x: np.ndarray, axis: int, sizes) -> np.ndarray:
        """Concatenation along ``axis`` of every rank's ``x``; ``sizes[r]``: rank r's extent."""
        raise NotImplementedError

    def reduce_scatter(self, x: np.ndarray, axis: int, sizes) -> np.ndarray:
        """Sum over ranks of ``x`` (full extent on ``axis``), this rank's ``sizes[rank]`` slice."""
        raise NotImplementedError

    def send(self, x: np.ndarray, peer: int, tag: int = 0) -> None:
        """Start sending ``x`` to ``peer``; completes at the latest by ``flush()``."""
        raise NotImplementedError

    def recv(self, shape, dtype, peer: int, tag: int = 0) -> np.ndarray:
        """A tensor of ``shape``/``dtype`` received from ``peer``."""
        raise NotImplementedError

    def broadcast(self, x: np.ndarray | None, root: int, shape=None, dtype=None) -> np.ndarray:
        """``root``'s ``x`` on every rank (others pass ``shape``/``dtype``)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Wait for the sends started by ``send``."""

    def barrier(self) -> None:
        """Return when every rank has entered it."""
        raise NotImplementedError


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError(MPI_MISSING) from None
    return MPI


class MPICommunicator(Communicator):
    """``Communicator`` over an mpi4py intra-communicator (default ``MPI.COMM_WORLD``).

    Args:
        comm: the ``mpi4py.MPI.Intracomm`` of the ranks.
        timeout: seconds one operation may wait for its peers before
            ``CollectiveTimeoutError`` (names this rank and the operation).
        abort_check: ``() -> bool`` polled while an operation waits; when it returns true the
            wait ends with ``RunAbortedError`` (a spawned rank polls the driver's abort
            message: another rank failed, so this operation will never complete).
    """

    def __init__(self, comm=None, timeout: float = 60.0, abort_check=None):
        MPI = _mpi()
        self.abort_check = abort_check
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.timeout = float(timeout)
        self._pending: list = []
        super().__init__()

    def _wait(self, req, what: str, nbytes: int) -> None:
        self.wait_until(req.Test, what, nbytes)

    def all_reduce(self, x, op="sum"):
        if op != "sum":
            raise DistributedError(f"all_reduce op {op!r}: only 'sum' is implemented")
        MPI = _mpi()
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        req = self.comm.Iallreduce(x, out, op=MPI.SUM)
        self._wait(req, f"all_reduce of {x.shape} {x.dtype}", x.nbytes)
        return out

    def all_gather(self, x, axis, sizes):
        MPI = _mpi()
        sizes = [int(s) for s in sizes]
        xm = np.moveaxis(np.ascontiguousarray(x), axis, 0)
        xm = np.ascontiguousarray(xm)
        inner = int(np.prod(xm.shape[1:], dtype=np.int64))
        counts = [s * inner for s in sizes]
        displs = list(np.cumsum([0] + counts[:-1]))
        buf = np.empty((sum(sizes),) + xm.shape[1:], x.dtype)
        dt = MPI._typedict[np.dtype(x.dtype).char]
        req = self.comm.Iallgatherv([xm, dt], [buf, counts, displs, dt])
        self._wait(req, f"all_gather of {x.shape} {x.dtype} on axis {axis}",
                   xm.nbytes)
        return np.ascontiguousarray(np.moveaxis(buf, 0, axis))

    def reduce_scatter(self, x, axis, sizes):
        MPI = _mpi()
        sizes = [int(s) for s in sizes]
        xm = np.ascontiguousarray(np.moveaxis(np.ascontiguousarray(x), axis, 0))
        inner = int(np.prod(xm.shape[1:], dtype=np.int64))
        out = np.empty((sizes[self.rank],) + xm.shape[1:], x.dtype)
        req = self.comm.Ireduce_scatter(xm, out, [s * inner for s in sizes], op=MPI.SUM)
        self._wait(req, f"reduce_scatter of {x.shape} {x.dtype}", x.nbytes)
        return np.ascontiguousarray(np.moveaxis(out, 0, axis))

    def send(self, x, peer, tag=0):
        x = np.ascontiguousarray(x)
        req = self.comm.Isend(x, dest=int(peer), tag=int(tag))
        self._pending.append((req, x, f"send of {x.shape} {x.dtype} to rank {peer}"))
        self.stats["bytes_sent"] += x.nbytes

    def recv(self, shape, dtype, peer, tag=0):
        out = np.empty(tuple(shape), np.dtype(dtype))
        req = self.comm.Irecv(out, source=int(peer), tag=int(tag))
        self._wait(req, f"recv of {tuple(shape)} {dtype} from rank {peer}", 0)
        return out

    def broadcast(self, x, root, shape=None, dtype=None):
        if self.rank == root:
            buf = np.ascontiguousarray(x).copy()
        else:
            buf = np.empty(tuple(shape), np.dtype(dtype))
        req = self.comm.Ibcast(buf, root=int(root))
        self._wait(req, f"broadcast of {buf.shape} {buf.dtype} from rank {root}",
                   buf.nbytes if self.rank == root else 0)
        return buf

    def flush(self):
        pending, self._pending = self._pending, []
        for req, _, what in pending:
            self._wait(req, what, 0)
        self.stats["calls"] -= len(pending)

    def barrier(self):
        self._wait(self.comm.Ibarrier(), "barrier", 0)
