"""Per-kernel profiling of a compiled model.

    from ember.runtime.profiler import profile
    rep = profile(model, inputs, repeat=20)
    print(rep.table(top=10))           # time, % of total, GFLOP/s, % of peak, GB/s per kernel
    rep.write_chrome_trace("trace.json")   # chrome://tracing or https://ui.perfetto.dev
    rep = profile(model, inputs, hot=True)  # also each kernel back to back: the memory stall

Kernels run one by one from Python (the step executor), each timed with ``perf_counter`` over
``repeat`` runs; the table reports medians. FLOPs are counted on the unscheduled loop nests at
compile time (``plan["steps"][k]["flops"]``); bytes are the sizes of a kernel's arguments (the
compulsory traffic). The peak is measured on this machine by a register-only FMA loop on the
model's thread count (``measure_peak_gflops``), so "% of peak" is against what this machine
delivers now, not a datasheet number. Timings on a busy machine are noisy: use several repeats.

``hot=True`` also times every kernel ``repeat`` times back to back after its in-model runs, so
its weights, inputs and workspace are as cached as they can be ("hot"). A kernel's in-model
time minus its hot time is what it spends waiting on data the previous kernels evicted (the
weight stream from DRAM, activations written by the other core): the part no register tile or
loop order of that kernel removes, only fewer bytes or a better placement. Repeating a kernel
is safe because no step writes a buffer it reads (the memory plan never aliases a step's
inputs with its outputs).
"""

from __future__ import annotations

import ctypes
import functools
import json
import time
from dataclasses import dataclass, field

import numpy as np

from ..codegen.build import build_library, load_library
from ..errors import InputError
from ..target import Target


@dataclass
class KernelStat:
    """Median time and derived rates of one step of the plan."""

    index: int
    name: str
    op: str
    symbol: str
    ms: float
    flops: float
    bytes: int
    percent: float = 0.0
    gflops: float = 0.0
    peak_percent: float = 0.0
    gbps: float = 0.0
    hot_ms: float | None = None  # median back to back (``profile(hot=True)``), else None

    @property
    def stall_ms(self) -> float | None:
        """In-model minus hot time (ms), at least 0: waiting on data that earlier kernels
        evicted. A kernel whose hot median comes out above its in-model one (timing noise on a
        busy machine, or a pool woken differently) waits on nothing: 0, not a negative stall."""
        return None if self.hot_ms is None else max(0.0, self.ms - self.hot_ms)

    @property
    def label(self) -> str:
        """``op (output name)``, whole: the table never cuts it, so two kernels of one fused
        op on different tensors stay distinguishable."""
        return f"{self.op} ({self.name})"


