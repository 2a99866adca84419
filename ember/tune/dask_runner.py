"""Measurement on the workers of a dask distributed cluster.

Start ``dask-scheduler`` somewhere and ``dask-worker SCHEDULER --resources "llvm=1"`` on each
machine that holds the target hardware (the resource names the target). ``DaskRunner(address,
resource="llvm")`` then ships each built library (its bytes) to a worker holding that resource;
the worker measures it in its own isolated worker process (``ember.tune.worker``), exactly as
``LocalRunner`` does here, so a crashing or hanging candidate costs one worker process, not the
dask worker. Candidates of one batch run concurrently, one per worker at a time. A worker that
holds a measurement past ``lost_after`` seconds (dead, frozen or unreachable before the
scheduler notices) costs that one measurement, recorded as an error, and gets no more.
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
        lost_after: seconds a worker may hold one measurement without answering before the
            measurement is an error and the worker is lost (default ``2 * timeout + 10``: the
            worker's own time-out, with room for installing the library and starting its
            measuring process).
        Other arguments: as ``LocalRunner`` (``timeout`` applies on the worker).

    Attributes:
        workers_used: addresses of the workers that measured the last batch.
        lost_workers: addresses of the workers that held a measurement past ``lost_after``
            (no more measurements go to them).

    Raises:
        TuningError: the ``distributed`` package is missing, the scheduler at the address
            ``client`` is malformed or cannot be reached within ``connect_timeout``, or it has
            no worker (holding ``resource``) within ``connect_timeout`` (also checked before
            each batch).
    """

    def __init__(self, client: Any, resource: str | None = None,
                 connect_timeout: float = 10.0, lost_after: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.lost_after = lost_after if lost_after is not None else 2 * self.timeout + 10
        self.lost_workers: set[str] = set()
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
        when set, at most one in flight per usable worker); failed builds pass through as error
        results. Costs in seconds; ``workers_used`` lists the workers that answered.

        A measurement that errors on the dask side (a ``KilledWorker``: its worker died every
        time it was retried) becomes a runtime-error result. One that a worker holds for more
        than ``lost_after`` seconds without answering (a dead, frozen or unreachable worker
        the scheduler has not noticed yet) becomes a runtime-error result naming the worker,
        which is added to ``lost_workers`` and gets no more measurements; the rest go on with
        the other workers.

        Raises:
            TuningError: the cluster has no usable worker (none, or all of them lost).
        """
        from distributed import wait
        out: list = [None] * len(inputs)
        todo = []
        for k, (inp, b) in enumerate(zip(inputs, builds)):
            if b.error_no != MeasureErrorNo.NO_ERROR:
                out[k] = MeasureResult([], b.error_no, b.error_msg, b.time_cost, time.time())
            else:
                todo.append(k)
        self.workers_used = []
        if not todo:
            return out
        t0 = time.perf_counter()
        running: dict = {}  # future -> [index, worker holding it, since (monotonic)]
        try:
            while todo or running:
                usable = self._usable_workers(wait=self.connect_timeout if not running else 0)
                while todo and len(running) < len(usable):
                    k = todo.pop(0)
                    running[self._submit(inputs[k], builds[k], usable)] = \
                        [k, None, time.monotonic()]
                try:
                    done = wait(list(running), timeout=0.25, return_when="FIRST_COMPLETED")[0]
                except TimeoutError:  # (distributed's wait raises when none finished)
                    done = []
                for fut in done:
                    k = running.pop(fut)[0]
                    try:
                        reply = fut.result()
                    except Exception as e:  # noqa: BLE001 - a lost worker: a failed measurement
                        reply = {"error": "runtime",
                                 "msg": f"dask worker failed: {type(e).__name__}: {e}"}
                    if "worker" in reply:
                        self.workers_used.append(reply["worker"])
                    out[k] = result_from_reply(reply, builds[k].time_cost
                                               + time.perf_counter() - t0)
                self._expire(running, out, builds, t0)
        finally:
            for fut in running:
                fut.cancel()
        return out

    def _usable_workers(self, wait: float) -> list[str]:
        """``check_workers`` less ``lost_workers``; ``TuningError`` when none is left."""
        try:
            ok = self.check_workers(wait=wait)
        except TuningError:
            if not self.lost_workers:
                raise
            ok = []
        usable = [a for a in ok if a not in self.lost_workers]
        if not usable:
            raise TuningError(
                f"every dask worker that can measure is lost ({', '.join(sorted(self.lost_workers))}"
                f" held a measurement for more than {self.lost_after:g} s without answering): "
                f"restart them (or start new ones) and rerun the same command to resume, or drop "
                f"--dask to measure locally")
        return usable

    def _submit(self, inp: MeasureInput, build: BuildResult, usable: list[str]):
        req = self.request(build, inp.task.target)
        kw = {"resources": {self.resource: 1}} if self.resource else {}
        if self.lost_workers:  # keep the measurement off the workers that stopped answering
            kw.update(workers=list(usable), allow_other_workers=False)
        return self.client.submit(_measure_on_worker, library_bytes(build.lib),
                                  library_bytes(build.ref) if req["ref"] else None, req,
                                  self.timeout, pure=False, **kw)

    def _expire(self, running: dict, out: list, builds: Sequence[BuildResult],
                t0: float) -> None:
        """Give up on the measurements held longer than ``lost_after`` s by one worker (or
        by none: waiting for a worker that left): error results, their workers lost."""
        if not running:
            return
        try:
            where = {key: w for w, keys in self.client.processing().items() for key in keys}
        except Exception:  # noqa: BLE001 - a lost scheduler shows in the next check_workers
            return
        now = time.monotonic()
        for fut, st in list(running.items()):
            w = where.get(fut.key)
            if w != st[1]:
                st[1], st[2] = w, now  # (re)started on a worker, or rescheduled
                continue
            if now - st[2] <= self.lost_after:
                continue
            k = st[0]
            running.pop(fut)
            fut.cancel()
            if w is not None:
                self.lost_workers.add(w)
            msg = (f"dask worker {w} did not answer the measurement within "
                   f"{self.lost_after:g} s (lost, frozen or unreachable; it gets no more "
                   f"measurements)" if w else
                   f"no dask worker took the measurement within {self.lost_after:g} s (its "
                   f"workers left the cluster)")
            out[k] = result_from_reply({"error": "runtime", "msg": msg},
                                       builds[k].time_cost + time.perf_counter() - t0)
