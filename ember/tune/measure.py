"""Measuring candidates: build each in parallel, run each in an isolated worker process.

``measure_option(builder=LocalBuilder(), runner=LocalRunner())`` bundles the two; a tuner calls
``create_measure_batch(task, option)(inputs) -> results``. Every failure is a result, never an
exception: a template that raises (``INSTANTIATION_ERROR``), C that does not compile
(``COMPILE_HOST``) or compiles past the time-out (``BUILD_TIMEOUT``), a kernel that crashes the
worker (``RUNTIME_DEVICE``), runs past the time-out (``RUN_TIMEOUT``) or whose output differs from
the untuned reference kernel's (``WRONG_ANSWER``). Only ``NO_ERROR`` results have meaningful
costs; tuners and records never pick anything else.
"""

from __future__ import annotations

import enum
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..codegen.build import build_library
from ..codegen.c import C_PRELUDE, emit_c_function
from ..errors import CodegenError, EmberError
from .worker import WorkerCrashed, WorkerProcess, WorkerTimeout

KERNEL_SYMBOL = "ember_kernel"


class MeasureErrorNo(enum.IntEnum):
    """Why a measurement failed (0 = it did not)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1
    COMPILE_HOST = 2
    RUNTIME_DEVICE = 4
    WRONG_ANSWER = 5
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


@dataclass
class MeasureInput:
    """A candidate: ``task`` plus ``config`` (a ``ConfigEntity`` or a search ``Trace``; anything
    with ``to_json()`` that ``task.instantiate`` accepts)."""

    target: Any
    task: Any
    config: Any


@dataclass
class BuildResult:
    """A built candidate: library paths, the kernel's parameter specs, or an error."""

    lib: str | None = None
    ref: str | None = None
    specs: list = field(default_factory=list)
    num_inputs: int = 0
    layouts: dict = field(default_factory=dict)
    error_no: int = MeasureErrorNo.NO_ERROR
    error_msg: str = ""
    time_cost: float = 0.0
    program: str = "kernel"   # "kernel": ``lib`` exports ember_kernel; "model": an artifact


@dataclass
class MeasureResult:
    """Outcome of one candidate: ``costs`` (seconds per run, one per repeat) when
    ``error_no == 0``; ``all_cost`` is the wall time spent building and measuring it;
    ``group`` names the interleaved measurement it was part of (see ``LocalRunner``);
    ``threads`` the thread count it was timed with (0: the target's default, all cores;
    ``None``: unknown, a record written before ember recorded it)."""

    costs: list
    error_no: int
    error_msg: str = ""
    all_cost: float = 0.0
    timestamp: float = 0.0
    group: str = ""      # shared by candidates timed side by side (interleaved); "" if alone
    threads: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def mean(self) -> float:
        """Mean cost in seconds (infinity for errors)."""
        return sum(self.costs) / len(self.costs) if self.ok and self.costs else float("inf")


def kernel_source(func, target=None) -> str:
    """A standalone C translation unit exporting ``func`` as ``ember_kernel``, generated for
    ``target`` (vector width, micro-kernels) as ``ember.build`` would."""
    text, deps = emit_c_function(func, KERNEL_SYMBOL, target, with_deps=True)
    return C_PRELUDE + "\n" + "\n".join(deps.values()) + "\n" + text


def default_program(func, target):
    """The kernel ``ember.build`` runs when nothing is tuned: ``func`` scheduled by the target's
    default schedule rules when ember has them (``ember.tir.schedule.rules``), else ``func``."""
    try:
        from ..tir.schedule.rules import schedule_default
    except ImportError:
        return func
    try:
        return schedule_default(func, target)
    except Exception:  # noqa: BLE001 - no default schedule: the plain kernel is the default
        return func


def kernel_specs(func) -> tuple[list, int]:
    """``([(shape, dtype)] of the parameters, number of inputs)`` of a PrimFunc. A parameter
    the schedule re-laid out (``attrs["param_layouts"]``, e.g. packed weights) is listed with
    its logical shape: the caller passes it through ``kernel_layouts``."""
    layouts = func.attrs.get("param_layouts") or {}
    specs = []
    for k, b in enumerate(func.params):
        lay = layouts.get(k, layouts.get(str(k)))
        specs.append((tuple(lay["shape"]) if lay else tuple(b.shape), b.dtype))
    return specs, int(func.attrs.get("num_inputs", len(specs) - 1))


