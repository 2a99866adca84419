"""The CUDA runtime: ``CUDAModel`` runs a model compiled for a ``cuda`` target through the CUDA
driver API (``cuda.bindings.driver``, ember's ``cuda`` extra).

Building and loading never touch a GPU: the model holds the PTX and the cubins
(``codegen.nvrtc``), the plan and the weights, and ``save`` / ``load_cuda_artifact`` move them
through an ``.ember`` file. The device is opened on the first ``run``:

- ``cuInit``, the primary context of device 0 (``EMBER_CUDA_DEVICE`` picks another), the
  module loaded from the cubin of the device's ``sm_XX`` when the model has it, else from the
  PTX (the driver JIT-compiles it);
- one device allocation holds the weights (uploaded once), the inputs, the intermediates laid
  out by the CPU's liveness planner (``memory_plan.plan_memory``, 256-byte offsets), the
  kernels' workspace and the index-check status words; an out-of-memory is a ``DeviceError``
  naming the bytes asked for;
- inputs and outputs go through pinned (page-locked) host buffers (``cuMemHostAlloc``);
- the whole inference (input copies, status reset, every kernel launch, output copies) is
  captured once on a stream into a CUDA graph (``cuStreamBeginCapture`` ...
  ``cuGraphInstantiate``); each ``run`` copies the inputs into the pinned buffers, replays the
  graph (``cuGraphLaunch``) and waits for the stream.

No driver or no GPU: ``run`` raises ``DeviceError`` ("no CUDA driver / no GPU: ..."). Reference:
the CUDA Driver API (CUDA 13) and the cuda-python ``cuda.bindings`` documentation.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import ArtifactError, DeviceError
from .module import CompiledModel
from .webgpu import WebGPUModel

ALIGN = 256  # bytes between tensors in the device allocation (cuMemAlloc aligns to 256 too)
NO_GPU = "no CUDA driver / no GPU"
ARTIFACT_FORMAT = "ember-cuda-artifact"
ARTIFACT_VERSION = 1


def _round(n: int) -> int:
    return -(-max(int(n), 1) // ALIGN) * ALIGN


def _driver():
    """``cuda.bindings.driver`` after a successful ``cuInit``.

    Raises:
        DeviceError: the bindings, the driver library (libcuda) or a device are missing."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        raise DeviceError(f"{NO_GPU}: cuda-bindings is not installed ({e}); pip install "
                          f"'ember[cuda]'") from None
    try:
        (err,) = cu.cuInit(0)
    except Exception as e:  # libcuda.so not found (no NVIDIA driver installed)
        raise DeviceError(f"{NO_GPU}: the NVIDIA driver library cannot be loaded ({e}); run on "
                          f"a machine with an NVIDIA GPU and its driver") from None
    if err != cu.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"{NO_GPU}: cuInit failed with {err.name}; run on a machine with an "
                          f"NVIDIA GPU and its driver")
    return cu


def _ok(cu, res, what: str):
    """The values of a driver call's result tuple; ``DeviceError`` naming ``what`` on an
    error code."""
    err, rest = res[0], res[1:]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"CUDA: {what} failed: {err.name}")
    return rest[0] if len(rest) == 1 else rest


