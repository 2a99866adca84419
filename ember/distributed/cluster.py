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

Failures end the whole run with a typed error naming the rank: a rank that raises (a bad index
in its data is an ``InputError`` there) reports ``RankFailedError(rank=r)`` with its error, and
the driver at once sends every rank an abort, so ranks waiting in a collective for the failed
one stop (``RunAbortedError``) instead of waiting out their deadline; every collective and
every driver wait has a deadline (``timeout`` seconds), so a rank that hangs gives
``CollectiveTimeoutError`` naming the ranks that did not answer, never a deadlock. The
cluster is then *restarted by its next use*: the old ranks are let go (a close request and
``MPI_Comm_free`` of the inter-communicator, no collective that a hung rank could block) and a
new set is spawned, on which every model built on the cluster is rebuilt (a kernel-cache
lookup); ``restarts`` counts them. A rank process that crashes outright (segfault, kill -9) is
cleaned up by MPI's process manager, which ends the whole MPI job, driver included (MPICH's
default); the ember error covers exceptions and hangs.

Devices are ``"cpu"`` / ``"cpu:K"`` (MPI) or ``"gpu:K"`` / ``"cuda:K"`` (NCCL on NVIDIA GPUs,
``comm_nccl``; without a GPU or NCCL: ``DeviceError`` saying what to install).
"""

from __future__ import annotations

import atexit
import contextvars
import os
import sys
import time
import weakref

from ..errors import (CollectiveTimeoutError, DistributedError, RankFailedError,
                      RunAbortedError)
from .comm import MPICommunicator, _mpi

__all__ = ["DeviceCluster", "current_cluster", "TAG_CTRL", "TAG_REPLY", "TAG_ABORT"]

TAG_CTRL, TAG_REPLY, TAG_ABORT = 11, 12, 13
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


def _parse_device(d: str) -> tuple[str, str]:
    """``(kind, device)``: kind ``"cpu"`` (MPI) or ``"gpu"`` (NCCL)."""
    kind = str(d).split(":")[0].strip().lower()
    if kind == "cpu":
        return "cpu", str(d)
    if kind in ("gpu", "cuda") or kind.startswith("gpu"):
        return "gpu", str(d)
    raise DistributedError(f"unknown device {d!r}: expected 'cpu', 'cpu:K', 'gpu:K' or 'cuda:K'")


def _gpu_index(d: str) -> int:
    tail = d.split(":", 1)[1] if ":" in d else d[3:] if d.lower().startswith("gpu") else ""
    try:
        return int(tail or 0)
    except ValueError:
        raise DistributedError(f"device {d!r}: expected 'gpu:K' or 'cuda:K' with an integer "
                               f"K") from None


class DeviceCluster:
    """A set of ranks (one per device) that sharded models are built and run on.

    Args:
        devices: ``["cpu:0", "cpu:1", ...]`` (MPI collectives) or ``["gpu:0", "gpu:1", ...]``
            (NCCL collectives, one GPU per rank); ``None`` under ``mpiexec``: one CPU rank per
            MPI rank.
        timeout: seconds any collective or a run may wait for a rank before
            ``CollectiveTimeoutError``.
        build_timeout: seconds the ranks may take to compile their shards.
        start_timeout: seconds the spawned ranks may take to report after ``MPI_Comm_spawn``.
        threads_per_rank: kernel threads of each rank (``-num-threads`` of its target) unless
            the target given to ``ember.build`` sets its own.
        python: the interpreter the spawned ranks run (default ``sys.executable``); it must
            have the driver's ember version.

    Use ``with cluster:`` around ``partition_for_distributed`` and ``ember.build``; the ranks
    stay up (models built on them keep running) until ``close()`` or interpreter exit. After a
    failure the next ``build`` or ``run`` restarts the ranks (``restart``).

    Raises:
        DistributedError: mpi4py is missing, the ranks could not be started (the interpreter
            does not exist, ``MPI_Comm_spawn`` failed, no report within ``start_timeout``), or
            a rank runs another ember version (names the rank).
        DeviceError: GPU devices without an NVIDIA GPU, the CUDA driver or NCCL (says what
            to install).
    """

    def __init__(self, devices=None, *, timeout: float = 60.0, build_timeout: float = 900.0,
                 start_timeout: float = 120.0, threads_per_rank: int = 1, python=None):
        parsed = None if devices is None else [_parse_device(d) for d in devices]
        if parsed is not None and not parsed:
            raise DistributedError("DeviceCluster needs at least one device")
        kinds = {k for k, _ in parsed or []}
        if len(kinds) > 1:
            raise DistributedError(f"devices {list(devices)}: mix of CPU and GPU ranks; one "
                                   f"cluster has one kind (MPI or NCCL collectives)")
        self.backend = "nccl" if kinds == {"gpu"} else "mpi"
        self.devices = None if parsed is None else [d for _, d in parsed]
        if self.backend == "nccl":
            from .comm_nccl import check_nccl
            check_nccl([_gpu_index(d) for d in self.devices])
        self.timeout = float(timeout)
        self.build_timeout = float(build_timeout)
        self.start_timeout = float(start_timeout)
        self.threads_per_rank = int(threads_per_rank)
        self.python = os.fspath(python) if python is not None else sys.executable
        self.mode = None
        self.comm = None        # SPMD: this process's MPICommunicator
        self.inter = None       # spawned: the inter-communicator to the workers
        self.pids: list = []
        self.broken: str | None = None
        self.closed = False
        self.restarts = 0
        self._models = weakref.WeakValueDictionary()  # model key -> DistributedModel
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
            if self.backend == "nccl":
                raise DistributedError("GPU ranks under mpiexec are not supported yet: spawn "
                                       "them with DeviceCluster(['gpu:0', 'gpu:1', ...])")
            self.devices = self.devices or [f"cpu:{r}" for r in range(world.Get_size())]
            self.mode = "spmd"
            self.comm = MPICommunicator(world, self.timeout)
            return
        if self.devices is None:
            raise DistributedError("DeviceCluster(devices=None) is for mpiexec jobs; outside "
                                   "one, give the devices (['cpu:0', 'cpu:1'])")
        # MPICH's process manager ends the whole job (driver included) when it cannot exec
        # the ranks' program: check it here, where the error can still be typed
        if not (os.path.isfile(self.python) and os.access(self.python, os.X_OK)):
            raise DistributedError(f"cannot start the ranks: the interpreter {self.python!r} "
                                   f"does not exist or is not executable (the ranks run "
                                   f"`{self.python} -m ember.distributed.worker`); pass "
                                   f"python= an interpreter that has ember installed")
        self.mode = "spawn"
        self._spawn()
        atexit.register(self.close)

    def _spawn(self) -> None:
        from .. import __version__
        MPI = _mpi()
        args = ["-m", "ember.distributed.worker", self.backend, ",".join(self.devices)]
        try:
            self.inter = MPI.COMM_SELF.Spawn(self.python, args=args, maxprocs=self.size)
        except MPI.Exception as e:
            self.inter = None
            raise DistributedError(f"could not start {self.size} ranks with MPI_Comm_spawn: "
                                   f"{e}") from None
        self.broken = None
        try:
            hello = self._collect("start", self.start_timeout)
        except DistributedError as e:
            self._retire()
            raise DistributedError(f"the cluster's ranks could not be reached: {e}",
                                   rank=e.rank) from None
        self.pids = [hello[r][2] for r in range(self.size)]
        for r, (_, rank, pid, version) in sorted(hello.items()):
            if version != __version__:
                self.broken = "version mismatch"
                self.close()
                raise DistributedError(f"rank {r} runs ember {version}, the driver ember "
                                       f"{__version__}: every rank must run the same version",
                                       rank=r)

    def _retire(self) -> None:
        """Let the current ranks go without any collective a hung rank could block: a close
        request to each, their goodbyes awaited briefly, ``MPI_Comm_free`` of the
        inter-communicator. A rank still waiting (stopped, or in a long kernel) reads the
        close request when it returns and exits."""
        inter, self.inter = self.inter, None
        if inter is None:
            return
        for r in range(self.size):   # small messages: sent eagerly even to a busy rank
            inter.send(("close",), dest=r, tag=TAG_CTRL)
        deadline = time.perf_counter() + (2.0 if self.broken else 10.0)
        closed: set = set()
        while len(closed) < self.size and time.perf_counter() < deadline:
            for r in range(self.size):
                while r not in closed and inter.iprobe(source=r, tag=TAG_REPLY):
                    if inter.recv(source=r, tag=TAG_REPLY)[0] == "closed":
                        closed.add(r)
            time.sleep(1e-3)
        inter.Free()

    def restart(self) -> None:
        """Replace the ranks with a new set (after a failure; ``build``/``run`` call it on a
        broken cluster) and rebuild on them every model built on this cluster that is still
        alive.

        Raises:
            DistributedError: the cluster is closed, or is an ``mpiexec`` job (restart the job).
        """
        if self.closed:
            raise DistributedError("this DeviceCluster is closed")
        if self.mode != "spawn":
            raise DistributedError(f"an mpiexec job's ranks cannot be restarted from inside "
                                   f"(after: {self.broken}); run the job again")
        self._retire()
        self._spawn()
        self.restarts += 1
        for key in sorted(self._models.keys()):
            model = self._models.get(key)
            if model is not None:
                model._rebuild()

    def close(self) -> None:
        """Stop the spawned ranks (nothing to do in SPMD mode). Idempotent."""
        self.closed = True
        self._retire()

    def __enter__(self):
        self._tokens.append(_CURRENT.set(self))
        return self

    def __exit__(self, *exc):
        _CURRENT.reset(self._tokens.pop())
        return False

    # driver <-> spawned ranks ----------------------------------------------------------------
    def check_usable(self) -> None:
        """Make the cluster ready for work: restart it if an earlier failure broke it.

        Raises:
            DistributedError: the cluster is closed, or broken and cannot restart (SPMD).
        """
        if self.closed:
            raise DistributedError("this DeviceCluster is closed")
        if self.broken:
            self.restart()

    def register(self, key, model) -> None:
        """Remember ``model`` (built under ``key`` on the ranks) to rebuild it on a restart."""
        self._models[key] = model

    def request(self, messages: list, what: str, timeout: float) -> dict:
        """Send ``messages[r]`` to each spawned rank and wait for every reply.

        Returns ``{rank: reply payload}``.
        Raises:
            RankFailedError: a rank raised (names it and carries its error).
            CollectiveTimeoutError: ranks did not answer within ``timeout`` (names them).
        """
        self.check_usable()
        return self._request(messages, what, timeout)

    def _request(self, messages, what, timeout):
        for r, m in enumerate(messages):
            self.inter.send(m, dest=r, tag=TAG_CTRL)
        return {r: rep[2] for r, rep in self._collect(what, timeout).items()}

    def _fail(self, reason: str) -> None:
        """Mark the cluster broken and tell every rank to stop waiting for its peers."""
        self.broken = reason
        for r in range(self.size):
            self.inter.send(None, dest=r, tag=TAG_ABORT)

    def _collect(self, what: str, timeout: float) -> dict:
        inter = self.inter
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
                self._fail(f"rank {r} failed")
                raise RankFailedError(f"rank {r} failed during {what}: {etype}: {msg}", rank=r,
                                      error_type=etype)
            if not pending:
                break
            if time.perf_counter() > deadline:
                self._fail(f"ranks {sorted(pending)} did not answer")
                waiting = sorted(r for r, rep in replies.items() if rep[0] == "error")
                raise CollectiveTimeoutError(
                    f"rank {min(pending)} did not answer during {what} within {timeout:g} s "
                    f"(silent ranks: {sorted(pending)}; ranks {waiting} timed out waiting for "
                    f"them)", rank=min(pending))
            time.sleep(2e-4)
        timeouts = {r: rep for r, rep in replies.items() if rep[0] == "error"}
        if timeouts:
            r = min(timeouts)
            self._fail(f"rank {r} timed out")
            raise CollectiveTimeoutError(f"rank {r} timed out during {what}: {timeouts[r][3]}",
                                         rank=r)
        return replies

    def __repr__(self):
        return f"DeviceCluster({self.devices!r}, mode={self.mode!r})"


def worker_reply_error(rank: int, e: BaseException) -> tuple:
    """The reply a rank sends for an exception (see ``DeviceCluster._collect``)."""
    return ("error", rank, type(e).__name__, str(e),
            isinstance(e, (CollectiveTimeoutError, RunAbortedError)))
