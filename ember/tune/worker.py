"""Isolated measurement worker: a child Python process that loads candidate kernels and times
them, so that a candidate that crashes or hangs takes down only the worker.

Parent side: ``WorkerProcess().call(request, timeout)`` sends a pickled request over the child's
stdin and waits at most ``timeout`` seconds for the pickled reply; on a time-out the child is
killed (``WorkerTimeout``), on a crash its exit status is reported (``WorkerCrashed``). Either
way the next call starts a fresh child. Child side: ``ember.tune.worker._serve()`` serves
``measure_kernel`` requests until its stdin closes, and exits on its own when its parent
process dies (even in the middle of a hanging candidate).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

_HEADER = struct.Struct("<Q")


class WorkerTimeout(Exception):
    """The worker did not answer within the time-out (it was killed)."""


class WorkerCrashed(Exception):
    """The worker process died while serving a request."""


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout()
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                raise WorkerTimeout()
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError()
        buf += chunk
    return bytes(buf)


def _send(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _recv(fd: int, deadline: float | None = None):
    (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exact(fd, n, deadline))


class WorkerProcess:
    """A persistent child process serving measurement requests (restarted after a crash, a
    time-out, or ``max_requests`` requests so loaded libraries do not pile up)."""

    def __init__(self, max_requests: int = 200):
        self.proc: subprocess.Popen | None = None
        self.served = 0
        self.max_requests = max_requests

    def _start(self) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
        # the parent's pid travels on the command line: a parent that dies while the child is
        # still importing (seconds on a loaded host) is then noticed too
        self.proc = subprocess.Popen([sys.executable, "-c",
                                      f"from ember.tune.worker import _serve; _serve({os.getpid()})"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     start_new_session=True)
        self.served = 0

    def call(self, request: dict, timeout: float | None) -> dict:
        """Serve ``request`` in the child; see ``measure_kernel`` for its fields.

        Raises:
            WorkerTimeout: no answer within ``timeout`` seconds (the child was killed).
            WorkerCrashed: the child died (message holds its exit status / signal).
        """
        if self.proc is None or self.proc.poll() is not None or self.served >= self.max_requests:
            self.close()
            self._start()
        self.served += 1
        try:
            _send(self.proc.stdin.fileno(), request)
            deadline = None if timeout is None else time.monotonic() + timeout
            return _recv(self.proc.stdout.fileno(), deadline)
        except WorkerTimeout:
            self.close()
            raise
        except (EOFError, BrokenPipeError, OSError):
            code = self.proc.wait()
            self.proc = None
            what = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            raise WorkerCrashed(f"measurement worker died ({what})") from None

    def close(self) -> None:
        """Stop the child (killing it if needed)."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.proc = None

    def __del__(self):
        self.close()


# child side --------------------------------------------------------------------------------------

_libs: dict = {}  # kernel libraries by path; candidate models by path and thread count
_ref_cache: dict[tuple, list[np.ndarray]] = {}
_flush_buf: np.ndarray | None = None


def _load(path: str):
    lib = _libs.get(path)
    if lib is None:
        lib = ctypes.CDLL(path)
        _libs[path] = lib
    fn = lib.ember_kernel
    fn.restype = ctypes.c_int32
    return lib, fn


def make_args(specs, num_inputs: int, seed: int) -> list[np.ndarray]:
    """Input arrays (seeded random) and zeroed output arrays for ``specs`` = [(shape, dtype)].

    Floats are standard normal, integers uniform in [0, 2), bools uniform."""
    rng = np.random.default_rng(seed)
    out = []
    for k, (shape, dtype) in enumerate(specs):
        if k >= num_inputs:
            out.append(np.zeros(shape, dtype))
        elif np.issubdtype(np.dtype(dtype), np.floating):
            out.append(rng.standard_normal(shape).astype(dtype))
        elif dtype == "bool":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            out.append(rng.integers(0, 2, shape).astype(dtype))
    return out