def kernel_layouts(func) -> dict:
    """``{parameter position: IndexMap JSON}`` of the parameters ``func`` takes re-laid out
    (the worker applies ``IndexMap.apply_numpy`` to the logical arrays, as ``ember.build``
    packs weights at compile time)."""
    layouts = func.attrs.get("param_layouts") or {}
    return {int(k): v["index_map"] for k, v in layouts.items()}


class LocalBuilder:
    """Instantiates candidates and compiles them with the system C compiler (``n_parallel`` at
    once, each at most ``timeout`` seconds). Libraries land in ember's content-hash build cache,
    so re-measuring a program does not rebuild it."""

    def __init__(self, timeout: float = 30.0, n_parallel: int | None = None):
        import os
        self.timeout = timeout
        self.n_parallel = n_parallel or max(1, os.cpu_count() or 1)
        self._refs: dict[str, tuple[str | None, str]] = {}

    def _reference(self, task) -> str | None:
        if task.key not in self._refs:
            try:
                ref = task.reference()
                lib = str(build_library(kernel_source(ref, task.target), task.target.mcpu))
                self._refs[task.key] = (lib, "")
            except Exception as e:  # noqa: BLE001 - no reference: candidates cannot be checked
                self._refs[task.key] = (None, f"{type(e).__name__}: {e}")
        lib, err = self._refs[task.key]
        if lib is None:
            raise CodegenError(f"the reference kernel of {task.key} does not build: {err}")
        return lib

    def _build_one(self, inp: MeasureInput) -> BuildResult:
        t0 = time.perf_counter()
        try:
            func = inp.task.instantiate(inp.config)
            if hasattr(func, "files"):  # a whole program (an algorithm choice): a small model
                return self._build_model(func, inp, t0)
            specs, n_in = kernel_specs(func)
            layouts = kernel_layouts(func)
            src = kernel_source(func, inp.task.target)
        except Exception as e:  # noqa: BLE001 - a broken candidate is a result, not a crash
            return BuildResult(error_no=MeasureErrorNo.INSTANTIATION_ERROR,
                               error_msg=f"{type(e).__name__}: {e}",
                               time_cost=time.perf_counter() - t0)
        try:
            ref = self._reference(inp.task)
            lib = str(build_library(src, inp.task.target.mcpu, timeout=self.timeout))
        except CodegenError as e:
            timed_out = "time-out" in str(e)
            return BuildResult(error_no=MeasureErrorNo.BUILD_TIMEOUT if timed_out
                               else MeasureErrorNo.COMPILE_HOST, error_msg=str(e)[:2000],
                               time_cost=time.perf_counter() - t0)
        except EmberError as e:
            return BuildResult(error_no=MeasureErrorNo.COMPILE_HOST, error_msg=str(e)[:2000],
                               time_cost=time.perf_counter() - t0)
        return BuildResult(lib=lib, ref=ref, specs=specs, num_inputs=n_in, layouts=layouts,
                           time_cost=time.perf_counter() - t0)

    def _build_model(self, program, inp: MeasureInput, t0: float) -> BuildResult:
        """Build a candidate that is a whole compiled model (``program.files(target) ->
        (artifact, reference npz)``, e.g. ``ember.tune.strategy.ConvAlgorithm``)."""
        try:
            art, ref = program.files(inp.task.target)
        except EmberError as e:
            return BuildResult(error_no=MeasureErrorNo.COMPILE_HOST, error_msg=str(e)[:2000],
                               time_cost=time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - a broken candidate is a result, not a crash
            return BuildResult(error_no=MeasureErrorNo.INSTANTIATION_ERROR,
                               error_msg=f"{type(e).__name__}: {e}",
                               time_cost=time.perf_counter() - t0)
        return BuildResult(lib=art, ref=ref, time_cost=time.perf_counter() - t0,
                           program="model")

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        """Build every candidate (errors are reported in the results)."""
        if len(inputs) <= 1 or self.n_parallel == 1:
            return [self._build_one(i) for i in inputs]
        with ThreadPoolExecutor(self.n_parallel) as pool:
            return list(pool.map(self._build_one, inputs))


_ERROR_KIND = {"wrong_answer": MeasureErrorNo.WRONG_ANSWER,
               "runtime": MeasureErrorNo.RUNTIME_DEVICE}


class LocalRunner:
    """Runs built candidates one at a time in an isolated worker process on this machine.

    Each candidate is checked against the reference kernel's output on the same seeded inputs
    (``rtol``/``atol``), then timed: ``repeat`` repeats of ``number`` calls (doubling the calls
    until a repeat takes ``min_repeat_ms``), with ``flush_bytes`` written between repeats to flush
    the CPU caches when ``enable_cpu_cache_flush``. With ``per_call``, each call is timed
    alone after its own flush and a repeat reports its fastest call (robust on a machine
    shared with other work). With ``interleave``, the candidates of one ``run`` call are
    timed side by side, their calls interleaved (``worker.measure_group``), so they see the
    same machine load; a group that crashes or hangs is re-measured one candidate at a time.
    ``timeout`` bounds one candidate's run (seconds).
    """

    def __init__(self, number: int = 2, repeat: int = 3, min_repeat_ms: float = 0.0,
                 timeout: float = 10.0, enable_cpu_cache_flush: bool = True,
                 flush_bytes: int = 8 << 20, check_correctness: bool = True,
                 rtol: float = 1e-3, atol: float = 1e-4, num_threads: int | None = None,
                 seed: int = 0, per_call: bool = False, interleave: bool = False):
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.timeout = timeout
        self.flush_bytes = flush_bytes if enable_cpu_cache_flush else 0
        self.check_correctness = check_correctness
        self.rtol, self.atol = rtol, atol
        self.num_threads = num_threads
        self.seed = seed
        self.per_call = per_call
        self.interleave = interleave
        self._worker = WorkerProcess()

    def request(self, build: BuildResult, target=None) -> dict:
        """The worker request for one built candidate."""
        threads = self.num_threads or getattr(target, "num_threads", None)
        return {"kind": "measure", "lib": build.lib, "program": build.program,
                "ref": build.ref if self.check_correctness else None,
                "specs": build.specs, "num_inputs": build.num_inputs, "seed": self.seed,
                "layouts": build.layouts,
                "number": self.number, "repeat": self.repeat,
                "min_repeat_ms": self.min_repeat_ms, "flush_bytes": self.flush_bytes,
                "per_call": self.per_call,
                "num_threads": threads, "rtol": self.rtol, "atol": self.atol}

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]
            ) -> list[MeasureResult]:
        """Measure each built candidate; failed builds pass through as error results."""
        ok = [k for k, b in enumerate(builds) if b.error_no == MeasureErrorNo.NO_ERROR]
        if self.interleave and len(ok) > 1:
            grouped = self._run_group(inputs, builds, ok)
            if grouped is not None:
                return grouped
        out = []
        for inp, b in zip(inputs, builds):
            if b.error_no != MeasureErrorNo.NO_ERROR:
                out.append(MeasureResult([], b.error_no, b.error_msg, b.time_cost, time.time()))
                continue
            t0 = time.perf_counter()
            reply = run_request(self._worker, self.request(b, inp.task.target), self.timeout)
            out.append(result_from_reply(reply, b.time_cost + time.perf_counter() - t0))
        return out

    def _run_group(self, inputs, builds, ok) -> list[MeasureResult] | None:
        """One interleaved group measurement of ``builds[ok]`` (``None`` when the worker crashed
        or timed out: the caller measures them one by one)."""
        t0 = time.perf_counter()
        req = {"kind": "group", "number": self.number, "repeat": self.repeat,
               "flush_bytes": self.flush_bytes,
               "items": [self.request(builds[k], inputs[k].task.target) for k in ok]}
        reply = run_request(self._worker, req, self.timeout * len(ok))
        if "results" not in reply:
            return None
        share = (time.perf_counter() - t0) / len(ok)
        group = uuid.uuid4().hex[:12]
        out = []
        for k, (inp, b) in enumerate(zip(inputs, builds)):
            if b.error_no != MeasureErrorNo.NO_ERROR:
                out.append(MeasureResult([], b.error_no, b.error_msg, b.time_cost, time.time()))
            else:
                res = result_from_reply(reply["results"][ok.index(k)], b.time_cost + share)
                res.group = group
                out.append(res)
        return out

    def close(self) -> None:
        """Stop the worker process."""
        self._worker.close()


