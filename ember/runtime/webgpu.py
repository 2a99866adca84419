"""The WebGPU runtime (on the ``wgpu`` package, wgpu-py): ``WebGPUModel`` runs a model compiled
for ``Target("webgpu")``.

At load: an adapter is chosen (``get_device``: high-performance preference; lavapipe, Mesa's
CPU Vulkan driver, where no GPU is present) and its limits are checked against every kernel
(threads per workgroup, workgroup memory, bindings per shader, binding size); the weights are
uploaded once into one device buffer; intermediates live in one device arena laid out by the
CPU's liveness planner (``memory_plan.plan_memory``, 256-byte aligned offsets); each kernel's
pipeline and bind group are created once. ``run`` copies the inputs in, records every dispatch
of one inference into one command buffer (one compute pass: WebGPU orders the dispatches and
makes each one's writes visible to the next), copies the outputs back and maps them: the only
host copies are the model's inputs and outputs.

Kernels with index checks (gathers) get a check shader before them that sets a status word
when an index is out of range; ``run`` raises ``InputError`` naming the node after the command
buffer completes (as the CPU kernel's status does), never returning what the clamped reads
computed. Kernels computing int64 values that may leave the int32 range WebGPU computes them in
bind the same status word and set it to ``STATUS_INT64_OVERFLOW``; ``run`` raises
``InputError`` naming the node (never the wrapped value).

Tensors are stored in 32-bit words (``ember.codegen.wgsl``): ``int64`` inputs are narrowed to
``int32`` after a range check (``InputError`` when a value does not fit), ``bool`` and 8/16-bit
integers are widened; outputs are converted back to their dtype.
"""

from __future__ import annotations

import time
from typing import Mapping

import numpy as np

from ..errors import CodegenError, DeviceError, InputError
from ..codegen.wgsl import STATUS_INT64_OVERFLOW
from .module import CompiledModel

NO_ADAPTER = ("no WebGPU adapter: install mesa-vulkan-drivers (lavapipe, Mesa's software Vulkan "
              "driver: `apt-get install -y mesa-vulkan-drivers libvulkan1`) or a GPU's Vulkan "
              "driver, and the wgpu package (`pip install wgpu`, ember's 'webgpu' extra)")
OFFSET_ALIGN = 256  # WebGPU's minStorageBufferOffsetAlignment may be up to 256

# dtype -> numpy dtype of its 32-bit storage word
STORAGE = {"float32": np.float32, "int32": np.int32, "uint32": np.uint32, "int64": np.int32,
           "int16": np.int32, "int8": np.int32, "uint16": np.uint32, "uint8": np.uint32,
           "bool": np.uint32}

_DEVICE = None


def storage_nbytes(slot: dict) -> int:
    """Bytes a plan slot takes on the device (4 per element, at least 4)."""
    n = int(np.prod(slot["shape"], dtype=np.int64))
    return max(4, 4 * n)


def get_device():
    """``(adapter, device)``, created once per process: the high-performance adapter, with a
    device asking for the adapter's own limits on buffers, bindings and workgroups.

    Raises:
        DeviceError: no adapter (the message says how to install one) or no ``wgpu``."""
    global _DEVICE
    if _DEVICE is not None:
        return _DEVICE
    try:
        import wgpu
    except ImportError as e:
        raise DeviceError(f"{NO_ADAPTER} ({e})") from None
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as e:  # wgpu raises RuntimeError-like errors when none is found
        raise DeviceError(f"{NO_ADAPTER} ({type(e).__name__}: {e})") from None
    if adapter is None:
        raise DeviceError(NO_ADAPTER)
    lim = adapter.limits
    want = {k: lim[k] for k in (
        "max-storage-buffer-binding-size", "max-buffer-size",
        "max-storage-buffers-per-shader-stage", "max-compute-invocations-per-workgroup",
        "max-compute-workgroup-storage-size", "max-compute-workgroup-size-x",
        "max-compute-workgroup-size-y", "max-compute-workgroup-size-z") if k in lim}
    features = [f for f in ("timestamp-query",) if f in adapter.features]
    try:
        device = adapter.request_device_sync(required_limits=want, required_features=features)
    except Exception as e:
        raise DeviceError(f"WebGPU adapter {adapter.info.get('device', '?')}: cannot create a "
                          f"device ({type(e).__name__}: {e})") from None
    _DEVICE = (adapter, device)
    return _DEVICE