class CUDAModel:
    """A model compiled for a ``cuda`` target (``ember.compile(m, target="nvidia/h200")``).

    ``run(feeds)`` takes ``{input name: array}`` (``input_names``, ``input_shapes``,
    ``input_dtypes``) and returns the outputs as NumPy arrays; ``save(path)`` writes an artifact
    (cubins, PTX, plan, weights) that ``ember.load`` reads on any machine.

    Args (internal, from the driver):
        plan: the execution plan (``driver._plan``) with 256-aligned arena offsets (bytes).
        params: weight name -> array.
        steps: per plan step, ``{"workspace": [bytes per buffer], "kernels": [{"name", "args",
            "grid", "block"}]}`` (``args`` as ``CUDAKernel.args``).
        binary: the ``CUDABinary`` (PTX, cubins per arch, resources).
        source: the CUDA C of the module.
        graph_text, target, info: as ``CompiledModel``'s.
    """

    input_names = CompiledModel.input_names  # the plan's descriptions, as the other models
    input_shapes = CompiledModel.input_shapes
    input_dtypes = CompiledModel.input_dtypes
    output_names = CompiledModel.output_names
    random_inputs = CompiledModel.random_inputs
    _check_inputs = WebGPUModel._check_inputs  # native dtypes: no 32-bit storage conversion

    def __init__(self, plan: dict, params: Mapping[str, np.ndarray], steps: list, binary,
                 source: str, graph_text: str, target: str, info: dict):
        self.plan, self.steps, self.binary, self.source = plan, steps, binary, source
        self.graph_text, self.target, self.info = graph_text, target, info
        self.params = {k: np.asarray(v) for k, v in params.items()}
        self._dev = None
        self._layout()

    # layout (host only) -------------------------------------------------------------------------
    def _layout(self) -> None:
        """Byte offsets of every region in the one device allocation."""
        slots = self.plan["slots"]
        self.where: dict[int, int] = {}
        off = 0
        for k, s in enumerate(slots):
            if s["kind"] == "param":
                self.where[k] = off
                off += _round(_nbytes(s))
        self.weights_bytes = off
        for inp in self.plan["inputs"]:
            self.where[inp["slot"]] = off
            off += _round(_nbytes(slots[inp["slot"]]))
        arena0 = off
        for k, s in enumerate(slots):
            if s["kind"] == "arena":
                self.where[k] = arena0 + s["offset"]
        off += _round(self.plan["arena_bytes"])
        self.workspace_at = off
        off += max([sum(_round(n) for n in st["workspace"]) for st in self.steps] + [0])
        self.checked = [k for k, st in enumerate(self.steps)
                        if any(a[0] == "status" for kern in st["kernels"] for a in kern["args"])]
        self.status_at = off
        off += ALIGN * max(1, len(self.checked))
        self.device_bytes = off
        self.info["device_bytes"] = off

    def launches(self, base: int) -> list[tuple]:
        """The kernel launches of one inference, in order, for the device allocation at address
        ``base``: ``(kernel name, grid, block, [argument addresses], plan step index)``
        (kernels with an empty grid left out); ``run`` captures them into its CUDA graph."""
        out = []
        for k, (pst, st) in enumerate(zip(self.plan["steps"], self.steps)):
            ws, o = [], self.workspace_at
            for n in st["workspace"]:
                ws.append(base + o)
                o += _round(n)
            for kern in st["kernels"]:
                if 0 in kern["grid"]:
                    continue
                ptrs = []
                for kind, i in kern["args"]:
                    if kind == "param":
                        ptrs.append(base + self.where[pst["args"][i]])
                    elif kind == "workspace":
                        ptrs.append(ws[i])
                    else:
                        ptrs.append(base + self.status_at + ALIGN * self.checked.index(k))
                out.append((kern["name"], tuple(kern["grid"]), tuple(kern["block"]), ptrs, k))
        return out

    # device ---------------------------------------------------------------------------------
    def _open(self):
        """Open the device, load the module, allocate, upload the weights and capture the
        inference as a CUDA graph (once).

        Raises:
            DeviceError: no driver / GPU, an out-of-memory (naming the bytes), or a module the
                device cannot load."""
        if self._dev is not None:
            return self._dev
        cu = _driver()
        dev = _ok(cu, cu.cuDeviceGet(int(os.environ.get("EMBER_CUDA_DEVICE", "0"))),
                  "cuDeviceGet")
        ctx = _ok(cu, cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _ok(cu, cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        A = cu.CUdevice_attribute
        major = _ok(cu, cu.cuDeviceGetAttribute(
            A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
        minor = _ok(cu, cu.cuDeviceGetAttribute(
            A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
        arch = f"sm_{major}{minor}"
        self.info["device_arch"] = arch
        image = self.binary.cubins.get(arch)
        image = image if image is not None else self.binary.ptx.encode() + b"\0"
        module = _ok(cu, cu.cuModuleLoadData(image),
                     f"loading the kernels on {arch} (built for "
                     f"{', '.join(self.binary.cubins)} + PTX)")
        res = cu.cuMemAlloc(self.device_bytes)
        if res[0] == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            raise DeviceError(f"CUDA out of memory: the model needs {self.device_bytes} bytes on "
                              f"the device (weights {self.weights_bytes}, arena "
                              f"{self.plan['arena_bytes']} bytes); free GPU memory or use a "
                              f"smaller batch")
        base = int(_ok(cu, res, f"cuMemAlloc({self.device_bytes})"))
        slots = self.plan["slots"]
        for k, s in enumerate(slots):  # weights uploaded once
            if s["kind"] == "param":
                a = np.ascontiguousarray(self.params[s["param"]])
                if a.nbytes:
                    _ok(cu, cu.cuMemcpyHtoD(cu.CUdeviceptr(base + self.where[k]), a, a.nbytes),
                        "uploading the weights")
        stream = _ok(cu, cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                     "cuStreamCreate")
        # pinned host buffers: inputs, then outputs, then the status words
        host_regions = [("in", i["slot"]) for i in self.plan["inputs"]] + \
                       [("out", o["slot"]) for o in self.plan["outputs"]]
        hoff, hplace = 0, []
        for kind, slot in host_regions:
            hplace.append((kind, slot, hoff))
            hoff += _round(_nbytes(slots[slot]))
        status_h = hoff
        hoff += ALIGN * max(1, len(self.checked))
        hptr = int(_ok(cu, cu.cuMemHostAlloc(hoff, 0), f"cuMemHostAlloc({hoff})"))
        host = np.frombuffer((ctypes.c_char * hoff).from_address(hptr), np.uint8)
        funcs = {}
        for st in self.steps:
            for kern in st["kernels"]:
                if kern["name"] not in funcs:
                    funcs[kern["name"]] = _ok(cu, cu.cuModuleGetFunction(
                        module, kern["name"].encode()), f"kernel {kern['name']}")
        keep = []  # kernel parameter arrays, alive until the graph is instantiated
        _ok(cu, cu.cuStreamBeginCapture(
            stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture")
        for kind, slot, ho in hplace:
            if kind == "in" and _nbytes(slots[slot]):
                _ok(cu, cu.cuMemcpyHtoDAsync(cu.CUdeviceptr(base + self.where[slot]), hptr + ho,
                                             _nbytes(slots[slot]), stream), "input copy")
        _ok(cu, cu.cuMemsetD8Async(cu.CUdeviceptr(base + self.status_at), 0,
                                   ALIGN * max(1, len(self.checked)), stream), "status reset")
        launches = []  # (step, function, grid, block, parameter array), kept for profiling
        for name, grid, block, ptrs, k in self.launches(base):
            vals = [np.array([p], np.uint64) for p in ptrs]
            args = np.array([v.ctypes.data for v in vals], np.uint64)
            keep += [vals, args]
            launches.append((k, funcs[name], grid, block, args))
        self._launch_all(cu, stream, launches)
        for kind, slot, ho in hplace:
            if kind == "out" and _nbytes(slots[slot]):
                _ok(cu, cu.cuMemcpyDtoHAsync(hptr + ho, cu.CUdeviceptr(base + self.where[slot]),
                                             _nbytes(slots[slot]), stream), "output copy")
        if self.checked:
            _ok(cu, cu.cuMemcpyDtoHAsync(hptr + status_h, cu.CUdeviceptr(base + self.status_at),
                                         ALIGN * len(self.checked), stream), "status copy")
        graph = _ok(cu, cu.cuStreamEndCapture(stream), "cuStreamEndCapture")
        gexec = _ok(cu, cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        self._dev = {"cu": cu, "ctx": ctx, "module": module, "base": base, "stream": stream,
                     "graph": graph, "exec": gexec, "host": host, "hptr": hptr,
                     "hplace": hplace, "status_h": status_h, "keep": keep,
                     "launches": launches}
        return self._dev

    def _launch_all(self, cu, stream, launches, events=None) -> None:
        """Launch ``launches`` on ``stream``, each plan step inside an NVTX range named after
        its graph node (``node (op)``, domain ``ember``; ranges captured into the CUDA graph
        label its kernels in Nsight Systems), and between its two CUDA events when
        ``events`` (step -> (start, end)) is given."""
        steps = self.plan["steps"]
        i = 0
        while i < len(launches):
            k = launches[i][0]
            pst = steps[k]
            with _nvtx_range(f"{pst['name']} ({pst['op']})"):
                if events is not None:
                    _ok(cu, cu.cuEventRecord(events[k][0], stream), "cuEventRecord")
                while i < len(launches) and launches[i][0] == k:
                    _, fn, grid, block, args = launches[i]
                    _ok(cu, cu.cuLaunchKernel(fn, *grid, *block, 0, stream, args.ctypes.data,
                                              0),
                        f"launching the kernel of node {pst['name']} ({pst['op']})")
                    i += 1
                if events is not None:
                    _ok(cu, cu.cuEventRecord(events[k][1], stream), "cuEventRecord")

    def timestamp_samples(self, inputs, repeat: int = 10, warmup: int = 2):
        """Per-step GPU times from CUDA events: ``(samples, end_to_end_ms)`` where ``samples``
        holds, per timed run, ``[(start_us, duration_us)]`` per plan step (start relative to
        the first step's start event; a step's kernels launched directly on the stream
        between its two events, inside its NVTX range) and ``end_to_end_ms`` the median
        ``run`` time (the CUDA graph replay with the input and output copies). Used by
        ``ember.runtime.profiler.profile`` (``ember profile --target cuda``).

        Raises:
            InputError: bad inputs (as ``run``).
            DeviceError: no CUDA driver / no GPU, or a failed launch."""
        import time
        self._check_inputs(inputs)
        d = self._open()
        cu, stream = d["cu"], d["stream"]
        _ok(cu, cu.cuCtxSetCurrent(d["ctx"]), "cuCtxSetCurrent")
        steps = sorted({lk[0] for lk in d["launches"]})
        events = {k: (_ok(cu, cu.cuEventCreate(0), "cuEventCreate"),
                      _ok(cu, cu.cuEventCreate(0), "cuEventCreate")) for k in steps}
        samples, e2e = [], []
        try:
            for it in range(warmup + repeat):
                t0 = time.perf_counter()
                self.run(inputs)  # the graph replay; leaves the inputs on the device
                e2e.append((time.perf_counter() - t0) * 1e3)
                self._launch_all(cu, stream, d["launches"], events)
                _ok(cu, cu.cuStreamSynchronize(stream), "running the profiled kernels")
                if it < warmup:
                    continue
                first = events[steps[0]][0] if steps else None
                run = [(0.0, 0.0)] * len(self.plan["steps"])
                for k in steps:
                    st = _ok(cu, cu.cuEventElapsedTime(first, events[k][0]), "cuEventElapsedTime")
                    du = _ok(cu, cu.cuEventElapsedTime(events[k][0], events[k][1]),
                             "cuEventElapsedTime")
                    run[k] = (float(st) * 1e3, float(du) * 1e3)
                samples.append(run)
        finally:
            for a, b in events.values():
                cu.cuEventDestroy(a)
                cu.cuEventDestroy(b)
        return samples, float(np.median(e2e[warmup:]))

    def run(self, inputs) -> list[np.ndarray]:
        """One inference on the GPU: ``{name: array}`` (or a list in input order) -> outputs.

        Raises:
            InputError: unknown/missing inputs, wrong shapes or dtypes, an out-of-range gather
                index (naming the node).
            DeviceError: no CUDA driver / no GPU, out of device memory, a failed launch."""
        arrays = self._check_inputs(inputs)
        d = self._open()
        cu, host, slots = d["cu"], d["host"], self.plan["slots"]
        _ok(cu, cu.cuCtxSetCurrent(d["ctx"]), "cuCtxSetCurrent")  # run() from any thread
        names = {i["slot"]: i["name"] for i in self.plan["inputs"]}
        for kind, slot, ho in d["hplace"]:
            if kind == "in":
                a = np.ascontiguousarray(arrays[names[slot]])
                host[ho:ho + a.nbytes] = a.reshape(-1).view(np.uint8)
        _ok(cu, cu.cuGraphLaunch(d["exec"], d["stream"]), "cuGraphLaunch")
        _ok(cu, cu.cuStreamSynchronize(d["stream"]), "running the model")
        for j, k in enumerate(self.checked):
            at = d["status_h"] + ALIGN * j
            if host[at:at + 4].view(np.int32)[0]:
                from ..codegen.c import STATUS_INDEX_OUT_OF_RANGE
                from .executor import kernel_failure
                raise kernel_failure(self.plan["steps"][k], STATUS_INDEX_OUT_OF_RANGE)
        outs = []
        for kind, slot, ho in d["hplace"]:
            if kind == "out":
                s = slots[slot]
                outs.append(host[ho:ho + _nbytes(s)].view(_np_dtype(s["dtype"]))
                            .reshape(s["shape"]).copy())
        return outs

    def benchmark(self, inputs, number: int = 20, warmup: int = 3) -> dict:
        """Latency statistics of ``run`` in ms (``median_ms``, ``mean_ms``, ``min_ms``), inputs
        and outputs copied each run."""
        from .executor import benchmark
        return benchmark(lambda: self.run(inputs), number, warmup)

    def save(self, path) -> None:
        """Write the model (cubins, PTX, CUDA C, plan, weights) to ``path`` (atomically).

        Raises:
            ArtifactError: the path cannot be written."""
        path = Path(path)
        manifest = {"format": ARTIFACT_FORMAT, "version": ARTIFACT_VERSION,
                    "target": self.target, "plan": self.plan, "steps": self.steps,
                    "info": self.info, "param_names": list(self.params)}
        from .artifact import write_device_artifact
        write_device_artifact(path, manifest, {
            "graph.txt": self.graph_text, "kernels.cu": self.source,
            "kernels.ptx": self.binary.ptx, "binary.json": self.binary.to_bytes()}, self.params)


def is_cuda_artifact(manifest: dict) -> bool:
    """True for the manifest of an artifact ``CUDAModel.save`` wrote."""
    return manifest.get("format") == ARTIFACT_FORMAT


def load_cuda_artifact(path) -> CUDAModel:
    """A ``CUDAModel`` from an artifact ``CUDAModel.save`` wrote (no GPU needed).

    Raises:
        ArtifactError: missing, truncated, or of another version."""
    from ..codegen.nvrtc import CUDABinary
    from .artifact import read_device_artifact
    m, data, params = read_device_artifact(path, ARTIFACT_VERSION, "CUDA", (
        "binary.json", "kernels.cu", "graph.txt"))
    try:
        binary = CUDABinary.from_bytes(data["binary.json"])
    except (KeyError, json.JSONDecodeError, ValueError) as e:
        raise ArtifactError(f"{path} is not a readable ember CUDA artifact: "
                            f"{type(e).__name__}: {e}") from None
    return CUDAModel(m["plan"], params, m["steps"], binary, data["kernels.cu"].decode(),
                     data["graph.txt"].decode(), m["target"], m["info"])


def _nvtx_range(message: str):
    """An NVTX range (the ``nvtx`` package, ember's ``cuda`` extra) in domain ``ember``, or a
    no-op context when the package is not installed."""
    try:
        import nvtx
    except ImportError:
        import contextlib
        return contextlib.nullcontext()
    return nvtx.annotate(message, domain="ember")


def _np_dtype(dtype: str):
    from ..dtypes import np_dtype
    return np_dtype(dtype)


def _nbytes(slot: dict) -> int:
    return int(np.prod(slot["shape"], dtype=np.int64)) * _np_dtype(slot["dtype"]).itemsize


__all__ = ["CUDAModel", "NO_GPU", "is_cuda_artifact", "load_cuda_artifact"]
