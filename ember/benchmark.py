"""Latency benchmarks: ember against other runtimes, and the optimization ablation.

    from ember.benchmark import compare_runtimes, ablation
    rows = compare_runtimes(onnx_model, inputs, threads=2, repeat=20)
    steps = ablation(onnx_model, inputs, threads=2, repeat=10)

Runtimes run interleaved (turns of one untimed and ``BLOCK`` timed runs of each, until
``repeat`` runs are timed) so that machine noise hits them alike; results are medians. Peers are used when importable: onnxruntime, OpenVINO (``openvino``)
and PyTorch through ``onnx2torch`` (eager and ``torch.compile``). On a machine shared with other
busy processes absolute numbers drift; ratios taken in one interleaved run are what to compare.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .graph.passes import PassContext

BLOCK = 3  # timed runs per turn
SETTLE_S = 0.04  # before a turn: pools keep spinning after a run (onnxruntime's for ~25 ms), and
# a peer's spinning workers would take a core from the runtime timed next; then one untimed run
# wakes the runtime's own pool

# the optimization ladder of ``ablation``: (label, PassContext kwargs)
ABLATION_STEPS = [
    ("naive (no fusion, loop nests as lowered)",
     dict(opt_level=0, config={"schedule.level": 0})),
    ("+ fusion (FuseOps, epilogues on the accumulator)",
     dict(opt_level=2, disabled_pass=["ConvertLayout"], config={"schedule.level": 0})),
    ("+ layout (NHWC) and packed weights, tiled scalar micro-kernels, threads",
     dict(opt_level=2, config={"schedule.level": 1, "winograd.tile": -1,
                               "inverted_residual.fuse": -1})),
    ("+ vectorized micro-kernels (SIMD at the target width)",
     dict(opt_level=2, config={"schedule.level": 2, "winograd.tile": -1,
                               "inverted_residual.fuse": -1})),
    ("+ Winograd for 3x3 stride-1 convolutions",
     dict(opt_level=2, config={"schedule.level": 2, "inverted_residual.fuse": -1})),
    ("+ inverted-residual blocks in one kernel (MobileNetV2; the default compile)",
     dict(opt_level=2, config={"schedule.level": 2})),
]
TUNING_STEP = "+ tuning (apply_history_best of the records)"


@dataclass
class RuntimeResult:
    """One runtime on one model: median latency (ms) over interleaved runs, and agreement."""

    name: str
    median_ms: float
    runs: list = field(default_factory=list)
    max_abs_err: float | None = None
    matches: bool | None = None
    note: str = ""


def _timeit(fn: Callable, warmup: int = 2) -> Callable[[], float]:
    for _ in range(warmup):
        fn()

    def one() -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return one


ORT_LOG_ERROR = 3  # onnxruntime's severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal


def quiet_onnxruntime(ort) -> None:
    """Show only onnxruntime's errors: its warnings (unused initializers removed, ...) are
    printed in ANSI colour on stderr and bury the benchmark's table (``ember bench``)."""
    ort.set_default_logger_severity(ORT_LOG_ERROR)


def peer_runners(onnx_model, inputs: dict, threads: int) -> dict[str, Callable]:
    """``{name: run()}`` for the peer runtimes importable here (each returns its outputs)."""
    out = {}
    data = onnx_model.SerializeToString()
    def peer(fn):
        try:
            fn()
        except ImportError:
            pass
        except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
            out[f"{fn.__name__}-failed"] = e

    def _onnxruntime():
        import onnxruntime as ort
        quiet_onnxruntime(ort)
        so = ort.SessionOptions()
        so.log_severity_level = ORT_LOG_ERROR
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        out["onnxruntime"] = lambda: sess.run(None, inputs)

    def _openvino():
        import openvino as ov
        core = ov.Core()
        # fp32 comparison: on CPUs with AMX/AVX-512-BF16 OpenVINO otherwise runs in bf16 by default
        core.set_property("CPU", {"INFERENCE_NUM_THREADS": threads,
                                  "INFERENCE_PRECISION_HINT": "f32"})
        compiled = core.compile_model(core.read_model(data, b""), "CPU")
        req = compiled.create_infer_request()
        out["openvino"] = lambda: [v for v in req.infer(inputs).values()]

    def _torch():
        import onnx2torch
        import torch
        torch.set_num_threads(threads)
        tm = onnx2torch.convert(onnx_model).eval()
        targs = [torch.from_numpy(v) for v in inputs.values()]

        def eager():
            with torch.no_grad():
                return tm(*targs)
        out["torch"] = eager
        cm = torch.compile(tm)

        def compiled_fn():
            with torch.no_grad():
                return cm(*targs)
        out["torch.compile"] = compiled_fn

    for fn in (_onnxruntime, _openvino, _torch):
        peer(fn)
    return {k: v for k, v in out.items() if callable(v)}