def adapter_info() -> dict:
    """The chosen adapter's description (``device``, ``adapter_type``, ``backend_type``...).

    Raises:
        DeviceError: no adapter."""
    adapter, _ = get_device()
    return dict(adapter.info)


class WebGPUModel:
    """A model compiled for ``Target("webgpu")`` (built by ``ember.build``/``ember.compile``).

    ``run(feeds)`` takes ``{input name: array}`` (names, shapes and dtypes of ``input_names``,
    ``input_shapes``, ``input_dtypes``) and returns the outputs as NumPy arrays.

    Args (internal, from the driver):
        plan: the execution plan (``driver._plan``) with 256-aligned arena offsets in
            device bytes.
        params: weight name -> array.
        steps: per plan step, ``(workspace bytes per buffer, [WGSLKernel])``.
        graph_text, target, info: as ``CompiledModel``'s.

    Raises:
        DeviceError: no adapter, or a kernel or tensor beyond the adapter's limits.
        CodegenError: the adapter rejects a shader (the message holds its source).
    """

    def __init__(self, plan: dict, params: Mapping[str, np.ndarray], steps: list,
                 graph_text: str, target: str, info: dict):
        self.plan, self.graph_text, self.target, self.info = plan, graph_text, target, info
        self.steps = steps
        self.params = {k: np.asarray(v) for k, v in params.items()}
        adapter, self.device = get_device()
        self.info["adapter"] = adapter.info.get("device", "?")
        self._setup(adapter)

    # layout -------------------------------------------------------------------------------------
    def _setup(self, adapter) -> None:
        import wgpu
        lim = self.device.limits
        max_bind = lim["max-storage-buffer-binding-size"]
        slots = self.plan["slots"]
        for k, s in enumerate(slots):
            if s["kind"] != "unused" and storage_nbytes(s) > max_bind:
                users = [f"node {st['name']} ({st['op']})" for st in self.plan["steps"]
                         if k in st["args"]][:2]
                raise DeviceError(f"tensor of shape {s['shape']} {s['dtype']}"
                                  + (f" of {' and '.join(users)}" if users else "")
                                  + f" takes {storage_nbytes(s)} bytes, above the adapter's "
                                  f"max-storage-buffer-binding-size={max_bind} "
                                  f"({self.info['adapter']}); use smaller shapes, the CPU "
                                  f"target, or (a dense weight) the target "
                                  f"'webgpu -max_storage_buffer_binding_size={max_bind}' so "
                                  f"that the SplitDense pass splits it")
        usage = (wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
                 | wgpu.BufferUsage.COPY_SRC)
        self.where: dict[int, tuple] = {}  # slot -> (buffer name, offset)
        woff = 0
        for k, s in enumerate(slots):
            if s["kind"] == "param":
                self.where[k] = ("weights", woff)
                woff += _round(storage_nbytes(s))
        ioff = 0
        for inp in self.plan["inputs"]:
            self.where[inp["slot"]] = ("inputs", ioff)
            ioff += _round(storage_nbytes(slots[inp["slot"]]))
        for k, s in enumerate(slots):
            if s["kind"] == "arena":
                self.where[k] = ("arena", s["offset"])
        ws_total = max([sum(_round(n) for n in ws) for ws, _ in self.steps] + [4])
        # one status word per index-checked step (gathers: out-of-range indices)
        self.checked = [k for k, (_, kernels) in enumerate(self.steps)
                        if any(b[0] == "status" for kern in kernels for b in kern.bindings)]
        sizes = {"weights": woff, "inputs": ioff, "arena": self.plan["arena_bytes"],
                 "workspace": ws_total, "status": OFFSET_ALIGN * max(1, len(self.checked))}
        for name, n in sizes.items():
            if n > lim["max-buffer-size"]:
                raise DeviceError(f"the model's {name} take {n} bytes, above the adapter's "
                                  f"max-buffer-size={lim['max-buffer-size']} "
                                  f"({self.info['adapter']})")
        self.buffers = {name: self.device.create_buffer(size=max(_round(n), OFFSET_ALIGN),
                                                        usage=usage)
                        for name, n in sizes.items()}
        for k, s in enumerate(slots):  # weights uploaded once
            if s["kind"] == "param":
                data = _to_storage(np.asarray(self.params[s["param"]]), s["dtype"],
                                   f"weight {s['param']}")
                self.device.queue.write_buffer(self.buffers["weights"], self.where[k][1], data)
        self.info["device_bytes"] = sum(sizes.values())
        self._pipelines: dict[str, object] = {}
        self.dispatches = []
        for k, (st, (ws, kernels)) in enumerate(zip(self.plan["steps"], self.steps)):
            ws_off, o = [], 0
            for n in ws:
                ws_off.append(o)
                o += _round(n)
            status = self.checked.index(k) * OFFSET_ALIGN if k in self.checked else 0
            for kern in kernels:
                self.dispatches.append(self._dispatch(st, ws, ws_off, kern, lim, status))
        out_bytes = sum(_round(storage_nbytes(slots[o["slot"]])) for o in self.plan["outputs"])
        out_bytes += OFFSET_ALIGN * len(self.checked)
        self.readback = self.device.create_buffer(
            size=max(out_bytes, OFFSET_ALIGN),
            usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)

    def _dispatch(self, st, ws, ws_off, kern, lim, status_off=0):
        import wgpu
        where = f"kernel of node {st['name']} ({st['op']})"
        threads = kern.workgroup_size[0] * kern.workgroup_size[1] * kern.workgroup_size[2]
        checks = [("max-compute-invocations-per-workgroup", threads),
                  ("max-compute-workgroup-storage-size", kern.shared_bytes),
                  ("max-storage-buffers-per-shader-stage", len(kern.bindings))]
        for key, need in checks:
            if key in lim and need > lim[key]:
                raise DeviceError(f"{where}: needs {key}={need}, the adapter "
                                  f"({self.info['adapter']}) allows {lim[key]}")
        pipe = self._pipelines.get(kern.source)
        if pipe is None:
            try:
                sm = self.device.create_shader_module(code=kern.source)
                pipe = self.device.create_compute_pipeline(
                    layout="auto", compute={"module": sm, "entry_point": "main"})
            except Exception as e:
                raise CodegenError(f"{where}: the WebGPU adapter rejects its WGSL: {e}",
                                   source=kern.source) from None
            self._pipelines[kern.source] = pipe
        entries = []
        for n, (kind, i) in enumerate(kern.bindings):
            if kind == "param":
                slot = st["args"][i]
                buf, off = self.where[slot]
                size = storage_nbytes(self.plan["slots"][slot])
            elif kind == "status":
                buf, off, size = "status", status_off, 4
            else:
                buf, off, size = "workspace", ws_off[i], max(4, ws[i])
            entries.append({"binding": n, "resource": {"buffer": self.buffers[buf],
                                                       "offset": off, "size": _round4(size)}})
        if kern.uniform:
            ub = self.device.create_buffer_with_data(
                data=np.array(kern.uniform + [0] * (4 - len(kern.uniform)), np.uint32),
                usage=wgpu.BufferUsage.UNIFORM)
            entries.append({"binding": len(kern.bindings), "resource": {"buffer": ub}})
        bg = self.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
        return pipe, bg, kern.dispatch, st


    # public API ---------------------------------------------------------------------------------
    # the plan's inputs and outputs, as a CompiledModel describes them
    input_names = CompiledModel.input_names
    input_shapes = CompiledModel.input_shapes
    input_dtypes = CompiledModel.input_dtypes
    output_names = CompiledModel.output_names
    random_inputs = CompiledModel.random_inputs

    def _check_inputs(self, inputs) -> dict:
        if isinstance(inputs, np.ndarray) and len(self.input_names) == 1:
            inputs = [inputs]
        if not isinstance(inputs, Mapping):
            inputs = dict(zip(self.input_names, inputs))
        unknown = sorted(set(inputs) - set(self.input_names))
        missing = [n for n in self.input_names if n not in inputs]
        if unknown or missing:
            raise InputError(f"inputs: missing {missing}, unknown {unknown}; the model takes "
                             f"{self.input_names}")
        out = {}
        for i in self.plan["inputs"]:
            a = np.asarray(inputs[i["name"]])
            if tuple(a.shape) != tuple(i["shape"]):
                raise InputError(f"input {i['name']}: shape {a.shape}, the model was compiled "
                                 f"for {tuple(i['shape'])}")
            if str(a.dtype) != i["dtype"]:
                raise InputError(f"input {i['name']}: dtype {a.dtype}, expected {i['dtype']}")
            out[i["name"]] = a
        return out

    def run(self, inputs) -> list[np.ndarray]:
        """Run one inference on the device: ``{name: array}`` (or a list in input order) ->
        the outputs, in order.

        Raises:
            InputError: unknown/missing inputs, wrong shapes or dtypes, an int64 value outside
                the int32 range the device stores."""
        arrays = self._check_inputs(inputs)
        q = self.device.queue
        for i in self.plan["inputs"]:
            buf, off = self.where[i["slot"]]
            q.write_buffer(self.buffers[buf], off,
                           _to_storage(arrays[i["name"]], i["dtype"], f"input {i['name']}"))
        if self.checked:
            q.write_buffer(self.buffers["status"], 0,
                           np.zeros(OFFSET_ALIGN // 4 * len(self.checked), np.uint32))
        enc = self.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for pipe, bg, disp, _ in self.dispatches:
            if 0 in disp:
                continue
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, bg)
            cp.dispatch_workgroups(*disp)
        cp.end()
        self._copy_out(enc)
        return self._read_out()

    def _copy_out(self, enc) -> None:
        """Record the copies of the outputs (and index-check status words) into the mappable
        buffer and submit ``enc``."""
        roff, places = 0, []
        for o in self.plan["outputs"]:
            s = self.plan["slots"][o["slot"]]
            buf, off = self.where[o["slot"]]
            n = storage_nbytes(s)
            enc.copy_buffer_to_buffer(self.buffers[buf], off, self.readback, roff, _round4(n))
            places.append((roff, s))
            roff += _round(n)
        if self.checked:
            enc.copy_buffer_to_buffer(self.buffers["status"], 0, self.readback, roff,
                                      OFFSET_ALIGN * len(self.checked))
        self._places, self._status_off = places, roff
        self.device.queue.submit([enc.finish()])

    def _read_out(self) -> list[np.ndarray]:
        places, roff = self._places, self._status_off
        self.readback.map_sync("read")
        try:
            raw = np.frombuffer(self.readback.read_mapped(), np.uint8).copy()
        finally:
            self.readback.unmap()
        for j, k in enumerate(self.checked):
            word = raw[roff + j * OFFSET_ALIGN:roff + j * OFFSET_ALIGN + 4].view(np.uint32)[0]
            if word == STATUS_INT64_OVERFLOW:
                st = self.plan["steps"][k]
                raise InputError(f"node {st['name']!r} ({st['op']}, kernel "
                                 f"{st.get('symbol', '?')}): an int64 value it computes left "
                                 f"the 32-bit range WebGPU computes int64 in (WGSL has no "
                                 f"64-bit integers; [-2^31, 2^31-1]); use int32 inputs in "
                                 f"range, or compile for the CPU target")
            if word:
                from ..codegen.c import STATUS_INDEX_OUT_OF_RANGE
                from .executor import kernel_failure
                raise kernel_failure(self.plan["steps"][k], STATUS_INDEX_OUT_OF_RANGE)
        outs = []
        for roff, s in places:
            n = int(np.prod(s["shape"], dtype=np.int64))
            words = raw[roff:roff + 4 * n].view(STORAGE[s["dtype"]])
            outs.append(_from_storage(words, s["dtype"]).reshape(s["shape"]))
        return outs

    def timestamp_samples(self, inputs, repeat: int = 10, warmup: int = 2):
        """Per-step device times from WebGPU timestamp queries (one compute pass per dispatch,
        its begin and end stamped): ``(samples, end_to_end_ms)`` where ``samples`` holds, per
        timed run, ``[(start_us, duration_us)]`` per plan step (a step's dispatches summed;
        start relative to the run's first dispatch) and ``end_to_end_ms`` the median ``run``
        time. Used by ``ember.runtime.profiler.profile`` (``ember profile --target webgpu``).

        Raises:
            DeviceError: the adapter has no ``timestamp-query`` feature."""
        import wgpu
        if "timestamp-query" not in self.device.features:
            raise DeviceError(f"the WebGPU adapter {self.info['adapter']} has no "
                              f"timestamp-query feature: per-kernel times are not available "
                              f"(time the whole model with `ember run --repeat N`)")
        n = len(self.dispatches)
        qs = self.device.create_query_set(type="timestamp", count=2 * n)
        res = self.device.create_buffer(size=16 * n, usage=wgpu.BufferUsage.QUERY_RESOLVE
                                        | wgpu.BufferUsage.COPY_SRC)
        steps = {id(st): k for k, st in enumerate(self.plan["steps"])}
        samples, e2e = [], []
        for it in range(warmup + repeat):
            self.run(inputs)  # writes the inputs; the timed passes below reuse them
            enc = self.device.create_command_encoder()
            for i, (pipe, bg, disp, _) in enumerate(self.dispatches):
                cp = enc.begin_compute_pass(timestamp_writes={
                    "query_set": qs, "beginning_of_pass_write_index": 2 * i,
                    "end_of_pass_write_index": 2 * i + 1})
                if 0 not in disp:
                    cp.set_pipeline(pipe)
                    cp.set_bind_group(0, bg)
                    cp.dispatch_workgroups(*disp)
                cp.end()
            enc.resolve_query_set(qs, 0, 2 * n, res, 0)
            self.device.queue.submit([enc.finish()])
            ts = np.frombuffer(self.device.queue.read_buffer(res), np.uint64).astype(np.float64)
            if it < warmup:
                continue
            t0 = ts[0]
            run = [[None, 0.0] for _ in self.plan["steps"]]
            for i, (_, _, _, st) in enumerate(self.dispatches):
                r = run[steps[id(st)]]
                if r[0] is None:
                    r[0] = (ts[2 * i] - t0) / 1e3
                r[1] += max(0.0, ts[2 * i + 1] - ts[2 * i]) / 1e3
            samples.append([(a or 0.0, b) for a, b in run])
            t = time.perf_counter()
            self.run(inputs)
            e2e.append((time.perf_counter() - t) * 1e3)
        return samples, float(np.median(e2e))

    def benchmark(self, inputs, number: int = 20, warmup: int = 3) -> dict:
        """Latency statistics of ``run`` in ms (``median_ms``, ``mean_ms``, ``min_ms``), inputs
        and outputs copied each run."""
        from .executor import benchmark
        return benchmark(lambda: self.run(inputs), number, warmup)

    def save(self, path) -> None:
        """Write the model to ``path`` (a zip, atomically): the WGSL of every kernel with its
        launch and bindings, the plan (arena layout, steps), the weights and the graph text.
        ``ember.load(path)`` (or ``load_webgpu_artifact``) rebuilds the pipelines on this
        machine's adapter, without compiling again.

        Raises:
            ArtifactError: the path cannot be written."""
        from dataclasses import asdict
        from .artifact import write_device_artifact
        steps = [[list(ws), [asdict(k) for k in kernels]] for ws, kernels in self.steps]
        info = {k: v for k, v in self.info.items() if isinstance(v, (int, float, str, bool))}
        manifest = {"format": ARTIFACT_FORMAT, "version": ARTIFACT_VERSION,
                    "target": self.target, "plan": self.plan, "steps": steps, "info": info,
                    "param_names": list(self.params)}
        write_device_artifact(path, manifest, {"graph.txt": self.graph_text}, self.params)


ARTIFACT_FORMAT = "ember-webgpu-artifact"
ARTIFACT_VERSION = 1


def is_webgpu_artifact(manifest: dict) -> bool:
    """True for the manifest of an artifact ``WebGPUModel.save`` wrote."""
    return manifest.get("format") == ARTIFACT_FORMAT


def load_webgpu_artifact(path) -> WebGPUModel:
    """A ``WebGPUModel`` from an artifact ``WebGPUModel.save`` wrote: its WGSL, plan and
    weights go to this machine's adapter (pipelines are created, nothing is compiled again).

    Raises:
        ArtifactError: missing, truncated, or of another version.
        DeviceError: no adapter, or a kernel or tensor beyond this adapter's limits."""
    from ..codegen.wgsl import WGSLKernel
    from ..errors import ArtifactError
    from .artifact import read_device_artifact
    m, data, params = read_device_artifact(path, ARTIFACT_VERSION, "WebGPU", ("graph.txt",))
    try:
        steps = [(list(ws), [WGSLKernel(k["source"], [tuple(b) for b in k["bindings"]],
                                        tuple(k["dispatch"]), tuple(k["workgroup_size"]),
                                        list(k["uniform"]), int(k["shared_bytes"]))
                             for k in kernels]) for ws, kernels in m["steps"]]
        graph = data["graph.txt"].decode()
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{path} is not a readable ember WebGPU artifact: "
                            f"{type(e).__name__}: {e}") from None
    return WebGPUModel(m["plan"], params, steps, graph, m["target"], dict(m["info"]))