@dataclass
class ProfileReport:
    """The result of ``profile``: per-kernel statistics, totals and raw samples."""

    kernels: list
    total_ms: float
    end_to_end_ms: float
    peak_gflops: float
    threads: int
    samples: list = field(default_factory=list)  # per run: [(start_us, dur_us) per kernel]

    def top(self, n: int = 5) -> list:
        """The ``n`` kernels with the largest median time."""
        return sorted(self.kernels, key=lambda k: -k.ms)[:n]

    def table(self, top: int | None = None) -> str:
        """A text table (heaviest first; all kernels when ``top`` is None)."""
        rows = self.top(top) if top else sorted(self.kernels, key=lambda k: -k.ms)
        hot = any(k.hot_ms is not None for k in self.kernels)
        w = max([34] + [len(k.label) for k in rows])
        head = (f"{'#':>3} {'kernel':{w}} {'time ms':>9} {'%':>6} {'GFLOP/s':>9} "
                f"{'% peak':>7} {'GB/s':>7}" + (f" {'hot ms':>8} {'stall %':>7}" if hot else ""))
        out = [head, "-" * len(head)]
        for k in rows:
            line = (f"{k.index:>3} {k.label:{w}} {k.ms:9.3f} {k.percent:6.1f} "
                    f"{k.gflops:9.1f} {k.peak_percent:7.1f} {k.gbps:7.1f}")
            if hot and k.hot_ms is not None:
                line += f" {k.hot_ms:8.3f} {100 * k.stall_ms / k.ms if k.ms else 0.0:7.1f}"
            out.append(line)
        tot_fl = sum(k.flops for k in self.kernels)
        out.append("-" * len(head))
        out.append(f"sum of kernels {self.total_ms:.3f} ms ({len(self.kernels)} kernels), "
                   f"end-to-end {self.end_to_end_ms:.3f} ms, {tot_fl / 1e9:.2f} GFLOP, "
                   f"{tot_fl / max(self.total_ms, 1e-9) / 1e6:.1f} GFLOP/s, measured peak "
                   f"{self.peak_gflops:.0f} GFLOP/s on {self.threads} thread(s)")
        if hot:
            hot_total = sum(k.hot_ms for k in self.kernels if k.hot_ms is not None)
            stall = sum(k.stall_ms for k in self.kernels if k.stall_ms is not None)
            out.append(f"hot (each kernel back to back) {hot_total:.3f} ms: {stall:.3f} ms "
                       f"({100 * stall / max(self.total_ms, 1e-9):.1f}%) of the in-model time "
                       f"waits on data earlier kernels evicted")
        return "\n".join(out)

    def to_dict(self) -> dict:
        """Plain data (JSON-able)."""
        return {"total_ms": self.total_ms, "end_to_end_ms": self.end_to_end_ms,
                "peak_gflops": self.peak_gflops, "threads": self.threads,
                "kernels": [dict(vars(k), stall_ms=k.stall_ms) for k in self.kernels]}

    def chrome_trace(self) -> dict:
        """Chrome trace-event JSON of the median run (one complete event per kernel)."""
        if not self.samples:
            return {"traceEvents": []}
        run = self.samples[len(self.samples) // 2]
        ev = []
        for k, (start, dur) in zip(self.kernels, run):
            ev.append({"name": k.label, "cat": "kernel", "ph": "X", "ts": start,
                       "dur": dur, "pid": 0, "tid": 0,
                       "args": {"symbol": k.symbol, "flops": k.flops, "bytes": k.bytes}})
        return {"traceEvents": ev, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path) -> None:
        """Write ``chrome_trace()`` as JSON to ``path``."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)


_PEAK_SRC = {
    "avx512": ("#include <immintrin.h>\n#define VT __m512\n#define FMA _mm512_fmadd_ps\n"
               "#define SET1 _mm512_set1_ps\n#define LANES 16\n"
               "static float hsum(VT v) { return _mm512_reduce_add_ps(v); }\n"),
    "avx2": ("#include <immintrin.h>\n#define VT __m256\n#define FMA _mm256_fmadd_ps\n"
             "#define SET1 _mm256_set1_ps\n#define LANES 8\n"
             "static float hsum(VT v) { float t[8]; _mm256_storeu_ps(t, v); float s = 0; "
             "for (int i = 0; i < 8; ++i) s += t[i]; return s; }\n"),
}
_PEAK_BODY = """
static float ember_peak_sink[256];
static void ember_peak_task(int64_t lo, int64_t hi, void* ctx) {
  long n = *(const long*)ctx;
  for (int64_t t = lo; t < hi; ++t) {
    VT c[16]; for (int i = 0; i < 16; ++i) c[i] = SET1(0.001f * i);
    VT a = SET1(0.999999f), b = SET1(1e-7f);
    for (long k = 0; k < n; ++k) {
      #pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) c[i] = FMA(a, c[i], b);
    }
    float s = 0; for (int i = 0; i < 16; ++i) s += hsum(c[i]);
    ember_peak_sink[t & 255] += s;
  }
}
void ember_peak_fma(long n, long tasks) { ember_parallel_for(tasks, 1, ember_peak_task, &n); }
"""


@functools.lru_cache(maxsize=None)
def measure_peak_gflops(target: str = "llvm", threads: int | None = None) -> tuple[float, int]:
    """``(GFLOP/s, threads)``: the best of 7 runs of a register-only FMA loop (16 independent
    chains per task, float32) on ember's thread pool with ``threads`` threads (default: all
    CPUs), i.e. what this machine delivers to ember's kernels now."""
    import os
    from ..codegen.c import C_PRELUDE
    t = Target(target)
    if t.isa not in _PEAK_SRC:
        return float("nan"), threads or 1
    lib = load_library(build_library(C_PRELUDE + _PEAK_SRC[t.isa] + _PEAK_BODY, t.mcpu))
    nthreads = int(threads or os.cpu_count() or 1)
    lib.ember_set_num_threads(ctypes.c_int(nthreads))
    fn = lib.ember_peak_fma
    fn.restype = None
    fn.argtypes = [ctypes.c_long, ctypes.c_long]
    lanes = 16 if t.isa == "avx512" else 8
    n, tasks = 100_000, 4 * nthreads
    fn(n // 10, tasks)
    best = 0.0
    for _ in range(7):
        t0 = time.perf_counter()
        fn(n, tasks)
        dt = time.perf_counter() - t0
        best = max(best, n * tasks * 16 * lanes * 2 / dt / 1e9)
    return best, nthreads


def profile(model, inputs, repeat: int = 10, warmup: int = 2, hot: bool = False) -> ProfileReport:
    """Per-kernel profile of ``model`` (a ``CompiledModel``) on ``inputs``: ``repeat`` timed
    runs after ``warmup`` untimed ones; with ``hot``, each kernel is then also run ``warmup``
    times and timed ``repeat`` times back to back (``KernelStat.hot_ms``, see the module doc).

    Returns:
        a ``ProfileReport`` (``.table()``, ``.write_chrome_trace(path)``, ``.to_dict()``).
    Raises:
        InputError: bad inputs (as ``model.run``), or ``model`` is not a static
            ``CompiledModel`` (a staged model has no fixed kernel plan to time), or
            ``repeat`` < 1 / ``warmup`` < 0 (or either not an integer).
    """
    if hasattr(model, "timestamp_samples"):  # a WebGPU model: device timestamps
        return _profile_device(model, inputs, repeat, warmup)
    ex = getattr(model, "_executor", None)
    if ex is None or getattr(model, "plan", None) is None:
        raise InputError(f"profile() times the kernels of a static CompiledModel; "
                         f"{type(model).__name__} has no fixed kernel plan: compile with "
                         f"ember.compile(path, executor='static', shapes={{...}}) "
                         f"(command line: ember profile MODEL --shape NAME=D0,D1,...)")
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool)
               for n in (repeat, warmup)) or repeat < 1 or warmup < 0:
        raise InputError(f"profile() needs repeat >= 1 and warmup >= 0 (got repeat={repeat}, "
                         f"warmup={warmup}): every time it reports is a median over the "
                         f"repeats")
    plan = model.plan
    # the kernels write the model's arena: hold its run lock while they run (a concurrent
    # model.run waits), released for the end-to-end model.run of each repeat
    lock = ex._run_lock
    with lock:
        calls, keep = ex.step_calls(inputs)  # noqa: F841 - keeps the pointed-to arrays alive
        ex.apply_num_threads()  # the library may be shared with a model of another count
        for _ in range(warmup):
            for fn, a in calls:
                fn(*a)
    samples, e2e = [], []
    for _ in range(repeat):
        run = []
        with lock:
            ex.apply_num_threads()
            t_start = time.perf_counter()
            for fn, a in calls:
                t0 = time.perf_counter()
                fn(*a)
                t1 = time.perf_counter()
                run.append(((t0 - t_start) * 1e6, (t1 - t0) * 1e6))
        samples.append(run)
        t0 = time.perf_counter()
        model.run(inputs)
        e2e.append((time.perf_counter() - t0) * 1e3)
    hot_ms = [None] * len(calls)
    if hot:
        with lock:
            ex.apply_num_threads()
            for k, (fn, a) in enumerate(calls):
                for _ in range(warmup):
                    fn(*a)
                ts = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    fn(*a)
                    ts.append(time.perf_counter() - t0)
                hot_ms[k] = float(np.median(ts)) * 1e3
    peak, threads = measure_peak_gflops(model.target, _threads(model))
    stats = []
    for k, st in enumerate(plan["steps"]):
        ms = float(np.median([r[k][1] for r in samples])) / 1e3
        fl = float(st.get("flops") or 0.0)  # None: a symbolic kernel (no static count)
        by = int(st.get("bytes") or 0)
        g = fl / ms / 1e6 if ms > 0 else 0.0
        stats.append(KernelStat(k, st["name"], st["op"], st["symbol"], ms, fl, by,
                                gflops=g, peak_percent=100 * g / peak if peak == peak else 0.0,
                                gbps=by / ms / 1e6 if ms > 0 else 0.0, hot_ms=hot_ms[k]))
    total = sum(s.ms for s in stats)
    for s in stats:
        s.percent = 100 * s.ms / total if total else 0.0
    return ProfileReport(stats, total, float(np.median(e2e)), peak, threads, samples)


def _profile_device(model, inputs, repeat: int, warmup: int) -> ProfileReport:
    """``profile`` of a device model (``WebGPUModel.timestamp_samples``): per-kernel times are
    the device's timestamps; there is no peak to compare with (``peak_gflops`` is NaN)."""
    samples, e2e = model.timestamp_samples(inputs, repeat, warmup)
    stats = []
    for k, st in enumerate(model.plan["steps"]):
        ms = float(np.median([r[k][1] for r in samples])) / 1e3
        fl = float(st.get("flops", 0.0))
        g = fl / ms / 1e6 if ms > 0 else 0.0
        stats.append(KernelStat(k, st["name"], st["op"], st["symbol"], ms, fl, 0, gflops=g))
    total = sum(s.ms for s in stats)
    for s in stats:
        s.percent = 100 * s.ms / total if total else 0.0
    return ProfileReport(stats, total, e2e, float("nan"), 1, samples)


def _threads(model) -> int | None:
    try:
        return Target(model.target).num_threads
    except Exception:  # noqa: BLE001
        return None


__all__ = ["profile", "ProfileReport", "KernelStat", "measure_peak_gflops"]