def outputs_agree(got, want, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    """Whether ``got`` agrees with ``want`` (same shape, any numeric dtypes) to ``rtol`` of the
    element and of the tensor's scale: ``|got - want| <= atol + rtol * (|want| + rms(want))``
    element-wise, ``rms`` the root mean square of ``want`` (0 for an empty or all-zero tensor).

    Float32 kernels that sum in a different order (GEMM blocking, another runtime's kernels)
    differ by a few ulps *of the terms summed*, not of the result: an output near zero obtained
    by cancellation between terms of size ``rms`` carries an absolute error of order
    ``eps * rms``, which a purely element-wise ``rtol * |want|`` plus a fixed ``atol`` rejects
    once the outputs are large (GPT-2 logits of RMS ~23: errors of 3e-4, equal for ember and
    onnxruntime against a float64 reference). The ``rms`` term scales the absolute tolerance
    with the tensor instead. Integer and boolean outputs must be equal.

    Raises:
        ValueError: the shapes differ.
    """
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise ValueError(f"outputs_agree: shapes differ, {got.shape} vs {want.shape}")
    if got.size == 0:
        return True
    if not (np.issubdtype(got.dtype, np.inexact) or np.issubdtype(want.dtype, np.inexact)):
        return bool(np.array_equal(got, want))
    a, b = got.astype(np.float64), want.astype(np.float64)
    same_nonfinite = (a == b) | (np.isnan(a) & np.isnan(b))
    finite = np.isfinite(b)
    if not np.all(same_nonfinite[~finite]):
        return False
    rms = float(np.sqrt(np.mean(np.square(b[finite])))) if finite.any() else 0.0
    tol = atol + rtol * (np.abs(b[finite]) + rms)
    return bool(np.all(np.abs(a[finite] - b[finite]) <= tol))


def compare_runtimes(onnx_model, inputs: dict, threads: int = 2, repeat: int = 20,
                     ember_model=None, reference: str = "onnxruntime",
                     rtol: float = 1e-4, atol: float = 1e-5,
                     variants: dict | None = None) -> list[RuntimeResult]:
    """Median latency of ember and each peer on ``onnx_model`` (interleaved runs).

    ``ember_model``: an already compiled model (default: ``ember.compile`` with
    ``-num-threads=threads``). ``variants``: more compiled models by name (e.g. ember with a
    pass disabled), timed in the same interleaved rounds as ``ember`` (names should start with
    ``ember``). Agreement of ember's outputs with ``reference`` (when present) is checked at
    ``rtol``/``atol`` of each element and of the output's RMS (``outputs_agree``).
    """
    from .driver import compile as ember_compile
    em = ember_model or ember_compile(onnx_model, target=f"llvm -num-threads={threads}",
                                           executor="static")
    runners = {"ember": lambda: em.run(inputs)}
    for vname, vm in (variants or {}).items():
        runners[vname] = (lambda m: lambda: m.run(inputs))(vm)
    runners.update(peer_runners(onnx_model, inputs, threads))
    results = {n: RuntimeResult(n, 0.0) for n in runners}
    ours = em.run(inputs)
    if reference in runners:
        ref = runners[reference]()
        errs = [float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                if np.size(a) else 0.0 for a, b in zip(ours, ref)]
        results["ember"].max_abs_err = max(errs) if errs else 0.0
        results["ember"].matches = all(outputs_agree(a, b, rtol=rtol, atol=atol)
                                       for a, b in zip(ours, ref))
    timers = {n: _timeit(fn) for n, fn in runners.items()}
    rounds = -(-repeat // BLOCK)
    for _ in range(rounds):
        for n, t in timers.items():
            time.sleep(SETTLE_S)
            t()  # untimed: wakes this runtime's pool
            for _ in range(BLOCK):
                results[n].runs.append(t())
    for r in results.values():
        r.median_ms = float(np.median(r.runs))
    return list(results.values())


@dataclass
class AblationStep:
    """One rung of the ablation: its label, median latency and speed-ups."""

    label: str
    median_ms: float
    speedup_vs_previous: float
    speedup_vs_naive: float
    num_kernels: int
    compile_s: float


def ablation(onnx_model, inputs: dict, threads: int = 2, repeat: int = 10,
             steps=None, target: str | None = None, records=None) -> list[AblationStep]:
    """Compile ``onnx_model`` at each rung of ``steps`` (default ``ABLATION_STEPS``: naive ->
    + fusion -> + layout/packed weights -> + vectorized micro-kernels -> + Winograd -> +
    inverted-residual fusion) and time it
    (turns of all rungs interleaved; the naive rung, orders of magnitude slower, gets one turn).
    ``records`` (a tuning log, ``ember tune --records``) adds a last rung: the default compile
    under ``ember.tune.apply_history_best(records)``. Latencies in ms.

    Raises:
        EmberError: a rung fails to compile (the message names the model's node).
    """
    import contextlib
    from .driver import compile as ember_compile
    steps = list(steps or ABLATION_STEPS)
    if records is not None:
        steps.append((TUNING_STEP, dict(opt_level=2), records))
    tgt = target or f"llvm -num-threads={threads}"
    models = []
    for label, kw, *rec in steps:
        t0 = time.perf_counter()
        if rec:
            from .tune import apply_history_best
            tuned = apply_history_best(rec[0])
        else:
            tuned = contextlib.nullcontext()
        with PassContext(**kw), tuned:
            m = ember_compile(onnx_model, target=tgt, executor="static")
        models.append((label, m, time.perf_counter() - t0))
    runs = {k: [] for k in range(len(models))}
    timers = [_timeit(lambda m=m: m.run(inputs), warmup=1) for _, m, _ in models]
    for r in range(-(-repeat // BLOCK)):
        for k, t in enumerate(timers):
            if k == 0 and r >= 1:
                continue  # the naive rung: one turn is enough (it is orders of magnitude slower)
            time.sleep(SETTLE_S)
            t()
            for _ in range(BLOCK):
                runs[k].append(t())
    out, prev, naive = [], None, None
    for k, (label, m, cs) in enumerate(models):
        med = float(np.median(runs[k]))
        naive = naive or med
        out.append(AblationStep(label, med, (prev / med) if prev else 1.0, naive / med,
                                int(m.info.get("num_kernels", 0)), cs))
        prev = med
    return out


def format_ablation(steps: list[AblationStep], title: str = "") -> str:
    """A text table of an ablation."""
    lines = [title] if title else []
    w = max([len("step")] + [len(s.label) for s in steps])
    lines.append(f"{'step':{w}} {'median ms':>10} {'x prev':>7} {'x naive':>8} {'kernels':>8}")
    for s in steps:
        lines.append(f"{s.label:{w}} {s.median_ms:10.2f} {s.speedup_vs_previous:7.2f} "
                     f"{s.speedup_vs_naive:8.1f} {s.num_kernels:8d}")
    return "\n".join(lines)


__all__ = ["compare_runtimes", "outputs_agree", "ablation", "format_ablation", "peer_runners", "ABLATION_STEPS",
           "RuntimeResult", "AblationStep"]
