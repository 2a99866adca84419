"""``DeviceCluster``: the ranks a sharded model runs on, started through MPI.

Two ways to get ranks, both MPI (mpi4py over the ``mpich`` wheel's libmpi):

- **spawned**: in an ordinary process, ``DeviceCluster(["cpu:0", "cpu:1"])`` starts one worker
  process per device with ``MPI_Comm_spawn`` (``python -m ember.distributed.worker``); the
  workers' ``MPI_COMM_WORLD`` is the ranks' communicator, and this process (the driver) sends
  them their shards and inputs over the spawn inter-communicator. Local ranks talk over
  loopback / shared memory; each runs its kernels on ``threads_per_rank`` threads (default 1).
- **SPMD**: under ``mpiexec -n N python app.py`` every process is one rank
  (``MPI_COMM_WORLD`` has N ranks); each builds and runs only its own shard and ``run`` returns
  the outputs on every rank.

Failures end the whole run with a typed error naming the rank: a rank that raises reports
``RankFailedError(rank=r)`` with its error; every collective and every driver wait has a
deadline (``timeout`` seconds), so a rank that hangs or died gives ``CollectiveTimeoutError``
naming the ranks that did not answer, never a deadlock. After a failure the cluster refuses
further work (``DistributedError``): create a new one. A rank process that crashes outright
(segfault, kill -9) is cleaned up by MPI's process manager, which ends the whole MPI job,
driver included (MPICH's default); the ember error covers exceptions and hangs.

Devices are ``"cpu"`` / ``"cpu:K"``; GPU devices need a NCCL communicator behind the same
``Communicator`` interface, which does not exist yet (``DistributedError``).
"""

from __future__ import annotations

import atexit
import contextvars
import sys
import time

from ..errors import CollectiveTimeoutError, DistributedError, RankFailedError
from .comm import MPICommunicator, _mpi

__all__ = ["DeviceCluster", "current_cluster", "TAG_CTRL", "TAG_REPLY"]

TAG_CTRL, TAG_REPLY = 11, 12
_CURRENT: contextvars.ContextVar = contextvars.ContextVar("ember_device_cluster", default=None)


def current_cluster(required: bool = True):
    """The ``DeviceCluster`` of the innermost ``with cluster:`` block (``None`` if none and not
    ``required``).

    Raises:
        DistributedError: none is active and ``required``.
    """
    c = _CURRENT.get()
    if c is None and required:
        raise DistributedError("no DeviceCluster is active: build sharded modules inside "
                               "`with DeviceCluster([...]):`")
    return c


def _parse_device(d: str) -> str:
    kind = str(d).split(":")[0].strip().lower()
    if kind == "cpu":
        return str(d)
    if kind in ("gpu", "cuda", "nccl") or kind.startswith("gpu"):
        raise DistributedError(f"device {d!r}: GPU ranks need a NCCL communicator, which ember "
                               f"does not have yet (only 'cpu' / 'cpu:K' devices, over MPI)")
    raise DistributedError(f"unknown device {d!r}: expected 'cpu' or 'cpu:K'")


