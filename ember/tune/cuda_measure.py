"""Tuning CUDA kernels: a builder that compiles candidates with NVRTC (any machine) and a runner
that times them on the GPU (a machine with an NVIDIA GPU and its driver).

    from ember.tune import measure_option
    from ember.tune.cuda_measure import CUDABuilder, CUDARunner
    option = measure_option(builder=CUDABuilder(), runner=CUDARunner())

Candidates come from the usual templates and tasks: the ``rule`` template over a CUDA
kernel's default rule knobs (``cuda_tensorcore_rule``: ``warp_tile``, ``warps`` — the threads
per block — and ``unroll``; ``RULE_KNOBS``), with ``Task("rule", [workload key, target],
target)``. ``CUDABuilder.build`` instantiates each configuration, prints its CUDA C
(``codegen.cuda.emit_cuda``), builds PTX and the target's cubin (``codegen.nvrtc.build_cuda``,
cached) and refuses kernels over the target's registers, spills or shared memory
(``check_resources``: a ``COMPILE_HOST`` error naming the kernel). The result's ``lib`` is a
JSON file with the CUDA C, the cubin, the launches and the kernel's parameter specs.

``CUDARunner.run`` loads each cubin on GPU 0, fills the parameters with seeded random data,
launches the kernels ``number`` times between two CUDA events per repeat (float32 inputs of a
mixed-precision kernel rounded to its low dtype first, as ToMixedPrecision's producers
guarantee), and checks the
output against the task's reference kernel run on the CPU (``WRONG_ANSWER`` beyond
``rtol`` / ``atol``). The results are ``MeasureResult``s, so the tuners, ``log_to_file`` and
``apply_history_best`` handle CUDA records exactly as CPU ones (the record's ``target`` is the
CUDA target). Without a driver or GPU, ``run`` raises ``DeviceError`` (``NO_GPU``): candidate
generation and builds work anywhere, measurement needs the GPU (``bench/gpu.py`` runs on one).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Sequence

import numpy as np

from ..errors import EmberError
from .measure import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult, kernel_specs


class CUDABuilder:
    """Builds CUDA candidates with NVRTC / nvJitLink (see the module doc). ``out_dir``: where
    the built candidates' JSON files go (a temporary folder by default)."""

    def __init__(self, out_dir: str | None = None):
        self.out_dir = out_dir or tempfile.mkdtemp(prefix="ember-cuda-tune-")

    def _build_one(self, inp: MeasureInput) -> BuildResult:
        from ..codegen.cuda import emit_cuda, emit_index_checks, module_source
        from ..codegen.nvrtc import build_cuda, check_resources
        from ..dtypes import itemsize
        t0 = time.perf_counter()
        target = inp.task.target
        try:
            func = inp.task.instantiate(inp.config)
            specs, n_in = kernel_specs(func)
        except Exception as e:  # noqa: BLE001 - a broken candidate is a result, not a crash
            return BuildResult(error_no=MeasureErrorNo.INSTANTIATION_ERROR,
                               error_msg=f"{type(e).__name__}: {e}",
                               time_cost=time.perf_counter() - t0)
        try:
            ws, kernels = emit_cuda(func, target)
            kernels = emit_index_checks(func) + kernels
            binary = build_cuda(module_source(kernels), [target.attr("arch")],
                                name=f"tune_{func.name}")
            check_resources(binary, {k.name: (f"candidate {inp.config}", int(np.prod(k.block)))
                                     for k in kernels}, target)
        except EmberError as e:
            return BuildResult(error_no=MeasureErrorNo.COMPILE_HOST, error_msg=str(e)[:2000],
                               time_cost=time.perf_counter() - t0)
        src = module_source(kernels)
        doc = {"source": src, "binary": binary.to_bytes().decode(), "specs": [[list(s), d] for s, d in specs],
               "num_inputs": n_in, "mixed_precision": func.attrs.get("mixed_precision"),
               "workspace": [b.alloc_size * itemsize(b.dtype) for b in ws],
               "kernels": [{"name": k.name, "args": [list(a) for a in k.args],
                            "grid": list(k.grid), "block": list(k.block)} for k in kernels]}
        fd, path = tempfile.mkstemp(suffix=".cuda.json", dir=self.out_dir)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        return BuildResult(lib=path, specs=specs, num_inputs=n_in,
                           time_cost=time.perf_counter() - t0, program="cuda")

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        """Build every candidate (errors are reported in the results)."""
        return [self._build_one(i) for i in inputs]


