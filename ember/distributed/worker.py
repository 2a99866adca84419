"""A spawned rank (``python -m ember.distributed.worker``): builds and runs its shard on the
driver's requests (see ``ember.distributed.cluster``)."""

from __future__ import annotations

import os
import time


def main() -> None:
    from mpi4py import MPI

    from .. import __version__
    from ..driver import build
    from ..graph.ir import IRModule
    from .cluster import TAG_CTRL, TAG_REPLY, worker_reply_error
    from .comm import MPICommunicator
    from .executor import RankProgram

    parent = MPI.Comm.Get_parent()
    comm = MPICommunicator(MPI.COMM_WORLD)
    rank = comm.rank
    parent.send(("hello", rank, os.getpid(), __version__), dest=0, tag=TAG_REPLY)
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
                parent.send(("ok", rank, {}), dest=0, tag=TAG_REPLY)
                break
            if cmd == "build":
                _, key, text, params, target, timeout = msg
                comm.timeout = timeout
                program = programs[key] = RankProgram(IRModule.from_text(text).main, params,
                                                      target, build)
                comm.barrier()
                reply = {"weight_bytes": program.weight_bytes,
                         "segments": sum(1 for it in program.items if hasattr(it, "model"))}
            elif cmd == "run":
                _, key, feeds, want = msg
                program = programs[key]
                comm.reset_stats()
                outputs, compute = [], 0.0
                for f in feeds:
                    outs = program.run(f, comm)
                    compute += program.timings["compute_s"]
                    outputs.append([outs[i] for i in want])
                reply = {"outputs": outputs, "stats": dict(comm.stats, compute_s=compute)}
            else:
                raise ValueError(f"unknown command {cmd!r}")
            parent.send(("ok", rank, reply), dest=0, tag=TAG_REPLY)
            last = time.perf_counter()
        except Exception as e:  # noqa: BLE001 - every failure goes back to the driver, typed
            parent.send(worker_reply_error(rank, e), dest=0, tag=TAG_REPLY)
    parent.Disconnect()


if __name__ == "__main__":
    main()
