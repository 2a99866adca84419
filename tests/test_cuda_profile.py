"""``ember profile --target cuda`` without a GPU.

- With no driver or GPU, ``profile`` and the CLI give the typed ``DeviceError``.
- The profiling code path itself (``CUDAModel._open``: module load, allocation, CUDA-graph
  capture; ``timestamp_samples``: CUDA events around each plan step, NVTX ranges named after
  the graph nodes) runs against a stand-in for ``cuda.bindings.driver`` that records the calls
  and ticks a clock per launch: what is checked is ember's sequence of driver calls (every
  plan step's kernels between its own two events, every range named ``node (op)``, the events'
  times turned into the report's per-kernel times), not CUDA's behaviour, which only a GPU
  shows (``bench/gpu.py``).
"""

import ctypes
import ctypes.util
import types

import numpy as np
import onnx
import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra (cuda-bindings, NVRTC) is not "
                                                  "installed")

import ember  # noqa: E402
import ember.runtime.cuda as rcuda  # noqa: E402
from ember.errors import DeviceError  # noqa: E402
from ember.runtime.profiler import profile  # noqa: E402

from test_cuda import H200, small_cnn  # noqa: E402


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None,
                    reason="an NVIDIA driver is installed: the no-GPU path cannot be seen here")
def test_profile_without_a_gpu_is_a_device_error(tmp_path, capsys):
    cm = ember.compile(small_cnn(), target=H200)
    with pytest.raises(DeviceError, match="no CUDA driver / no GPU"):
        profile(cm, {"x": np.zeros((1, 3, 8, 8), np.float32)})
    from ember.cli import main
    src = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), src)
    assert main(["profile", str(src), "--target", H200]) == 2
    assert "DeviceError: no CUDA driver / no GPU" in capsys.readouterr().err


class FakeDriver:
    """The part of ``cuda.bindings.driver`` that ``CUDAModel`` uses, recording calls."""

    class CUresult:
        CUDA_SUCCESS = 0
        CUDA_ERROR_OUT_OF_MEMORY = 2

    CUdevice_attribute = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR=1,
                                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=2)
    CUstream_flags = types.SimpleNamespace(CU_STREAM_NON_BLOCKING=types.SimpleNamespace(value=1))
    CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=0)

    def __init__(self):
        self.log, self.clock, self.events, self.host = [], 0.0, {}, []
        self.capturing = False

    @staticmethod
    def CUdeviceptr(x):  # noqa: N802
        return x

    def __getattr__(self, name):  # every other call succeeds and returns nothing
        return lambda *a: (0, None)

    def cuDeviceGetAttribute(self, attr, dev):  # noqa: N802
        return 0, (9 if attr == 1 else 0)

    def cuModuleLoadData(self, image):  # noqa: N802
        self.log.append(("load", bytes(image[:4])))
        return 0, "module"

    def cuModuleGetFunction(self, module, name):  # noqa: N802
        return 0, name.decode()

    def cuMemAlloc(self, n):  # noqa: N802
        return 0, 1 << 20

    def cuMemHostAlloc(self, n, flags):  # noqa: N802
        buf = ctypes.create_string_buffer(n)
        self.host.append(buf)
        return 0, ctypes.addressof(buf)

    def cuStreamBeginCapture(self, *a):  # noqa: N802
        self.capturing = True
        return (0,)

    def cuStreamEndCapture(self, *a):  # noqa: N802
        self.capturing = False
        return 0, "graph"

    def cuLaunchKernel(self, fn, *rest):  # noqa: N802
        self.log.append(("launch", fn, self.capturing))
        self.clock += 0.25  # ms per launch
        return (0,)

    def cuEventCreate(self, flags):  # noqa: N802
        ev = f"ev{len(self.events)}"
        self.events[ev] = None
        return 0, ev

    def cuEventRecord(self, ev, stream):  # noqa: N802
        self.events[ev] = self.clock
        self.log.append(("event", ev))
        return (0,)

    def cuEventElapsedTime(self, a, b):  # noqa: N802
        return 0, self.events[b] - self.events[a]


def test_profile_path_with_a_stand_in_driver(monkeypatch):
    cm = ember.compile(small_cnn(), target=H200)
    fake = FakeDriver()
    monkeypatch.setattr(rcuda, "_driver", lambda: fake)
    ranges = []

    class Range:
        def __init__(self, msg):
            self.msg = msg

        def __enter__(self):
            ranges.append(self.msg)

        def __exit__(self, *a):
            return False
    monkeypatch.setattr(rcuda, "_nvtx_range", Range)
    rep = profile(cm, {"x": np.zeros((1, 3, 8, 8), np.float32)}, repeat=3, warmup=1)
    steps = cm.plan["steps"]
    launched = [k for st in cm.steps for k in st["kernels"] if 0 not in k["grid"]]
    # the graph capture launched each kernel once, inside its node's range
    captured = [e for e in fake.log if e[0] == "launch" and e[2]]
    assert [e[1] for e in captured] == [k["name"] for k in launched]
    assert ranges[:len(steps)] == [f"{st['name']} ({st['op']})" for st in steps]
    assert ("load", b"\x7fELF") in fake.log  # the sm_90 cubin, not the PTX
    # per timed run: 0.25 ms per kernel launch between the step's two events
    per_step = [sum(1 for k in st["kernels"] if 0 not in k["grid"]) for st in cm.steps]
    assert [k.name for k in rep.kernels] == [st["name"] for st in steps]
    assert [k.ms for k in rep.kernels] == pytest.approx([0.25 * n for n in per_step])
    run = rep.samples[0]
    assert run[0][0] == 0 and run[1][0] == pytest.approx(250 * per_step[0])  # start, us
    trace = rep.chrome_trace()["traceEvents"]
    assert [e["name"] for e in trace] == [f"{st['op']} ({st['name']})" for st in steps]
