"""The static-shape graph executor: runs compiled kernels over a planned arena through ctypes.

An execution plan is plain data (JSON-able, stored in artifacts)::

    {"inputs":  [{"name", "shape", "dtype", "slot"}],
     "outputs": [{"name", "slot"}],
     "slots":   [{"shape", "dtype", "kind": "arena" | "param" | "input", "offset", "param"}],
     "steps":   [{"symbol", "args": [slot, ...], "op", "name"}],
     "arena_bytes": int}

Params are bound once, copied into one weight arena in the order the steps read them; the
weight arena and the arena holding every intermediate (at its planned offset) are advised onto
transparent huge pages (``hugepage_empty``); inputs are passed by pointer (no copy when already contiguous and of the right
dtype); outputs are copied out of the arena.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
import time
from typing import Mapping

import numpy as np

from ..codegen.build import thread_setter
from ..errors import ArtifactError, EmberError, InputError

ALIGN = 64


def _dtype(name: str) -> np.dtype:
    from ..dtypes import np_dtype
    return np_dtype(name)


def _address(a: np.ndarray) -> int:
    """``a``'s data address (``__array_interface__``: on caches a run just flushed, 0.1 ms
    cheaper than ``a.ctypes.data``, which runs numpy's ctypes helper in Python)."""
    return a.__array_interface__["data"][0]


def aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose data pointer is 64-byte aligned."""
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + nbytes]


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous, 64-byte aligned copy of ``a``."""
    buf = aligned_empty(max(a.nbytes, 1))
    out = buf[:a.nbytes].view(a.dtype).reshape(a.shape) if a.nbytes else np.empty(a.shape, a.dtype)
    out[...] = a
    return out


# Transparent huge pages (Linux): the arena and the weights are read by every run; on 4 KiB pages
# ResNet-50's 112 MB of weights span 28k pages, and the TLB misses of streaming them (two-level
# page walks inside a VM) stalled the weight-bound kernels (stage-4 convolutions 1.2 -> 0.96 ms;
# docs/performance.md). Buffers of at least HUGEPAGE_MIN_BYTES are mapped privately and
# advised MADV_HUGEPAGE, which THP's "madvise" mode (the common default) honours.
HUGEPAGE_BYTES = 2 << 20
HUGEPAGE_MIN_BYTES = 1 << 20