def _round(n: int) -> int:
    return -(-max(int(n), 4) // OFFSET_ALIGN) * OFFSET_ALIGN


def _round4(n: int) -> int:
    return -(-max(int(n), 4) // 4) * 4


def _to_storage(a: np.ndarray, dtype: str, what: str) -> np.ndarray:
    """``a`` as its 32-bit storage words (int64 range-checked)."""
    a = np.asarray(a)
    st = STORAGE.get(dtype)
    if st is None:
        raise CodegenError(f"{what}: dtype {dtype} cannot be stored on a WebGPU device")
    if dtype == "int64" and a.size:
        lo, hi = int(a.min()), int(a.max())
        if lo < -2**31 or hi > 2**31 - 1:
            raise InputError(f"{what}: int64 values in [{lo}, {hi}] do not fit the int32 a "
                             f"WebGPU device stores int64 tensors in (WGSL has no 64-bit "
                             f"integers)")
    out = np.ascontiguousarray(a.astype(st))
    if out.size == 0:
        return np.zeros(1, st)
    return out.reshape(-1)


def _from_storage(words: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return words != 0
    return words.astype(dtype)


__all__ = ["ARTIFACT_FORMAT", "NO_ADAPTER", "WebGPUModel", "adapter_info", "get_device",
           "is_webgpu_artifact", "load_webgpu_artifact", "storage_nbytes"]