def _on_hugepages(a: np.ndarray) -> np.ndarray:
    """``a``, moved onto huge pages when it has at least ``HUGEPAGE_MIN_BYTES`` (a compiled
    model's weights and arena live there, so candidates are timed with the same TLB reach)."""
    from ember.runtime.executor import HUGEPAGE_MIN_BYTES, hugepage_empty
    if a.nbytes < HUGEPAGE_MIN_BYTES:
        return a
    b = hugepage_empty(a.nbytes).view(a.dtype).reshape(a.shape)
    b[...] = a
    return b


def _ptrs(arrays):
    return [a.ctypes.data_as(ctypes.c_void_p) for a in arrays]


def _flush_cache(nbytes: int) -> None:
    global _flush_buf
    if nbytes <= 0:
        return
    if _flush_buf is None or _flush_buf.nbytes != nbytes:
        _flush_buf = np.zeros(nbytes // 8, np.int64)
    _flush_buf += 1


def _prepare_model(req: dict):
    """``_prepare`` of a whole compiled model (``req["program"] == "model"``: ``lib`` is an
    artifact, ``ref`` an ``.npz`` with its input ``x`` and expected output ``y``): ``(fn, [])``
    with ``fn()`` one run of its ahead-of-time entry, or an error reply."""
    from ember.runtime.artifact import load_artifact
    # keyed by the thread count too: the loaded model sets its count before every run
    key = f"{req['lib']}#threads={req.get('num_threads')}"
    model = _libs.get(key)
    if model is None:
        model = _libs[key] = load_artifact(req["lib"], req.get("num_threads"))
    ex = model._executor
    if req.get("ref"):
        ref = np.load(req["ref"])
        x = ref["x"]
        arrays = ex._bind_inputs([x])
        try:
            (got,) = ex._run_locked(arrays)
        except Exception as e:  # noqa: BLE001 - a failing kernel is a runtime error
            return {"error": "runtime", "msg": f"{type(e).__name__}: {e}"}
        bad = _mismatch(0, got, ref["y"], req)
        if bad:
            return bad
    else:
        arrays = ex._bind_inputs(list(model.random_inputs(req.get("seed", 0)).values()))

    if ex.use_aot:  # one native call per run, inputs bound once (no Python per kernel)
        ex.bind_pointers(ex._ext, arrays)
        aot, arena, ext = ex._aot, ex.arena.ctypes.data, ex._ext
        apply_num_threads = ex.apply_num_threads

        def fn(_keep=arrays):  # the inputs stay alive while ext points at them
            apply_num_threads()  # as the executor does before every run
            if aot(arena, ext) != 0:
                raise RuntimeError("the model's entry point failed")
        return fn, []

    def fn():  # noqa: F811 - no AOT entry: the kernels one by one
        ex._run_locked(arrays)
    return fn, []


def _mismatch(k: int, got: np.ndarray, want: np.ndarray, req: dict) -> dict | None:
    """The ``wrong_answer`` reply when output ``k`` differs from the reference (tolerances
    of ``measure_kernel``), else ``None``."""
    atol = req.get("atol", 1e-4)
    if np.issubdtype(want.dtype, np.floating) and want.size:
        with np.errstate(invalid="ignore"):
            scale = float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0))))
        atol += req.get("scale_tol", 1e-4) * scale
    if got.shape != want.shape:
        return {"error": "wrong_answer",
                "msg": f"output {k} has shape {got.shape}, the reference {want.shape}"}
    if not np.allclose(got, want, rtol=req.get("rtol", 1e-3), atol=atol, equal_nan=True):
        with np.errstate(invalid="ignore"):
            diff = np.nanmax(np.abs(got.astype(np.float64) - want)) \
                if np.isfinite(got).any() else float("nan")
        return {"error": "wrong_answer",
                "msg": f"output {k} differs from the reference kernel's (max abs "
                       f"diff {diff:.3g}, {int(np.isnan(got).sum())} NaN)"}
    return None