class DeviceCluster:
    """A set of ranks (one per device) that sharded models are built and run on.

    Args:
        devices: ``["cpu:0", "cpu:1", ...]``; ``None`` under ``mpiexec``: one per MPI rank.
        timeout: seconds any collective or a run may wait for a rank before
            ``CollectiveTimeoutError``.
        build_timeout: seconds the ranks may take to compile their shards.
        threads_per_rank: kernel threads of each rank (``-num-threads`` of its target) unless
            the target given to ``ember.build`` sets its own.

    Use ``with cluster:`` around ``partition_for_distributed`` and ``ember.build``; the ranks
    stay up (models built on them keep running) until ``close()`` or interpreter exit.

    Raises:
        DistributedError: mpi4py is missing, a device is not a CPU, the ranks could not be
            started, or a rank runs another ember version.
    """

    def __init__(self, devices=None, *, timeout: float = 60.0, build_timeout: float = 900.0,
                 threads_per_rank: int = 1):
        self.devices = None if devices is None else [_parse_device(d) for d in devices]
        if self.devices is not None and not self.devices:
            raise DistributedError("DeviceCluster needs at least one device")
        self.timeout = float(timeout)
        self.build_timeout = float(build_timeout)
        self.threads_per_rank = int(threads_per_rank)
        self.mode = None
        self.comm = None        # SPMD: this process's MPICommunicator
        self.inter = None       # spawned: the inter-communicator to the workers
        self.pids: list = []
        self.broken: str | None = None
        self._tokens: list = []
        self.start()

    @property
    def size(self) -> int:
        return len(self.devices)

    # lifetime ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start (spawn) or join (SPMD) the ranks; called by the constructor."""
        MPI = _mpi()
        world = MPI.COMM_WORLD
        if world.Get_size() > 1:
            if self.devices is not None and len(self.devices) != world.Get_size():
                raise DistributedError(f"DeviceCluster of {len(self.devices)} devices under an "
                                       f"MPI job of {world.Get_size()} ranks: they must agree")
            self.devices = self.devices or [f"cpu:{r}" for r in range(world.Get_size())]
            self.mode = "spmd"
            self.comm = MPICommunicator(world, self.timeout)
            return
        if self.devices is None:
            raise DistributedError("DeviceCluster(devices=None) is for mpiexec jobs; outside "
                                   "one, give the devices (['cpu:0', 'cpu:1'])")
        self.mode = "spawn"
        try:
            self.inter = MPI.COMM_SELF.Spawn(sys.executable,
                                             args=["-m", "ember.distributed.worker"],
                                             maxprocs=self.size)
        except MPI.Exception as e:
            raise DistributedError(f"could not start {self.size} ranks with MPI_Comm_spawn: "
                                   f"{e}") from None
        from .. import __version__
        atexit.register(self.close)
        hello = self._collect("start", 120.0)
        for r, (_, rank, pid, version) in sorted(hello.items()):
            self.pids.append(pid)
            if version != __version__:
                self.broken = "version mismatch"
                self.close()
                raise DistributedError(f"rank {r} runs ember {version}, the driver ember "
                                       f"{__version__}: every rank must run the same version",
                                       rank=r)

    def close(self) -> None:
        """Stop the spawned ranks (nothing to do in SPMD mode). Idempotent."""
        if self.inter is None:
            return
        inter, self.inter = self.inter, None
        for r in range(self.size):   # small messages: sent eagerly even to a busy rank
            inter.send(("close",), dest=r, tag=TAG_CTRL)
        if self.broken is None:
            try:
                self._collect("close", 10.0, inter=inter)
                inter.Disconnect()
            except DistributedError:
                pass
        # after a failure a rank may still wait in a collective until its own timeout; it then
        # reads the close request and exits: the inter-communicator is left to it

    def __enter__(self):
        self._tokens.append(_CURRENT.set(self))
        return self

    def __exit__(self, *exc):
        _CURRENT.reset(self._tokens.pop())
        return False

    # driver <-> spawned ranks ----------------------------------------------------------------
    def check_usable(self) -> None:
        """Raises ``DistributedError`` if the cluster is closed or broken by a failure."""
        if self.broken:
            raise DistributedError(f"this DeviceCluster is unusable after an earlier failure "
                                   f"({self.broken}); create a new DeviceCluster")
        if self.mode == "spawn" and self.inter is None:
            raise DistributedError("this DeviceCluster is closed")

    def request(self, messages: list, what: str, timeout: float) -> dict:
        """Send ``messages[r]`` to each spawned rank and wait for every reply.

        Returns ``{rank: reply payload}``.
        Raises:
            RankFailedError: a rank raised (names it and carries its error).
            CollectiveTimeoutError: ranks did not answer within ``timeout`` (names them).
        """
        self.check_usable()
        for r, m in enumerate(messages):
            self.inter.send(m, dest=r, tag=TAG_CTRL)
        return {r: rep[2] for r, rep in self._collect(what, timeout).items()}

    def _collect(self, what: str, timeout: float, inter=None) -> dict:
        inter = inter or self.inter
        deadline = time.perf_counter() + timeout
        pending, replies = set(range(self.size)), {}
        while pending:
            for r in sorted(pending):
                if inter.iprobe(source=r, tag=TAG_REPLY):
                    replies[r] = inter.recv(source=r, tag=TAG_REPLY)
                    pending.discard(r)
            failed = {r: rep for r, rep in replies.items()
                      if rep[0] == "error" and not rep[4]}
            if failed:
                r = min(failed)
                _, _, etype, msg, _ = failed[r]
                self.broken = f"rank {r} failed"
                raise RankFailedError(f"rank {r} failed during {what}: {etype}: {msg}", rank=r)
            if not pending:
                break
            if time.perf_counter() > deadline:
                self.broken = f"ranks {sorted(pending)} did not answer"
                waiting = sorted(r for r, rep in replies.items() if rep[0] == "error")
                raise CollectiveTimeoutError(
                    f"rank {min(pending)} did not answer during {what} within {timeout:g} s "
                    f"(silent ranks: {sorted(pending)}; ranks {waiting} timed out waiting for "
                    f"them)", rank=min(pending))
            time.sleep(2e-4)
        timeouts = {r: rep for r, rep in replies.items() if rep[0] == "error"}
        if timeouts:
            r = min(timeouts)
            self.broken = f"rank {r} timed out"
            raise CollectiveTimeoutError(f"rank {r} timed out during {what}: {timeouts[r][3]}",
                                         rank=r)
        return replies

    def __repr__(self):
        return f"DeviceCluster({self.devices!r}, mode={self.mode!r})"


def worker_reply_error(rank: int, e: BaseException) -> tuple:
    """The reply a rank sends for an exception (see ``DeviceCluster._collect``)."""
    return ("error", rank, type(e).__name__, str(e), isinstance(e, CollectiveTimeoutError))
