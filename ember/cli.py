"""The ``ember`` command line: ``compile``, ``run``, ``demo``, ``ops``.

Every ember error is printed as one clear line (``error: ...``) with exit status 2; no
traceback unless ``EMBER_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from typing import Sequence

import numpy as np

from .errors import EmberError, InputError


def _table(rows: Sequence[Sequence], header: Sequence[str]) -> str:
    cols = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cols[1:]]
    return "\n".join(out)


def checksum(a: np.ndarray) -> str:
    """Short content digest of an array (dtype, shape and bytes)."""
    h = hashlib.sha256(f"{a.dtype}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


def _load_any(path: str, target: str, shapes=None, executor: str = "auto"):
    import ember
    if path.endswith(".ember"):
        model = ember.load(path)
        _check_artifact_shapes(model, path, shapes)
        return model
    return ember.compile(path, target=target, shapes=shapes, executor=executor)


def describe_output(o) -> tuple:
    """``(shape, dtype, checksum, sum|x|)`` of one model output for ``ember run``'s table: a
    numeric tensor as such; a string tensor with its shape, dtype ``string`` and a digest of
    its text (no sum); a sequence as ``sequence[N]`` with the digest of its elements; an
    empty optional as ``none``."""
    if o is None:
        return "-", "none", "-", "-"
    if isinstance(o, (list, tuple)):
        h = hashlib.sha256(f"sequence{len(o)}".encode())
        for x in o:
            h.update(describe_output(x)[2].encode())
        return f"sequence[{len(o)}]", "-", h.hexdigest()[:12], "-"
    a = np.asarray(o)
    if a.dtype.kind in "OUS":
        h = hashlib.sha256(f"string{a.shape}".encode())
        for x in a.ravel():
            h.update((x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x))
                     .encode("utf-8") + b"\0")
        return tuple(a.shape), "string", h.hexdigest()[:12], "-"
    return tuple(a.shape), a.dtype, checksum(a), f"{float(np.abs(a).sum()):.6g}"


def _check_artifact_shapes(model, path: str, shapes) -> None:
    """A saved model runs only on the shapes it was compiled for: a ``--shape`` naming another
    shape (or no input) is refused instead of being silently ignored.

    Raises:
        InputError: names the input, both shapes and the fix."""
    have = model.input_shapes
    for name, dims in (shapes or {}).items():
        if name not in have:
            raise InputError(f"--shape {name}=...: {path} has no input {name!r}; its inputs are "
                             f"{list(have)}")
        if tuple(dims) != tuple(have[name]):
            raise InputError(f"--shape {name}={','.join(map(str, dims))}: {path} was compiled "
                             f"for {name} of shape {tuple(have[name])}; compile the .onnx model "
                             f"with this --shape instead (a saved model cannot change shape)")


def _parse_shapes(items) -> dict | None:
    if not items:
        return None
    out = {}
    for it in items:
        name, _, dims = it.rpartition("=")
        if not name:
            raise InputError(f"--shape {it!r}: expected NAME=D0,D1,...")
        try:
            out[name] = tuple(int(d) for d in dims.split(",") if d)
        except ValueError:
            raise InputError(f"--shape {it!r}: the dimensions must be integers, e.g. "
                             f"--shape {name}=1,3,224,224") from None
    return out


def _parse_inputs(items, model) -> dict:
    if not items:
        return model.random_inputs(seed=0)
    out = {}
    for it in items:
        name, sep, path = it.partition("=")
        if not sep:
            if len(model.input_names) != 1:
                raise InputError(f"--input {it!r}: name the input (NAME=file.npy); the model's "
                                 f"inputs are {model.input_names}")
            name, path = model.input_names[0], it
        if not os.path.exists(path):
            raise InputError(f"--input {name}: file {path!r} does not exist")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise InputError(f"--input {name}: {path!r} is not a numeric .npy array ({e})") \
                from None
    return out


def _disabled_passes(args) -> tuple:
    from .graph.passes.pass_manager import list_passes
    names = tuple(args.disable_pass or ())
    known = set(list_passes())
    bad = [n for n in names if n not in known]
    if bad:
        raise InputError(f"--disable-pass {', '.join(bad)}: no such pass; known passes: "
                         f"{', '.join(sorted(known))}")
    return names


def _pass_context(args):
    """The PassContext the compile-like commands run under (opt level, disabled passes,
    ``--dump-ir`` and ``--pass-times`` instruments)."""
    from .graph.passes import PassContext
    from .graph.passes.instrument import DumpIR, PassTimingInstrument
    instruments = []
    timing = None
    if getattr(args, "dump_ir", None):
        instruments.append(DumpIR(args.dump_ir))
    if getattr(args, "pass_times", False):
        timing = PassTimingInstrument()
        instruments.append(timing)
    ctx = PassContext(opt_level=args.opt_level, disabled_pass=_disabled_passes(args),
                      instruments=instruments)
    return ctx, timing


def cmd_compile(args) -> int:
    """``ember compile MODEL``: compile an ONNX model (``--target``, ``--shape``, ``--opt-level``,
    ``--records``) with the static executor and save the ``.ember`` artifact (``-o``, default
    ``MODEL.ember``); prints compile time (s), kernel counts and arena size (MiB). Returns 0.

    Raises:
        ArtifactError: the model runs only on the staged executor (``ember.compile`` chose it:
            data-dependent shapes, host operators, string inputs...), which an artifact cannot
            hold; the message says why and that ``ember run``/``ember bench`` run it.
        InputError: ``-o`` names the input model itself, or a bad ``--shape``/``--disable-pass``.
        EmberError: any compile error (subclasses: ModelLoadError, UnsupportedOpError, ...)."""
    import ember
    from .tune.cli import records_context
    ctx, timing = _pass_context(args)
    t0 = time.perf_counter()
    with ctx, records_context(args.records) as tuned:
        qkw = {} if not (getattr(args, "quantize", None) or getattr(args, "calibration", None)) \
            else dict(quantize=args.quantize, calibration=args.calibration,
                      calibrate=args.calibrate, executor="static")
        model = ember.compile(args.model, target=args.target, shapes=_parse_shapes(args.shape),
                              **qkw)
    dt = time.perf_counter() - t0
    if model.info.get("executor") == "staged":
        from .errors import ArtifactError
        raise ArtifactError(
            f"{args.model} compiles only for the staged executor "
            f"({model.info.get('staged_reason', '')}): its segments are compiled at run time "
            f"for the shapes and values they meet, so there is no fixed set of kernels for an "
            f".ember artifact to hold and nothing was written. Run or time it from the .onnx "
            f"file: `ember run {args.model}`, `ember bench {args.model}`"
            + (" (or fix the input shapes with --shape NAME=D0,D1,... if that is the reason)"
               if "--shape" in model.info.get("staged_reason", "") else ""))
    if tuned is not None:
        print(_records_note(args.records, tuned, model.target))
    if timing is not None:
        print(timing.report())
    if args.dump_ir:
        print(f"IR before/after each pass written to {args.dump_ir}/")
    out = args.output or os.path.splitext(os.path.basename(args.model))[0] + ".ember"
    if os.path.exists(out) and os.path.exists(args.model) and os.path.samefile(out, args.model):
        raise InputError(f"-o {out!r} is the input model itself; choose another output path")
    model.save(out)
    i = model.info
    print(f"compiled {args.model} for {model.target} in {dt:.2f} s: {i['num_kernels']} kernels "
          f"({i['num_unique_kernels']} unique), arena {i['arena_bytes'] / 2**20:.1f} MiB")
    print(f"wrote {out}")
    return 0


def _calibration_args(p, required: bool) -> None:
    p.add_argument("--calibration", required=required, metavar="FILE.npz|DIR",
                   help="calibration inputs: an .npz of arrays named by the inputs with a "
                   "leading sample axis, or a directory of one-feed .npz files")
    p.add_argument("--calibrate", choices=["minmax", "percentile", "entropy"],
                   default="minmax", help="activation range observer (default minmax)")


def cmd_quantize(args) -> int:
    """``ember quantize MODEL --calibration FILE.npz|DIR [-o OUT]``: post-training int8
    quantization (``ember.quantize``) written as a QDQ ONNX model that onnxruntime also runs;
    prints the layers quantized, those left in float32 and the weight sizes. Returns 0.

    Raises:
        InputError: bad calibration data, ``-o`` naming the input model or a path that
            cannot be written;
        QuantizationError: nothing to quantize."""
    import onnx
    from .quant.onnx_qdq import quantize_onnx
    out = args.output or os.path.splitext(args.model)[0] + ".int8.onnx"
    if os.path.exists(out) and os.path.exists(args.model) and os.path.samefile(out, args.model):
        raise InputError(f"-o {out!r} is the input model itself; choose another output path")
    proto, rep = quantize_onnx(args.model, args.calibration, args.calibrate,
                               not args.per_tensor, args.skip or (), args.target)
    try:
        onnx.save(proto, out)
    except OSError as e:  # a missing or unwritable folder: a typed error, not a traceback
        raise InputError(f"cannot write the quantized model to {out!r}: {e.strerror or e} "
                         f"(check that its folder exists and is writable)") from None
    wb = rep["weight_bytes"]
    print(f"quantized {len(rep['layers'])} layer(s) on {rep['num_feeds']} calibration feed(s) "
          f"({rep['method']}); float32: {rep['float_ops'] or 'none'}; weights "
          f"{wb['float32'] / 2**20:.2f} MiB -> {wb['quantized'] / 2**20:.2f} MiB")
    print(f"wrote {out}")
    return 0


def _records_note(path: str, ctx, target: str) -> str:
    """What ``--records`` did to a build: kernels replaced, algorithms changed, and why
    nothing was applied when the records hold nothing for ``target``."""
    note = (f"tuning records {path}: {ctx.applied} kernel(s) tuned, "
            f"{ctx.algorithms_applied} convolution algorithm(s) changed")
    targets = sorted({t for _, t in ctx.best})
    if not ctx.applied and not ctx.algorithms_applied:
        if not targets:
            note += " (the file holds no successful measurement: run `ember tune` first)"
        elif str(target) not in targets:
            note += (f" (its records are for {targets}, not {str(target)!r}: tune for this "
                     f"target, or compile with --target {targets[0]!r})")
        elif not ctx.matched:
            note += (" (none of its records is for a kernel of this model: records of another "
                     "model, or of other --shape values? tune this model with `ember tune`)")
        else:
            note += (f" ({ctx.matched} kernel(s) have records, none measured faster than its "
                     f"default schedule)")
    return note


def cmd_run(args) -> int:
    """``ember run MODEL``: run an ONNX model or ``.ember`` artifact on ``--input NAME=file.npy``
    (seeded random when omitted), print each output's shape, dtype, checksum and sum|x|, and the
    median/min latency (ms) over ``--repeat`` runs; ``--save-outputs DIR`` writes ``output_K.npy``.
    Returns 0.

    Raises:
        InputError: a bad ``--input``/``--shape``, or ``--save-outputs`` names an existing
            non-folder.
        EmberError: any load, compile or run error."""
    model = _load_any(args.model, args.target, _parse_shapes(args.shape))
    inputs = _parse_inputs(args.input, model)
    outs = model.run(inputs)
    stats = model.benchmark(inputs, number=args.repeat, warmup=1)
    rows = [(n,) + describe_output(o) for n, o in zip(model.output_names, outs)]
    print(_table(rows, ["output", "shape", "dtype", "checksum", "sum|x|"]))
    print(f"latency: median {stats['median_ms']:.3f} ms, min {stats['min_ms']:.3f} ms "
          f"over {stats['runs']} runs")
    if args.save_outputs:
        if os.path.exists(args.save_outputs) and not os.path.isdir(args.save_outputs):
            raise InputError(f"--save-outputs {args.save_outputs!r} exists and is not a folder")
        os.makedirs(args.save_outputs, exist_ok=True)
        for k, o in enumerate(outs):
            a = np.asarray(o) if not isinstance(o, (list, tuple)) and o is not None else None
            if a is None or a.dtype.kind == "O":
                # .npy holds numeric and fixed-width text arrays; strings are saved as text
                if a is not None and all(isinstance(x, (str, bytes)) for x in a.ravel()):
                    a = np.array([x.decode("utf-8", "replace") if isinstance(x, bytes) else x
                                  for x in a.ravel()], dtype=str).reshape(a.shape)
                else:
                    raise InputError(f"--save-outputs: output {k} "
                                     f"({model.output_names[k]!r}) is a "
                                     f"{'sequence' if isinstance(o, (list, tuple)) else 'value'}"
                                     f" that an .npy file cannot hold")
            np.save(os.path.join(args.save_outputs, f"output_{k}.npy"), a)
    return 0


def cmd_demo(args) -> int:
    """``ember demo``: compile ResNet-50 (onnx's light model, seeded random weights, batch 1), run
    it, check it against onnxruntime (or ember's NumPy reference executor when onnxruntime is
    missing) with rtol 1e-4, atol 1e-5, and print compile time (s), median latency (ms) and top-5
    classes. Returns 0 when the outputs match, else 1.

    Raises:
        EmberError: any compile or run error."""
    import ember
    from .zoo import default_model_input, randomized_light_model
    print("ember demo: ResNet-50 (onnx package's light model, seeded random weights), batch 1")
    onnx_model = randomized_light_model("resnet50", seed=0)
    x = default_model_input(onnx_model, seed=0)
    t0 = time.perf_counter()
    model = ember.compile(onnx_model, target=args.target)
    compile_s = time.perf_counter() - t0
    (y,) = model.run(x)
    try:
        import onnxruntime as ort
        sess = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        (ref,) = sess.run(None, x)
        ref_name = f"onnxruntime {ort.__version__}"
    except ImportError:
        from .frontend import from_onnx
        from .graph.interpreter import run_reference
        mod, params = from_onnx(onnx_model)
        (ref,) = run_reference(mod, x, params)
        ref_name = "ember's NumPy reference executor (onnxruntime not installed)"
    err = float(np.max(np.abs(y - ref)))
    ok = bool(np.allclose(y, ref, rtol=1e-4, atol=1e-5))
    stats = model.benchmark(x, number=args.repeat, warmup=1)
    i = model.info
    print(f"compile: {compile_s:.2f} s ({i['num_kernels']} kernels, {i['num_unique_kernels']} "
          f"unique; C compiler {i['cc_s']:.2f} s)")
    print(f"latency: median {stats['median_ms']:.1f} ms over {stats['runs']} runs")
    print(f"top-5 classes: {np.argsort(-y[0])[:5].tolist()}")
    print(f"check vs {ref_name}: max |diff| = {err:.3g} -> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def cmd_graph(args) -> int:
    """``ember graph MODEL``: import a model, run the graph passes (unless ``--before``) and print
    the graph as text or DOT, or render it to ``-o FILE`` (txt, dot or svg). Returns 0.

    Raises:
        InputError: ``--format svg`` without ``-o``, or a bad ``--shape``/``--disable-pass``.
        EmberError: any import or pass error."""
    from .frontend import from_onnx
    from .graph.passes import PassContext
    from .graph.passes.pipeline import optimize
    from .graph.visualize import render, to_dot, to_text
    mod, params = from_onnx(args.model, shapes=_parse_shapes(args.shape))
    if not args.before:
        with PassContext(opt_level=args.opt_level, disabled_pass=_disabled_passes(args)):
            mod, params = optimize(mod, args.target, params)
    if args.output:
        path = render(mod, args.output, format=args.format, expand=args.expand)
        print(f"wrote {path}")
    elif args.format == "svg":
        raise InputError("--format svg needs -o FILE.svg")
    else:
        print(to_text(mod) if args.format == "txt" else to_dot(mod, args.expand))
    return 0


def cmd_profile(args) -> int:
    """``ember profile MODEL``: run the model under ``ember.runtime.profiler.profile`` and print
    per-kernel time (ms), GFLOP/s and share (``--top N`` heaviest); ``--hot`` adds each kernel's
    time back to back and the share of its in-model time spent waiting on evicted data;
    ``--trace FILE.json`` writes a Chrome trace. Returns 0.

    Raises:
        InputError: a bad ``--input`` or ``--shape``.
        EmberError: any load, compile or run error."""
    from .driver import staged_reason
    from .errors import ShapeMismatchError, UnsupportedOpError
    from .runtime.profiler import profile
    shapes = _parse_shapes(args.shape)
    from .target import Target
    if Target(args.target).is_npu:  # a QDQ model: the NPU's per-layer cycle table
        return _profile_npu(args, shapes)
    try:
        model = _load_any(args.model, args.target, shapes, executor="static")
    except (UnsupportedOpError, ShapeMismatchError) as e:
        if staged_reason(e, shapes) is None:
            raise
        # (was: "NonZero is not supported", though `ember run` runs the model, staged)
        raise InputError(f"ember profile times the kernels of a static model, and "
                         f"{args.model} runs only in the staged executor ({e}), which has no "
                         f"fixed kernel plan to time: time it whole with "
                         f"`ember run {args.model} --repeat N`") from None
    inputs = _parse_inputs(args.input, model)
    report = profile(model, inputs, repeat=args.repeat, hot=args.hot)
    print(report.table(top=args.top))
    if args.trace:
        report.write_chrome_trace(args.trace)
        print(f"wrote Chrome trace {args.trace} (open in chrome://tracing or Perfetto)")
    return 0


def _profile_npu(args, shapes) -> int:
    """``ember profile QDQ_MODEL --target npu``: the per-layer table of ``info["npu"]`` (cycles,
    MACs, utilization, DMA bytes, stall cycles; CPU fallbacks with their reason) and the wall
    time of one run of the whole model (NPU layers simulated); ``--trace FILE.json`` writes the
    NPU's timeline (``NPUModel.chrome_trace``)."""
    import time
    from .driver import compile as ember_compile
    from .npu.offload import format_layers
    model = ember_compile(args.model, target=args.target, shapes=shapes)
    inputs = _parse_inputs(args.input, model) if hasattr(model, "input_names") else {}
    t0 = time.perf_counter()
    model.run(inputs)
    print(format_layers(model.info["npu"]))
    print(f"wall time of one run (NPU simulated on the host): "
          f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
    if args.trace:
        model.write_chrome_trace(args.trace)
        print(f"wrote the NPU's Chrome trace {args.trace} (layers and the load/compute/store "
              f"units; open in chrome://tracing or Perfetto)")
    return 0


def cmd_bench(args) -> int:
    """``ember bench MODEL``: median latency (ms) of ember vs onnxruntime and the other installed
    runtimes on seeded random inputs, with the ratio to the best peer and whether the outputs
    match; ``--ablation`` prints ember's naive -> fusion -> layout -> micro-kernel -> Winograd
    (-> tuning, with ``--records``) steps instead.
    Returns 0.

    Raises:
        InputError: a bad ``--shape``.
        EmberError: any load or compile error."""
    from .benchmark import ablation, format_ablation
    from .frontend.onnx import load_model
    onnx_model = load_model(args.model)
    probe = __import__("ember").compile(onnx_model, target=f"llvm -num-threads={args.threads}",
                                        shapes=_parse_shapes(args.shape))
    inputs = probe.random_inputs(seed=0)
    staged = probe.info.get("executor") == "staged"
    if staged:
        print(f"ember runs {args.model} on the staged executor: "
              f"{probe.info.get('staged_reason', '')[:300]}")
    if args.ablation and staged:
        raise InputError("--ablation compiles the model statically at each optimization rung, "
                         "and this model runs only on the staged executor; time it without "
                         "--ablation")
    if args.ablation:
        steps = ablation(onnx_model, inputs, threads=args.threads, repeat=args.repeat,
                         records=args.records)
        print(format_ablation(steps, f"ablation: {args.model}, {args.threads} threads"))
        return 0
    from .benchmark import compare_runtimes
    res = compare_runtimes(onnx_model, inputs, threads=args.threads, repeat=args.repeat,
                           ember_model=probe)
    if staged:
        for r in res:
            if r.name == "ember":
                r.note = (r.note + "; " if r.note else "") + "staged executor"
    best_peer = min((r.median_ms for r in res if r.name != "ember"), default=None)
    rows = [(r.name, f"{r.median_ms:.2f}",
             f"{r.median_ms / best_peer:.2f}" if best_peer else "-",
             "" if r.matches is None else ("yes" if r.matches else "NO"), r.note) for r in res]
    print(_table(rows, ["runtime", "median ms", "/ best peer", "matches", "note"]))
    return 0


def cmd_conformance(args) -> int:
    """``ember conformance [ARGS]``: run ``bench/conformance.py`` (ONNX's backend test suite
    through ember) with ``ARGS``; returns its exit status.

    Raises:
        InputError: ``bench/conformance.py`` is missing (not a source checkout)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                        "conformance.py")
    if not os.path.exists(path):
        raise InputError("bench/conformance.py is not available (run from a source checkout)")
    spec = importlib.util.spec_from_file_location("ember_conformance", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main(args.rest)


def cmd_ops(args) -> int:
    """``ember ops``: print every supported ONNX operator with its opset ranges and how it runs:
    compiled to native kernels (by a converter, or expanded from its ONNX function body) or on
    the host (staged executor). Returns 0."""
    from .frontend.converters import onnx_first_opsets, supported_onnx_ops
    from .frontend.functions import function_ops
    from .frontend.hostops import host_ops
    rows = []
    host = host_ops()
    compiled = supported_onnx_ops()
    first = onnx_first_opsets()
    body = function_ops()
    for key in sorted(set(compiled) | set(host) | set(body)):
        domain, op = key
        r = ", ".join(f"{s}-{u if u else ''}" for s, u in compiled.get(key, []))
        mode = host.get(key)
        if key not in compiled and key not in host:
            where = "compiled (ONNX function body)"
            r = f"{body[key]}-"
        else:
            where = ("host" if key not in compiled or mode == "always" else
                     "compiled (host for strings/sequences)" if mode == "fallback" else
                     "compiled")
            if key in body and key in compiled and all(u is not None for _, u in compiled[key]):
                where += "; newer opsets: ONNX function body"
        rows.append(((domain + ".") if domain else "", op, r or f"{first.get(key, 1)}-", where))
    print(_table([(d + o, r, w) for d, o, r, w in rows], ["ONNX operator", "opsets", "runs"]))
    n_host = sum(1 for *_, w in rows if w == "host")
    n_body = sum(1 for *_, w in rows if w == "compiled (ONNX function body)")
    print(f"\n{len(rows)} ONNX operators ({len(rows) - n_host} compiled to native kernels, "
          f"{n_body} of them expanded from their ONNX function body; {n_host} on the host: "
          f"data-dependent shapes, strings, sequences, control flow). Operators on string "
          f"tensors without a host kernel of their own run on the host through onnx's "
          f"reference implementation; ember.compile picks the executor (info['executor'])")
    return 0


def _positive_int(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return n


def _opt_level(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
    if not 0 <= n <= 4:
        raise argparse.ArgumentTypeError(f"opt level {n} is not in 0-4 (4 adds mixed precision)")
    return n


def _pass_args(p):
    p.add_argument("--opt-level", type=_opt_level, default=2, help="graph optimization level "
                   "0-3 (default 2; 4 also runs ToMixedPrecision)")
    p.add_argument("--disable-pass", action="append", metavar="NAME", help="skip a pass")


def build_parser() -> argparse.ArgumentParser:
    """The ``argparse`` parser of the ``ember`` command: subcommands compile, graph, run, demo,
    profile, bench, tune, conformance and ops, each with ``fn`` set to its handler."""
    p = argparse.ArgumentParser(prog="ember", description="ember deep-learning compiler")
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("compile", help="compile an ONNX model to an .ember artifact")
    c.add_argument("model")
    c.add_argument("-o", "--output", help="artifact path (default: MODEL.ember)")
    c.add_argument("--target", default="llvm")
    c.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic input dims")
    _pass_args(c)
    c.add_argument("--records", metavar="FILE", help="apply the best schedules of a tuning log")
    c.add_argument("--dump-ir", metavar="DIR", help="write the IR before/after every pass")
    c.add_argument("--pass-times", action="store_true", help="print time spent in each pass")
    c.add_argument("--quantize", choices=["int8", "fp16", "bf16"],
                   help="int8: post-training quantization first (needs --calibration; "
                   "docs/quantization.md); fp16 / bf16: mixed precision (tensor cores on CUDA "
                   "sm_80+, docs/gpu.md; bf16 on a CPU: vdpbf16ps kernels)")
    _calibration_args(c, required=False)
    c.set_defaults(fn=cmd_compile)

    q = sub.add_parser("quantize", help="quantize an ONNX model to int8 (QDQ ONNX) with a "
                       "calibration set")
    q.add_argument("model")
    q.add_argument("-o", "--output", help="QDQ model path (default: MODEL.int8.onnx)")
    q.add_argument("--target", default="llvm", help="the target calibration runs on")
    q.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor "
                   "instead of per output channel")
    q.add_argument("--skip", action="append", metavar="VALUE", help="keep the layer whose "
                   "output is VALUE in float32 (repeatable)")
    _calibration_args(q, required=True)
    q.set_defaults(fn=cmd_quantize)

    g = sub.add_parser("graph", help="draw a model's graph after (or before) the graph passes")
    g.add_argument("model")
    g.add_argument("--format", choices=["txt", "dot", "svg"], default="txt")
    g.add_argument("-o", "--output", help="write to a file (needed for svg)")
    g.add_argument("--before", action="store_true", help="the graph as imported, no passes")
    g.add_argument("--expand", action="store_true", help="draw the operators inside fused groups")
    g.add_argument("--target", default="llvm")
    g.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic input dims")
    _pass_args(g)
    g.set_defaults(fn=cmd_graph)

    r = sub.add_parser("run", help="run an ONNX model or .ember artifact")
    r.add_argument("model")
    r.add_argument("--input", action="append", help="NAME=file.npy (random seeded if omitted)")
    r.add_argument("--target", default="llvm")
    r.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic input dims")
    r.add_argument("--repeat", type=_positive_int, default=10,
                   help="timed runs (default 10)")
    r.add_argument("--save-outputs", metavar="DIR", help="write output_K.npy files")
    r.set_defaults(fn=cmd_run)

    d = sub.add_parser("demo", help="compile and run ResNet-50, check it, print timings")
    d.add_argument("--target", default="llvm")
    d.add_argument("--repeat", type=_positive_int, default=5)
    d.set_defaults(fn=cmd_demo)

    pr = sub.add_parser("profile", help="per-kernel time, GFLOP/s and %% of peak")
    pr.add_argument("model")
    pr.add_argument("--input", action="append", help="NAME=file.npy (random seeded if omitted)")
    pr.add_argument("--target", default="llvm")
    pr.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic input dims")
    pr.add_argument("--repeat", type=_positive_int, default=10)
    pr.add_argument("--top", type=_positive_int, default=None, help="show the N heaviest")
    pr.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace")
    pr.add_argument("--hot", action="store_true",
                    help="also time each kernel back to back (its data cached): the memory stall")
    pr.set_defaults(fn=cmd_profile)

    b = sub.add_parser("bench", help="latency vs onnxruntime (and peers), or --ablation")
    b.add_argument("model")
    b.add_argument("--ablation", action="store_true", help="naive -> fusion -> layout -> "
                   "vectorized micro-kernels -> Winograd (-> tuning with --records), with speed-ups")
    b.add_argument("--records", default=None, help="with --ablation: a tuning log (ember tune "
                   "--records) for a last '+ tuning' rung")
    b.add_argument("--threads", type=_positive_int, default=2)
    b.add_argument("--repeat", type=_positive_int, default=10)
    b.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic input dims")
    b.set_defaults(fn=cmd_bench)

    from .tune.cli import add_tune_arguments, run_tune
    t = sub.add_parser("tune", help="auto-tune a model's kernels, writing a records file")
    add_tune_arguments(t)
    t.set_defaults(fn=run_tune)

    cf = sub.add_parser("conformance", help="run ONNX's backend test suite through ember "
                        "(options: see bench/conformance.py --help)")
    cf.add_argument("rest", nargs=argparse.REMAINDER)
    cf.set_defaults(fn=cmd_conformance)

    o = sub.add_parser("ops", help="list supported ONNX operators and opsets")
    o.set_defaults(fn=cmd_ops)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ember`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except EmberError as e:
        if os.environ.get("EMBER_DEBUG"):
            raise
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `ember graph m.onnx | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