def _prepare(req: dict):
    """Load ``req``'s kernel, make its arguments and check it against the reference: ``(fn,
    args)``, or an error reply (see ``measure_kernel``)."""
    if req.get("program") == "model":
        return _prepare_model(req)
    specs, n_in = req["specs"], req["num_inputs"]
    lib, fn = _load(req["lib"])
    try:  # every request sets it (0: the default): the library may have run another count
        lib.ember_set_num_threads(int(req.get("num_threads") or 0))
    except AttributeError:
        pass
    args = make_args(specs, n_in, req.get("seed", 0))
    if req.get("layouts"):  # re-laid-out (packed) parameters: the kernel takes them packed
        from ember.tir.schedule.layout import IndexMap
        for k, imap in req["layouts"].items():
            args[int(k)] = np.ascontiguousarray(IndexMap.from_json(imap).apply_numpy(args[int(k)]))
    args = [_on_hugepages(a) for a in args]
    if req.get("ref"):
        key = (req["ref"], req.get("seed", 0))
        expect = _ref_cache.get(key)
        if expect is None:
            _, ref_fn = _load(req["ref"])
            rargs = make_args(specs, n_in, req.get("seed", 0))
            if ref_fn(*_ptrs(rargs)) != 0:
                return {"error": "runtime", "msg": "the reference kernel failed"}
            expect = [a.copy() for a in rargs[n_in:]]
            if len(_ref_cache) > 16:
                _ref_cache.clear()
            _ref_cache[key] = expect
        for a in args[n_in:]:
            if np.issubdtype(a.dtype, np.floating):
                a.fill(np.nan)
        if fn(*_ptrs(args)) != 0:
            return {"error": "runtime", "msg": "the kernel returned an error (allocation failed)"}
        for k, (got, want) in enumerate(zip(args[n_in:], expect)):
            bad = _mismatch(k, got, want, req)
            if bad:
                return bad
    return fn, args


def measure_kernel(req: dict) -> dict:
    """Check and time one kernel (runs in the worker).

    ``req``: ``lib`` (path of a library exporting ``int32_t ember_kernel(...)``), ``ref``
    (library of the reference kernel or None), ``specs`` ([(shape, dtype)] of the parameters),
    ``num_inputs``, ``layouts`` (``{parameter: IndexMap JSON}``: those inputs are generated in
their logical shape, checked by the reference that way, and passed to the kernel re-laid
out), ``seed``, ``number`` (calls per timed repeat), ``repeat``,
    ``min_repeat_ms``, ``per_call`` (time each call alone, after its own cache flush, and
report each repeat's fastest call; ``min_repeat_ms`` is then ignored), ``flush_bytes`` (bytes written between repeats to flush caches; 0 = no
    flushing), ``num_threads``, ``rtol``/``atol``/``scale_tol``: an output passes when
    ``|got - want| <= atol + scale_tol * max|want| + rtol * |want|`` elementwise (the scale term
    admits the rounding of a reordered long float reduction; a wrong program is off by the
    size of its terms).

    Returns ``{"costs": [seconds per call, one per repeat]}`` or ``{"error": kind, "msg": ...}``
    with kind ``"wrong_answer"`` or ``"runtime"``.
    """
    prep = _prepare(req)
    if isinstance(prep, dict):
        return prep
    fn, args = prep
    ptrs = _ptrs(args)
    fn(*ptrs)  # warm-up
    number = max(1, int(req.get("number", 1)))
    min_s = req.get("min_repeat_ms", 0) / 1000.0
    costs = []
    if req.get("per_call"):
        # each call timed alone after its own cache flush; a repeat costs its fastest call, so
        # a peer process that takes a core for a moment does not pass for a slow program
        for _ in range(max(1, int(req.get("repeat", 1)))):
            best = float("inf")
            for _ in range(number):
                _flush_cache(req.get("flush_bytes", 0))
                t0 = time.perf_counter()
                fn(*ptrs)
                best = min(best, time.perf_counter() - t0)
            costs.append(best)
        return {"costs": costs}
    for _ in range(max(1, int(req.get("repeat", 1)))):
        _flush_cache(req.get("flush_bytes", 0))
        n = number
        while True:
            t0 = time.perf_counter()
            for _ in range(n):
                fn(*ptrs)
            dt = time.perf_counter() - t0
            if dt >= min_s or n >= 1 << 20:
                break
            n *= 2
        costs.append(dt / n)
    return {"costs": costs}


