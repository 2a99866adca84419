"""Measurement on the workers of a dask distributed cluster.

Start ``dask-scheduler`` somewhere and ``dask-worker SCHEDULER --resources "llvm=1"`` on each
machine that holds the target hardware (the resource names the target). ``DaskRunner(address,
resource="llvm")`` then ships each built library (its bytes) to a worker holding that resource;
the worker measures it in its own isolated worker process (``ember.tune.worker``), exactly as
``LocalRunner`` does here, so a crashing or hanging candidate costs one worker process, not the
dask worker. Candidates of one batch run concurrently, one per worker at a time.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from ..errors import TuningError
from .measure import (BuildResult, LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult,
                      library_bytes, result_from_reply, run_request)

_worker_state: dict[str, Any] = {}


def _measure_on_worker(lib: bytes, ref: bytes | None, request: dict, timeout: float) -> dict:
    """Runs inside a dask worker: install the libraries locally, measure in an isolated child."""
    from ..codegen.build import install_library
    from .worker import WorkerProcess
    proc = _worker_state.get("proc")
    if proc is None:
        proc = _worker_state["proc"] = WorkerProcess()
    request = dict(request, lib=str(install_library(lib)),
                   ref=str(install_library(ref)) if ref else None)
    reply = run_request(proc, request, timeout)
    try:
        from distributed import get_worker
        reply["worker"] = get_worker().address
    except (ImportError, ValueError):
        pass
    return reply


class DaskRunner(LocalRunner):
    """A runner measuring on dask distributed workers.

    Args:
        client: a ``distributed.Client``, or the scheduler address (``"tcp://host:8786"``).
        resource: a worker resource each measurement needs one unit of (tag the workers of a
            target with it); ``None`` uses any worker.
        connect_timeout: seconds to wait for the scheduler at an address ``client``.
        Other arguments: as ``LocalRunner`` (``timeout`` applies on the worker).

    Attributes:
        workers_used: addresses of the workers that measured the last batch.

    Raises:
        TuningError: the ``distributed`` package is missing, the scheduler at the address
            ``client`` is malformed or cannot be reached within ``connect_timeout``, or it has
            no worker (holding ``resource``) within ``connect_timeout`` (also checked before
            each batch).
    """

    def __init__(self, client: Any, resource: str | None = None,
                 connect_timeout: float = 10.0, **kwargs):
        super().__init__(**kwargs)
        try:
            import distributed
        except ImportError:
            raise TuningError("DaskRunner needs dask distributed: pip install 'ember[tune]' "
                              "(or pip install distributed)") from None
        if isinstance(client, distributed.Client):
            self.client = client
        else:
            try:
                self.client = distributed.Client(client, timeout=connect_timeout)
            except (OSError, ValueError, TypeError, TimeoutError) as e:
                raise TuningError(
                    f"cannot reach the dask scheduler at {client!r} ({type(e).__name__}: {e}): "
                    f"start `dask-scheduler` there and `dask-worker {client}` on the measuring "
                    f"machines, or give its address as tcp://HOST:PORT (--dask), or drop --dask "
                    f"to measure locally") from None
        self.resource = resource
        self.connect_timeout = connect_timeout
        self.workers_used: list[str] = []
        self.check_workers(wait=connect_timeout)

    def check_workers(self, wait: float = 0.0) -> list[str]:
        """Addresses of the cluster's workers that can take a measurement (holding
        ``resource`` when set), waiting up to ``wait`` seconds for one to join.

        Raises:
            TuningError: none (a measurement submitted there would wait forever)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                workers = self.client.scheduler_info().get("workers", {})
            except Exception as e:  # noqa: BLE001 - a lost scheduler
                raise TuningError(f"lost the dask scheduler ({type(e).__name__}: {e}); restart "
                                  f"it and rerun the same command to resume") from None
            ok = [a for a, w in workers.items()
                  if self.resource is None or w.get("resources", {}).get(self.resource, 0) >= 1]
            if ok or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not ok:
            need = f" with the resource {self.resource!r}" if self.resource else ""
            res = f" --resources \"{self.resource}=1\"" if self.resource else ""
            raise TuningError(
                f"the dask scheduler {self.client.scheduler.address} has no worker{need} "
                f"({len(workers)} worker(s) in all): start `dask worker "
                f"{self.client.scheduler.address}{res}` on the machines that hold the target, "
                f"or drop --dask to measure locally")
        return ok

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]
            ) -> list[MeasureResult]:
        """Measure each built candidate on a dask worker (in parallel, one ``resource`` unit each
        when set); failed builds pass through as error results, and a lost or timed-out worker
        becomes a runtime-error result. Costs in seconds; ``workers_used`` lists the workers that
        answered. Raises ``TuningError`` when the cluster has no worker left to measure on."""
        futures, out = {}, [None] * len(inputs)
        self.check_workers(wait=self.connect_timeout)  # none left: a typed error, not a hang
        t0 = time.perf_counter()
        for k, (inp, b) in enumerate(zip(inputs, builds)):
            if b.error_no != MeasureErrorNo.NO_ERROR:
                out[k] = MeasureResult([], b.error_no, b.error_msg, b.time_cost, time.time())
                continue
            req = self.request(b, inp.task.target)
            kw = {"resources": {self.resource: 1}} if self.resource else {}
            futures[k] = self.client.submit(_measure_on_worker, library_bytes(b.lib),
                                            library_bytes(b.ref) if req["ref"] else None, req,
                                            self.timeout, pure=False, **kw)
        self.workers_used = []
        for k, fut in futures.items():
            try:
                reply = fut.result(timeout=self.timeout * 4 + 60)
            except Exception as e:  # noqa: BLE001 - a lost worker is a failed measurement
                reply = {"error": "runtime", "msg": f"dask worker failed: {type(e).__name__}: {e}"}
            if "worker" in reply:
                self.workers_used.append(reply["worker"])
            out[k] = result_from_reply(reply, builds[k].time_cost + time.perf_counter() - t0)
        return out