def run_request(worker: WorkerProcess, req: dict, timeout: float) -> dict:
    """Send ``req`` to ``worker``, turning a time-out or crash into an error reply."""
    try:
        return worker.call(req, timeout)
    except WorkerTimeout:
        return {"error": "timeout", "msg": f"the kernel ran past the {timeout:g} s time-out"}
    except WorkerCrashed as e:
        return {"error": "crash", "msg": str(e)}


def result_from_reply(reply: dict, all_cost: float) -> MeasureResult:
    """A ``MeasureResult`` from a worker reply (see ``run_request``)."""
    if "costs" in reply:
        return MeasureResult(list(reply["costs"]), MeasureErrorNo.NO_ERROR, "", all_cost,
                             time.time())
    kind = reply.get("error")
    no = {"timeout": MeasureErrorNo.RUN_TIMEOUT, "crash": MeasureErrorNo.RUNTIME_DEVICE,
          **_ERROR_KIND}.get(kind, MeasureErrorNo.UNKNOWN_ERROR)
    return MeasureResult([], no, reply.get("msg", ""), all_cost, time.time())


def measure_option(builder: Any = None, runner: Any = None) -> dict:
    """How to measure: ``{"builder": ..., "runner": ...}`` (defaults: ``LocalBuilder()`` and
    ``LocalRunner()``). A builder has ``build(inputs) -> [BuildResult]``; a runner has
    ``run(inputs, builds) -> [MeasureResult]`` (see ``DaskRunner`` for a distributed one)."""
    return {"builder": builder or LocalBuilder(), "runner": runner or LocalRunner()}