def hugepage_empty(nbytes: int) -> np.ndarray:
    """A uint8 array of ``nbytes``, 2 MiB aligned and advised to live on transparent huge pages
    (a private anonymous ``mmap`` + ``madvise(MADV_HUGEPAGE)``, zero-filled). Falls back to
    ``aligned_empty`` (64-byte aligned, ordinary pages) below ``HUGEPAGE_MIN_BYTES`` or where
    the platform has no ``MADV_HUGEPAGE`` or refuses the mapping; never raises for that."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    if nbytes < HUGEPAGE_MIN_BYTES or advice is None or not hasattr(mmap, "MAP_ANONYMOUS"):
        return aligned_empty(nbytes)
    try:
        mm = mmap.mmap(-1, nbytes + HUGEPAGE_BYTES, flags=flags)
        mm.madvise(advice)
    except (OSError, ValueError):
        return aligned_empty(nbytes)
    raw = np.frombuffer(mm, dtype=np.uint8)  # keeps the mapping alive while any view is
    off = (-raw.ctypes.data) % HUGEPAGE_BYTES
    return raw[off:off + nbytes]


def on_hugepage_buffer(a: np.ndarray) -> bool:
    """Whether ``a`` is a view into a ``hugepage_empty`` mapping (so it is not copied again)."""
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def param_layout(plan: dict) -> tuple[dict[str, tuple[int, int]], int]:
    """The weight arena of ``plan``: ``({param name: (byte offset, bytes)}, total bytes)`` with
    the parameters the steps read in the order they first read them (the weight stream of one
    run is then sequential in memory), each one 64-byte aligned."""
    slots = plan["slots"]
    layout: dict[str, tuple[int, int]] = {}
    total = 0
    for st in plan["steps"]:
        for a in st["args"]:
            s = slots[a]
            if s["kind"] != "param" or s["param"] in layout:
                continue
            n = int(np.prod(s["shape"], dtype=np.int64)) * _dtype(s["dtype"]).itemsize
            layout[s["param"]] = (total, n)
            total += -(-n // ALIGN) * ALIGN
    return layout, total


def weight_arena(plan: dict, names) -> dict[str, np.ndarray]:
    """``{param name: uint8 slice}`` of one new huge-page weight arena laid out as
    ``GraphExecutor`` lays it out (``param_layout``), for those of ``names`` the plan's steps
    read: fill them (an artifact's weights are read, ``build``'s written, straight into it) and
    the executor uses them in place. ``{}`` for a plan without such weights, or one too
    malformed to lay out (``check_plan`` then names what is wrong)."""
    try:
        layout, total = param_layout(plan)
    except (IndexError, KeyError, TypeError, ValueError, AttributeError):
        return {}
    if not total:
        return {}
    arena = hugepage_empty(total)
    return {n: arena[layout[n][0]:sum(layout[n])] for n in names if n in layout}


def check_plan(plan: dict, params: Mapping[str, np.ndarray], lib=None) -> None:
    """Check that a plan, its weights and its library agree before any kernel runs.

    Every arena slot lies inside the arena, every parameter slot has a weight of exactly the
    slot's dtype and element count, every step's symbol (and the AOT entry) is exported by
    ``lib`` and every step argument names a slot. A saved artifact whose manifest was edited or
    whose members were swapped is refused here instead of running kernels out of bounds.

    Raises:
        ArtifactError: naming the slot, parameter or symbol that disagrees.
    """
    try:
        arena = int(plan["arena_bytes"])
        slots = plan["slots"]
        for k, s in enumerate(slots):
            if any(isinstance(d, str) for d in s["shape"]):  # symbolic: placed at each run
                if s["kind"] == "param":
                    raise ArtifactError(f"weight slot {k} has a symbolic shape {s['shape']}")
                continue
            n = int(np.prod(s["shape"], dtype=np.int64))
            if s["kind"] == "arena":
                nbytes = n * _dtype(s["dtype"]).itemsize
                if int(s["offset"]) < 0 or int(s["offset"]) + nbytes > arena:
                    raise ArtifactError(f"plan slot {k} ({s['dtype']}{list(s['shape'])}) at offset "
                                        f"{s['offset']} lies outside the {arena}-byte arena: the "
                                        f"plan is corrupted; recompile the model")
            elif s["kind"] == "param":
                arr = params.get(s["param"])
                if arr is None:
                    raise ArtifactError(f"no weight for parameter {s['param']!r} (plan slot {k}); "
                                        f"recompile the model")
                arr = np.asarray(arr)
                if arr.dtype != _dtype(s["dtype"]) or arr.size != n:
                    raise ArtifactError(
                        f"weight {s['param']!r} is {arr.dtype}{list(arr.shape)} but the plan's slot "
                        f"{k} expects {s['dtype']}{list(s['shape'])}: the weights and the plan "
                        f"disagree; recompile the model")
        for st in plan["steps"]:
            bad = [a for a in st["args"] if not 0 <= int(a) < len(slots)]
            if bad:
                raise ArtifactError(f"step {st.get('name', st['symbol'])!r} uses slots {bad} that the "
                                    f"plan does not have; recompile the model")
            if lib is not None and not hasattr(lib, st["symbol"]):
                raise ArtifactError(f"the kernel library has no symbol {st['symbol']!r} that step "
                                    f"{st.get('name', '?')!r} calls; the library and the plan "
                                    f"disagree; recompile the model")
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"malformed execution plan ({type(e).__name__}: {e}); recompile the "
                            f"model") from None


def kernel_failure(step: dict, status: int) -> EmberError:
    """The typed error for a kernel of ``step`` that returned ``status`` (-2: an index input is
    out of range, an ``InputError``; -1: workspace allocation failure)."""
    where = f"node {step['name']!r} ({step['op']}, kernel {step['symbol']})"
    if status == -2:
        checks = "; ".join(f"{c['what']} must lie in [{c['bounds'][0][0]}, {c['bounds'][0][1]}]"
                           if len(c["bounds"]) == 1 else
                           f"{c['what']} must lie in {[tuple(b) for b in c['bounds']]} per position"
                           for c in step.get("index_checks", []))
        return InputError(f"{where}: an index is out of range ({checks or 'see the operator'}); "
                          f"ONNX makes out-of-range indices an error: fix the index input")
    return EmberError(f"{where} failed with status {status} (workspace allocation failure: "
                      f"out of memory)")


class GraphExecutor:
    """Runs an execution plan with the kernels of a loaded shared library.

    Args:
        lib: ``ctypes.CDLL`` holding the plan's kernel symbols.
        plan: the execution plan (see module doc).
        params: ``{param name: ndarray}`` for every ``param`` slot.
        num_threads: threads of the kernels' thread pool (``None``: all online CPUs), set on
            ``lib`` before every run.
    """

    def __init__(self, lib: ctypes.CDLL, plan: dict, params: Mapping[str, np.ndarray],
                 num_threads: int | None = None):
        self.lib = lib
        self.plan = plan
        check_plan(plan, params, lib)
        # the thread count is the library's, and models with the same kernels share one
        # library (content-hash cache): each run sets this model's count (0: the default)
        self.num_threads = int(num_threads or 0)
        self._set_threads = thread_setter(lib)
        self.apply_num_threads()
        self.arena = hugepage_empty(max(int(plan["arena_bytes"]), ALIGN))
        self._arena_ptr = self.arena.ctypes.data
        self._params = self._bind_params(params)
        self._ptr: list[int | None] = []
        base = self.arena.ctypes.data
        for s in plan["slots"]:
            if s["kind"] == "arena" and s["offset"] is None:  # symbolic: placed at each run
                self._ptr.append(None)
            elif s["kind"] == "arena":
                self._ptr.append(base + int(s["offset"]))
            elif s["kind"] == "param":
                arr = self._params[s["param"]]
                self._ptr.append(arr.ctypes.data if arr.nbytes else base)
            else:
                self._ptr.append(None)
        self._steps = []
        for st in plan["steps"]:
            fn = getattr(lib, st["symbol"])
            fn.restype = ctypes.c_int32
            # (a symbolic plan's kernels take the symbols as trailing int64 arguments)
            fn.argtypes = [ctypes.c_void_p] * len(st["args"]) + \
                [ctypes.c_int64] * len(st.get("symbols", ()))
            self._steps.append((fn, list(st["args"]), st))
        self._run_lock = threading.Lock()
        self._aot = None
        from .symbolic_run import SymbolicRunner, is_symbolic_plan
        symbolic = is_symbolic_plan(plan)
        if plan.get("aot") and hasattr(lib, plan["aot"]) and not symbolic:
            self._aot = getattr(lib, plan["aot"])
            self._aot.restype = ctypes.c_int32
            self._aot.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            self._ext = (ctypes.c_void_p * max(len(plan["slots"]), 1))(
                *[p or 0 for p in self._ptr])
        self.use_aot = self._aot is not None
        self.input_specs = plan["inputs"]
        self.output_specs = plan["outputs"]
        self._input_index = {d["name"]: k for k, d in enumerate(self.input_specs)}
        # per-run work after the kernels runs on caches the run just flushed (~120 MB of
        # ResNet-50 weights pass through them): every numpy call costs 10-100 us there, so
        # what can be is decided once -- each input's (name, dtype, shape), each output's
        # source (a view of the arena, a parameter, or an input)
        self._input_checks = [(d["name"], _dtype(d["dtype"]), tuple(d["shape"]))
                              for d in self.input_specs]
        self.symbolic = SymbolicRunner(self) if symbolic else None
        if self.symbolic is not None:  # its entry takes offset and symbol tables
            self.use_aot = self.symbolic.has_aot
            self._out_src = []
            self._ext_inputs = []
            return
        self._out_src = [self._output_source(o["slot"]) for o in self.output_specs]
        self._ext_inputs: list = [None] * len(self.input_specs)  # addresses in the AOT table

    def _bind_params(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The weights the kernels read: one weight arena on huge pages (``param_layout``:
        first-use order, 64-byte aligned) holding a copy of every parameter, except those that
        already live in a ``hugepage_empty`` mapping, 64-byte aligned (an artifact is read
        straight into its arena), which are used in place."""
        slots = {s["param"]: s for s in self.plan["slots"] if s["kind"] == "param"}
        layout, total = param_layout(self.plan)
        out: dict[str, np.ndarray] = {}
        arena = None
        for name in list(layout) + [n for n in slots if n not in layout]:  # then: never read
            s, arr = slots[name], params.get(name)
            if arr is None:
                raise EmberError(f"no value for parameter {name!r}")
            arr = np.asarray(arr, dtype=_dtype(s["dtype"])).reshape(s["shape"])
            aligned = arr.flags.c_contiguous and arr.ctypes.data % ALIGN == 0
            if name not in layout or not arr.nbytes:
                out[name] = arr if aligned else aligned_copy(arr)
                continue
            if aligned and on_hugepage_buffer(arr):
                out[name] = arr
                continue
            if arena is None:
                arena = hugepage_empty(max(total, ALIGN))
            off = layout[name][0]
            dst = arena[off:off + arr.nbytes].view(arr.dtype).reshape(arr.shape)
            dst[...] = arr
            out[name] = dst
        return out

    # inputs ----------------------------------------------------------------------------------
    def _bind_inputs(self, inputs) -> list[np.ndarray]:
        if type(inputs) is dict and len(inputs) == len(self._input_checks):
            # the common case, checked with attribute reads only: a dict of C-contiguous
            # arrays of the right dtypes and shapes; anything else takes the general path
            # (which also words the errors)
            out = []
            for name, dt, shape in self._input_checks:
                a = inputs.get(name)
                if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape \
                        or not a.flags.c_contiguous:
                    break
                out.append(a)
            else:
                return out
        specs = self.input_specs
        if isinstance(inputs, Mapping):
            unknown = [k for k in inputs if k not in self._input_index]
            if unknown:
                raise InputError(f"unknown input name(s) {unknown}; the model's inputs are "
                                 f"{[d['name'] for d in specs]}")
            missing = [d["name"] for d in specs if d["name"] not in inputs]
            if missing:
                raise InputError(f"missing input(s) {missing}; the model's inputs are "
                                 f"{[d['name'] for d in specs]}")
            values = [inputs[d["name"]] for d in specs]
        else:
            values = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            if len(values) != len(specs):
                raise InputError(f"expected {len(specs)} input(s) {[d['name'] for d in specs]}, "
                                 f"got {len(values)}")
        out = []
        for d, v in zip(specs, values):
            a = np.asarray(v)
            want = _dtype(d["dtype"])
            if a.dtype != want:
                raise InputError(f"input {d['name']!r}: expected dtype {want}, got {a.dtype} "
                                 f"(convert with .astype(np.{want}))")
            if tuple(a.shape) != tuple(d["shape"]):
                raise InputError(f"input {d['name']!r}: expected shape {tuple(d['shape'])}, got "
                                 f"{tuple(a.shape)}")
            # (np.ascontiguousarray would turn a 0-d array into shape (1,))
            out.append(a if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(a.shape))
        return out

    def run(self, inputs) -> list[np.ndarray]:
        """Run once. ``inputs``: ``{name: array}`` or a list in graph-input order. Uses the
        ahead-of-time entry point (one native call) when the library has one and ``use_aot``
        is set, else calls the kernels one by one from Python. Calls from several threads are
        serialized (they share the arena); the kernels themselves run multi-threaded.

        Returns:
            the outputs as new numpy arrays, in graph-output order.
        Raises:
            InputError: a missing/unknown input or a wrong shape or dtype.
        """
        if self.symbolic is not None:  # symbolic dimensions: sizes bound per run
            arrays = self.symbolic.bind(inputs)
            with self._run_lock:
                return self.symbolic.run(arrays)
        arrays = self._bind_inputs(inputs)
        with self._run_lock:
            return self._run_locked(arrays)

    def apply_num_threads(self) -> None:
        """Set this model's thread count on its library (shared by every model with the same
        kernels, so each run sets it again; 0: the pool's default, all online CPUs)."""
        if self._set_threads is not None:
            self._set_threads(self.num_threads)

    def bind_pointers(self, table, arrays) -> None:
        """Write the addresses of the bound input ``arrays`` (from ``_bind_inputs``) into the
        slot pointer ``table`` (the AOT ``_ext`` array or a list for the kernel-by-kernel path);
        an empty input points at the arena (any valid address)."""
        for d, a in zip(self.input_specs, arrays):
            table[d["slot"]] = _address(a) if a.nbytes else self._arena_ptr
        if table is getattr(self, "_ext", None):
            self._ext_inputs = [table[d["slot"]] for d in self.input_specs]

    def _bind_aot_inputs(self, arrays) -> None:
        """``bind_pointers`` on the AOT slot table, written only where an input's address
        differs from the one there (each address is read every run: the same array object can
        have moved, by ``ndarray.resize``)."""
        last = self._ext_inputs
        for k, (d, a) in enumerate(zip(self.input_specs, arrays)):
            p = _address(a) if a.nbytes else self._arena_ptr
            if p != last[k]:
                self._ext[d["slot"]] = p
                last[k] = p

    def _run_locked(self, arrays) -> list[np.ndarray]:
        self.apply_num_threads()
        if self.use_aot:
            self._bind_aot_inputs(arrays)
            rc = self._aot(self._arena_ptr, self._ext)
            if rc != 0:
                from ..codegen.aot import decode_status
                step, status = decode_status(rc)
                raise kernel_failure(self.plan["steps"][step], status)
            return self._outputs(arrays)
        ptr = list(self._ptr)
        self.bind_pointers(ptr, arrays)
        for fn, args, st in self._steps:
            rc = fn(*[ptr[a] for a in args])
            if rc != 0:
                raise kernel_failure(st, rc)
        return self._outputs(arrays)

    def _output_source(self, slot: int):
        """Where output ``slot``'s value is after a run: ``(array, None)`` for a view of the
        arena or a parameter, ``(None, k)`` for the ``k``-th input."""
        s = self.plan["slots"][slot]
        dt = _dtype(s["dtype"])
        shape = tuple(s["shape"])
        if s["kind"] == "arena":
            n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            off = int(s["offset"])
            return self.arena[off:off + n].view(dt).reshape(shape), None
        if s["kind"] == "param":
            return self._params[s["param"]], None
        for k, d in enumerate(self.input_specs):
            if d["slot"] == slot:
                return None, k
        raise EmberError(f"output slot {slot} has no value")

    def _outputs(self, arrays) -> list[np.ndarray]:
        """New arrays holding the outputs of the run just done on the bound ``arrays``."""
        return [(src if src is not None else arrays[k]).copy() for src, k in self._out_src]

    def step_calls(self, inputs) -> tuple[list, list]:
        """Each kernel with its arguments for a run on ``inputs`` (checked as by ``run``), for
        calling them one by one (profiling): ``([(fn, [arg, ...])], keep)``, where ``keep``
        holds the arrays the arguments point into (keep it alive while calling). A symbolic
        plan binds its symbols and places its slots for the inputs' sizes
        (``SymbolicRunner.step_calls``). Call under ``_run_lock``: the kernels write the
        arena."""
        if self.symbolic is not None:
            arrays = self.symbolic.bind(inputs)
            calls, keep = self.symbolic.step_calls(arrays)
            return calls, [arrays, keep]
        arrays = self._bind_inputs(inputs)
        ptr = list(self._ptr)
        self.bind_pointers(ptr, arrays)
        return [(fn, [ptr[a] for a in args]) for fn, args, _ in self._steps], [arrays]

    def time_steps(self, inputs, repeat: int = 10) -> list[dict]:
        """Per-kernel median time in ms over ``repeat`` runs: ``[{"op", "name", "ms"}]``.
        Holds the run lock (the kernels write the arena a concurrent ``run`` uses)."""
        times = [[] for _ in self._steps]
        with self._run_lock:
            calls, keep = self.step_calls(inputs)
            self.apply_num_threads()
            for _ in range(repeat):
                for k, (fn, args) in enumerate(calls):
                    t0 = time.perf_counter()
                    fn(*args)
                    times[k].append((time.perf_counter() - t0) * 1e3)
        del keep
        return [{"op": st["op"], "name": st["name"], "symbol": st["symbol"],
                 "ms": float(np.median(t))} for (_, _, st), t in zip(self._steps, times)]


def benchmark(fn, number: int = 20, warmup: int = 3) -> dict:
    """Time ``fn()``: median/mean/min in ms over ``number`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(number):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": float(np.median(ts)), "mean_ms": float(np.mean(ts)),
            "min_ms": float(np.min(ts)), "runs": number}


__all__ = ["GraphExecutor", "aligned_copy", "aligned_empty", "benchmark", "hugepage_empty",
           "on_hugepage_buffer", "param_layout"]
