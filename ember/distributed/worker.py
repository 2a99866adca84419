"""A spawned rank (``python -m ember.distributed.worker BACKEND DEVICES``): builds and runs its
shard on the driver's requests (see ``ember.distributed.cluster``).

``BACKEND`` is ``mpi`` (collectives over ``MPI_COMM_WORLD``) or ``nccl`` (over NCCL on GPU
``DEVICES[rank]``, bootstrapped over MPI); ``DEVICES`` is the comma-separated device list.
Besides the shard, each rank measures its own memory (``memory.rss_bytes``, ``VmHWM``) so
that the driver can report the measured peak next to the planned one.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc

from .memory import rss_bytes, rss_peak_bytes, reset_rss_peak


def _communicator(MPI, backend: str, devices: list, abort_check):
    from .comm import MPICommunicator
    if backend == "nccl":
        from .cluster import _gpu_index
        from .comm_nccl import NCCLCommunicator
        rank = MPI.COMM_WORLD.Get_rank()
        os.environ["EMBER_CUDA_DEVICE"] = str(_gpu_index(devices[rank]))  # its CUDA segments
        return NCCLCommunicator(MPI.COMM_WORLD, _gpu_index(devices[rank]),
                                abort_check=abort_check)
    return MPICommunicator(MPI.COMM_WORLD, abort_check=abort_check)


def main(argv=None) -> None:
    from mpi4py import MPI

    from .. import __version__
    from ..driver import build
    from ..graph.ir import IRModule
    from .cluster import TAG_ABORT, TAG_CTRL, TAG_REPLY, worker_reply_error
    from .executor import RankProgram

    argv = sys.argv[1:] if argv is None else argv
    backend = argv[0] if argv else "mpi"
    devices = argv[1].split(",") if len(argv) > 1 else []
    parent = MPI.Comm.Get_parent()
    rank = MPI.COMM_WORLD.Get_rank()
    comm = None
    try:
        comm = _communicator(MPI, backend, devices,
                             lambda: parent.iprobe(source=0, tag=TAG_ABORT))
        parent.send(("hello", rank, os.getpid(), __version__), dest=0, tag=TAG_REPLY)
    except Exception as e:  # noqa: BLE001 - a communicator that cannot start, reported typed
        parent.send(worker_reply_error(rank, e), dest=0, tag=TAG_REPLY)
    programs: dict = {}    # model id -> RankProgram (several models may share the ranks)
    last = time.perf_counter()
    while True:
        # MPI's blocking receive spins a core: idle ranks poll and sleep instead, spinning only
        # for a moment after each request so that back-to-back runs are not delayed, and
        # polling every 10 ms once idle for a second (1 ms polls cost ~3% of a core per rank)
        while not parent.iprobe(source=0, tag=TAG_CTRL):
            idle = time.perf_counter() - last
            time.sleep(0 if idle < 0.05 else 1e-3 if idle < 1.0 else 1e-2)
        msg = parent.recv(source=0, tag=TAG_CTRL)
        cmd = msg[0]
        try:
            if cmd == "close":
                parent.send(("closed", rank, {}), dest=0, tag=TAG_REPLY)
                break
            if comm is None:
                raise RuntimeError("this rank has no communicator (it failed to start)")
            if cmd == "build":
                _, key, text, params, target, timeout = msg
                comm.timeout = timeout
                gc.collect()
                before = rss_bytes()
                program = programs[key] = RankProgram(IRModule.from_text(text).main, params,
                                                      target, build)
                del params, msg
                gc.collect()
                comm.barrier()
                reply = {"weight_bytes": program.weight_bytes,
                         "segments": sum(1 for it in program.items if hasattr(it, "model")),
                         "memory": dict(program.memory_plan(), rss_before_build=before,
                                        rss_after_build=rss_bytes())}
            elif cmd == "run":
                _, key, feeds, want = msg[:4]
                trace = len(msg) > 4 and msg[4]
                program = programs[key]
                comm.reset_stats()
                outputs, compute = [], 0.0
                before = rss_bytes()
                reset_rss_peak()
                if trace:      # numpy reports its allocations to tracemalloc
                    tracemalloc.start()
                try:
                    for f in feeds:
                        outs = program.run(f, comm)
                        compute += program.timings["compute_s"]
                        outputs.append([outs[i] for i in want])
                    traced = tracemalloc.get_traced_memory()[1] if trace else None
                finally:
                    if trace:
                        tracemalloc.stop()
                reply = {"outputs": outputs,
                         "stats": dict(comm.stats, compute_s=compute, rss_before_run=before,
                                       rss_peak_run=rss_peak_bytes(), traced_peak_run=traced)}
            elif cmd == "collectives":
                _, key, repeats = msg
                program = programs[key]
                times = sorted(program.run_collectives(comm) for _ in range(repeats))
                reply = {"median_s": times[len(times) // 2], "min_s": times[0]}
            else:
                raise ValueError(f"unknown command {cmd!r}")
            parent.send(("ok", rank, reply), dest=0, tag=TAG_REPLY)
            last = time.perf_counter()
        except Exception as e:  # noqa: BLE001 - every failure goes back to the driver, typed
            parent.send(worker_reply_error(rank, e), dest=0, tag=TAG_REPLY)
    # MPI_Comm_free, not MPI_Comm_disconnect: a collective the driver may not join (it lets a
    # broken generation of ranks go without waiting for them)
    parent.Free()


if __name__ == "__main__":
    main()