def create_measure_batch(option: dict) -> Callable[[Sequence[MeasureInput]], list[MeasureResult]]:
    """``measure(inputs) -> results`` that builds then runs ``inputs`` with ``option``."""
    builder, runner = option["builder"], option["runner"]

    def measure(inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        return stamp_threads(runner, inputs, runner.run(inputs, builder.build(inputs)))

    return measure


def measured_threads(runner, target) -> int:
    """The thread count ``runner`` times a kernel of ``target`` with (its ``num_threads``,
    else the target's; 0: the runtime's default, all cores)."""
    return int(getattr(runner, "num_threads", None) or getattr(target, "num_threads", None)
               or 0)


def stamp_threads(runner, inputs: Sequence[MeasureInput], results: list[MeasureResult]
                  ) -> list[MeasureResult]:
    """Set ``threads`` of each result ``runner`` left unset (see ``measured_threads``)."""
    for inp, res in zip(inputs, results):
        if res.threads is None:
            res.threads = measured_threads(runner, inp.task.target)
    return results


def measure_reference(task, option: dict) -> MeasureResult:
    """Time what ``ember.build`` runs for the task's kernel when nothing is tuned
    (``default_program`` of its reference) with ``option``'s runner, without a correctness
    check; the result's ``threads`` says the thread count it was timed with."""
    runner = option["runner"]
    t0 = time.perf_counter()
    try:
        func = default_program(task.reference(), task.target)
        specs, n_in = kernel_specs(func)
        lib = str(build_library(kernel_source(func, task.target), task.target.mcpu))
    except Exception as e:  # noqa: BLE001
        return MeasureResult([], MeasureErrorNo.COMPILE_HOST, f"{type(e).__name__}: {e}",
                             time.perf_counter() - t0, time.time())
    build = BuildResult(lib=lib, ref=None, specs=specs, num_inputs=n_in,
                        layouts=kernel_layouts(func), time_cost=time.perf_counter() - t0)
    inp = MeasureInput(task.target, task, None)
    return stamp_threads(runner, [inp], runner.run([inp], [build]))[0]


def library_bytes(path: str | None) -> bytes | None:
    """Contents of a built library (for shipping it to a remote runner)."""
    return Path(path).read_bytes() if path else None