class CUDARunner:
    """Times built CUDA candidates on GPU 0 (see the module doc): ``number`` launches per
    timing, ``repeat`` timings (seconds per launch each), outputs checked at ``rtol`` /
    ``atol`` against the reference (float16 tensor-core sums: 1e-2)."""

    def __init__(self, number: int = 10, repeat: int = 3, rtol: float = 1e-2,
                 atol: float = 1e-2, seed: int = 0):
        self.number, self.repeat, self.rtol, self.atol, self.seed = number, repeat, rtol, \
            atol, seed
        self._refs: dict = {}

    def _reference(self, task, arrays: list) -> np.ndarray:
        from ..runtime.kernel import compile_prim_func
        if task.key not in self._refs:
            self._refs[task.key] = compile_prim_func(task.reference(), "llvm").run(
                list(arrays))[-1]
        return self._refs[task.key]

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]
            ) -> list[MeasureResult]:
        """One ``MeasureResult`` per candidate.

        Raises:
            DeviceError: no CUDA driver / no GPU (``ember.runtime.cuda.NO_GPU``)."""
        from ..runtime.cuda import _driver
        cu = _driver()  # DeviceError without a driver or GPU: measurement needs the GPU
        out = []
        for inp, b in zip(inputs, builds):
            t0 = time.perf_counter()
            if b.error_no != MeasureErrorNo.NO_ERROR:
                out.append(MeasureResult([], b.error_no, b.error_msg, b.time_cost,
                                         time.time()))
                continue
            try:
                costs, got, arrays = self._measure(cu, b)
                want = self._reference(inp.task, arrays)
                if not np.allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=self.rtol, atol=self.atol, equal_nan=True):
                    err = float(np.max(np.abs(got.astype(np.float64) - want)))
                    out.append(MeasureResult([], MeasureErrorNo.WRONG_ANSWER,
                                             f"max abs error {err:.3g}",
                                             b.time_cost + time.perf_counter() - t0,
                                             time.time()))
                    continue
                out.append(MeasureResult(costs, MeasureErrorNo.NO_ERROR, "",
                                         b.time_cost + time.perf_counter() - t0, time.time()))
            except EmberError as e:
                out.append(MeasureResult([], MeasureErrorNo.RUNTIME_DEVICE, str(e)[:2000],
                                         b.time_cost + time.perf_counter() - t0, time.time()))
        return out

    def _measure(self, cu, b: BuildResult):
        """``(seconds per launch per repeat, output array, input arrays)`` of one candidate."""
        from ..codegen.nvrtc import CUDABinary
        from ..runtime.cuda import _ok
        doc = json.loads(open(b.lib).read())
        binary = CUDABinary.from_bytes(doc["binary"].encode())
        dev = _ok(cu, cu.cuDeviceGet(0), "cuDeviceGet")
        ctx = _ok(cu, cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _ok(cu, cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        A = cu.CUdevice_attribute
        arch = "sm_{}{}".format(
            _ok(cu, cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                "attribute"),
            _ok(cu, cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                "attribute"))
        image = binary.cubins.get(arch, binary.ptx.encode() + b"\0")
        module = _ok(cu, cu.cuModuleLoadData(image), f"loading the candidate on {arch}")
        rng = np.random.default_rng(self.seed)
        arrays = []
        from ..dtypes import np_dtype
        low = doc.get("mixed_precision")
        for shape, dtype in doc["specs"][:doc["num_inputs"]]:
            a = rng.standard_normal(shape).astype(np.float32)
            if low and dtype == "float32":  # a mixed-precision kernel's inputs hold low values
                a = a.astype(np_dtype(low)).astype(np.float32)
            arrays.append(a.astype(np_dtype(dtype)))
        oshape, odtype = doc["specs"][-1]
        odtype = np_dtype(odtype)
        host = arrays + [np.zeros(sh, np_dtype(dt)) for sh, dt in doc["specs"][doc["num_inputs"]:]]
        ptrs, allocs = [], []
        try:
            for a in host + [np.zeros(n, np.uint8) for n in doc["workspace"]] + \
                    [np.zeros(4, np.int32)]:
                p = _ok(cu, cu.cuMemAlloc(max(a.nbytes, 1)), "cuMemAlloc")
                allocs.append(p)
                if a.nbytes:
                    _ok(cu, cu.cuMemcpyHtoD(p, np.ascontiguousarray(a), a.nbytes), "upload")
                ptrs.append(int(p))
            nparam, nws = len(host), len(doc["workspace"])
            launches, keep = [], []
            for k in doc["kernels"]:
                fn = _ok(cu, cu.cuModuleGetFunction(module, k["name"].encode()), k["name"])
                addr = [ptrs[i] if kind == "param" else ptrs[nparam + i] if kind == "workspace"
                        else ptrs[nparam + nws] for kind, i in k["args"]]
                vals = [np.array([p], np.uint64) for p in addr]
                args = np.array([v.ctypes.data for v in vals], np.uint64)
                keep += [vals, args]
                launches.append((fn, k["grid"], k["block"], args))
            start = _ok(cu, cu.cuEventCreate(0), "cuEventCreate")
            end = _ok(cu, cu.cuEventCreate(0), "cuEventCreate")

            def launch_all():
                for fn, grid, block, args in launches:
                    _ok(cu, cu.cuLaunchKernel(fn, *grid, *block, 0, 0, args.ctypes.data, 0),
                        "cuLaunchKernel")
            launch_all()
            _ok(cu, cu.cuCtxSynchronize(), "running the candidate")
            costs = []
            for _ in range(self.repeat):
                _ok(cu, cu.cuEventRecord(start, 0), "cuEventRecord")
                for _ in range(self.number):
                    launch_all()
                _ok(cu, cu.cuEventRecord(end, 0), "cuEventRecord")
                _ok(cu, cu.cuEventSynchronize(end), "cuEventSynchronize")
                ms = _ok(cu, cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")
                costs.append(float(ms) / 1e3 / self.number)
            got = np.zeros(oshape, odtype)
            _ok(cu, cu.cuMemcpyDtoH(got, allocs[nparam - 1], got.nbytes), "download")
            cu.cuEventDestroy(start)
            cu.cuEventDestroy(end)
            return costs, got, arrays
        finally:
            for p in allocs:
                cu.cuMemFree(p)
            cu.cuModuleUnload(module)


__all__ = ["CUDABuilder", "CUDARunner"]