def measure_group(req: dict) -> dict:
    """Check and time several kernels with their calls interleaved (runs in the worker).

    ``req``: ``items`` (one ``measure_kernel`` request per kernel; their timing fields are
    ignored), ``number``, ``repeat``, ``flush_bytes``. Every repeat makes ``number`` passes;
    a pass times one call of each kernel (after its own cache flush), in an order reversed
    every pass, and a kernel's repeat cost is its fastest call. Kernels timed side by side
    this way see the same machine load, so their costs compare fairly on a shared machine.

    Returns ``{"results": [reply per item]}``, each reply as ``measure_kernel``'s.
    """
    items = req["items"]
    out: list = [None] * len(items)
    ready = []
    for k, it in enumerate(items):
        try:
            prep = _prepare(it)
        except Exception as e:  # noqa: BLE001 - reported per kernel
            prep = {"error": "runtime", "msg": f"{type(e).__name__}: {e}"}
        if isinstance(prep, dict):
            out[k] = prep
            continue
        fn, args = prep
        ptrs = _ptrs(args)
        fn(*ptrs)  # warm-up
        ready.append((k, fn, ptrs, args))
    number = max(1, int(req.get("number", 1)))
    repeat = max(1, int(req.get("repeat", 1)))
    costs = {k: [float("inf")] * repeat for k, *_ in ready}
    for rep in range(repeat):
        for n in range(number):
            for k, fn, ptrs, _ in (ready if n % 2 == 0 else ready[::-1]):
                _flush_cache(req.get("flush_bytes", 0))
                t0 = time.perf_counter()
                fn(*ptrs)
                costs[k][rep] = min(costs[k][rep], time.perf_counter() - t0)
    for k, *_ in ready:
        out[k] = {"costs": costs[k]}
    return {"results": out}


PARENT_POLL_S = 0.5  # how often a worker checks that the process that started it still lives


def _exit_with_parent(parent: int, poll_s: float = PARENT_POLL_S) -> None:
    """Watchdog thread of a worker: exit the worker (status 3) once the process that started
    it is gone (``os.getppid()`` changes when the parent dies). A worker busy in a hanging
    candidate never reads its closed stdin again; without this it would outlive a parent that
    was killed (Ctrl-C twice, ``timeout``, a CI job cancelled) and spin forever on a core. The
    kernel runs through ctypes, which releases the GIL, so this thread runs beside it."""
    while True:
        time.sleep(poll_s)
        if os.getppid() != parent:
            os._exit(3)


def _serve(parent: int | None = None) -> None:
    """Serve measurement requests on stdin/stdout until stdin closes; ``parent``: the pid of the
    process that started this worker (default: the current parent), watched by the watchdog."""
    import threading
    threading.Thread(target=_exit_with_parent, args=(parent or os.getppid(),), daemon=True,
                     name="ember-worker-parent-watchdog").start()
    proto_in = sys.stdin.buffer.fileno()
    proto_out = os.dup(1)
    os.dup2(2, 1)  # anything a kernel prints goes to stderr, not into the protocol
    handlers = {"measure": measure_kernel, "group": measure_group}
    while True:
        try:
            req = _recv(proto_in)
        except EOFError:
            return
        try:
            reply = handlers[req.get("kind", "measure")](req)
        except Exception as e:  # noqa: BLE001 - reported to the parent as a runtime error
            reply = {"error": "runtime", "msg": f"{type(e).__name__}: {e}"}
        _send(proto_out, reply)
