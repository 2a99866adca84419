"""The weight arena and the activation arena on transparent huge pages (``hugepage_empty``):
buffers are what they claim (size, alignment, zero-filled, a huge-page-advised mapping), the
weights lie in one arena in the order the steps first read them, an artifact is read straight
into its arena (no second copy), and results match onnxruntime whichever memory backs them."""

import os
import re
import sys

import numpy as np
import onnxruntime as ort
import pytest

import ember
from ember.runtime import executor as ex
from ember.testing import assert_close
from ember.testing import models as M


def _model():
    return M.mobilenet_v2(seed=4, image_size=32)


def _feeds(seed=0):
    return {"input": np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)}


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# ``-p ember.testing.exact_buffers`` (AddressSanitizer runs) gives every weight and arena slot
# its own exact-size allocation on purpose: the arena layout is not there to check
exact_buffers = pytest.mark.skipif(
    "ember.testing.exact_buffers" in sys.modules,
    reason="the exact_buffers plugin gives each weight its own allocation (no weight arena)")


def _thp_mode() -> str | None:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else None


def test_hugepage_empty_is_an_aligned_zeroed_mapping():
    n = ex.HUGEPAGE_MIN_BYTES + 12345
    buf = ex.hugepage_empty(n)
    assert buf.dtype == np.uint8 and buf.shape == (n,) and buf.flags.writeable
    if not hasattr(__import__("mmap"), "MADV_HUGEPAGE"):
        pytest.skip("this platform has no MADV_HUGEPAGE (the fallback is tested below)")
    assert ex.on_hugepage_buffer(buf)
    assert buf.ctypes.data % ex.HUGEPAGE_BYTES == 0
    assert not buf.any()
    buf[-1] = 7  # the whole range is writable
    assert buf[-1] == 7


def test_small_buffers_fall_back_to_ordinary_aligned_memory():
    buf = ex.hugepage_empty(1000)
    assert buf.shape == (1000,) and buf.ctypes.data % ex.ALIGN == 0
    assert not ex.on_hugepage_buffer(buf)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)")
def test_the_kernel_marks_the_arena_huge_page_eligible():
    if _thp_mode() in (None, "never"):
        pytest.skip(f"transparent huge pages are unavailable here (mode {_thp_mode()!r})")
    buf = ex.hugepage_empty(8 * ex.HUGEPAGE_BYTES)
    buf[::4096] = 1  # fault the pages in
    addr = buf.ctypes.data
    vma = None
    for line in open("/proc/self/smaps"):
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if m:
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            vma = (lo <= addr < hi)
        elif vma and line.startswith("THPeligible:"):
            assert line.split()[1] == "1", line
            return
    pytest.fail("no smaps entry with THPeligible for the arena's mapping")


@exact_buffers
def test_weights_lie_in_one_arena_in_first_use_order(monkeypatch):
    monkeypatch.setattr(ex, "HUGEPAGE_MIN_BYTES", 0)  # a small model's arena still uses THP
    model = _model()
    cm = ember.compile(model)
    plan, params = cm.plan, cm._executor._params
    layout, total = ex.param_layout(plan)
    assert set(layout) <= set(params) and total >= sum(n for _, n in layout.values())
    base = min(params[n].ctypes.data for n in layout)
    for name, (off, nbytes) in layout.items():
        a = params[name]
        assert ex.on_hugepage_buffer(a), name
        assert a.ctypes.data - base == off and a.nbytes == nbytes, name
        assert off % ex.ALIGN == 0
    first_use = []
    for st in plan["steps"]:
        for k in st["args"]:
            s = plan["slots"][k]
            if s["kind"] == "param" and s["param"] not in first_use:
                first_use.append(s["param"])
    offs = [layout[n][0] for n in first_use]
    assert offs == sorted(offs) and first_use == list(layout)
    assert ex.on_hugepage_buffer(cm._executor.arena)
    feeds = _feeds(1)
    for got, want in zip(cm.run(feeds), _reference(model, feeds)):
        assert_close(got, want, 1e-4, 1e-5, "huge-page arenas vs onnxruntime")


@exact_buffers
def test_a_loaded_artifact_is_read_straight_into_its_arena(tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "HUGEPAGE_MIN_BYTES", 0)
    model = _model()
    path = os.path.join(tmp_path, "m.ember")
    ember.compile(model).save(path)
    copies = []
    orig = ex.GraphExecutor._bind_params

    def spy(self, params):
        out = orig(self, params)
        copies.extend(n for n in out if out[n].ctypes.data != np.asarray(params[n]).ctypes.data)
        return out
    monkeypatch.setattr(ex.GraphExecutor, "_bind_params", spy)
    cm = ember.load(path)
    layout, _ = ex.param_layout(cm.plan)
    assert layout and not [n for n in copies if n in layout]  # used in place, not copied
    assert all(ex.on_hugepage_buffer(cm.params[n]) for n in layout)
    feeds = _feeds(2)
    for got, want in zip(cm.run(feeds), _reference(model, feeds)):
        assert_close(got, want, 1e-4, 1e-5, "loaded artifact vs onnxruntime")


def test_without_madvise_the_runtime_uses_ordinary_memory(monkeypatch):
    monkeypatch.delattr("mmap.MADV_HUGEPAGE", raising=False)
    model = _model()
    cm = ember.compile(model)
    assert not ex.on_hugepage_buffer(cm._executor.arena)
    assert all(a.ctypes.data % ex.ALIGN == 0 for a in cm._executor._params.values())
    feeds = _feeds(3)
    for got, want in zip(cm.run(feeds), _reference(model, feeds)):
        assert_close(got, want, 1e-4, 1e-5, "ordinary memory vs onnxruntime")


_PEAK = """
import sys
import ember
def hwm_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
before = hwm_kb()
cm = getattr(ember, sys.argv[1])(sys.argv[2])
print(hwm_kb() - before, sum(a.nbytes for a in cm.params.values()) // 1024)
"""


def _peak_kb(how: str, path: str) -> tuple[int, int]:
    """``(VmHWM growth, weight bytes)`` in KiB of ``ember.<how>(path)`` in a fresh process."""
    import subprocess
    env = dict(os.environ, EMBER_NO_MODEL_CACHE="1",
               PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _PEAK, how, path], capture_output=True,
                         text=True, env=env, check=True).stdout.split()
    return int(out[0]), int(out[1])


def _big_matmul(rows: int, cols: int):
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])],
        [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")
def test_loading_an_artifact_holds_one_copy_of_the_weights_at_the_peak(tmp_path):
    path = os.path.join(tmp_path, "m.ember")
    ember.compile(_big_matmul(1024, 8192)).save(path)  # 32 MiB of weights
    peak_kb, weights_kb = _peak_kb("load", path)
    assert weights_kb >= 32 << 10
    # the weights once (read straight into the arena), not once more for a read buffer
    assert peak_kb < 1.5 * weights_kb, (peak_kb, weights_kb)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")
def test_compiling_drops_the_onnx_model_before_the_weights_are_copied(tmp_path):
    import onnx
    path = os.path.join(tmp_path, "m.onnx")
    onnx.save(_big_matmul(2048, 8192), path)  # 64 MiB of weights
    peak_kb, weights_kb = _peak_kb("compile", path)
    assert weights_kb >= 64 << 10
    # the imported weights and the weight arena, the packed copy written straight into the
    # arena: 2 copies (3 while build packed into a copy of its own and then copied that into
    # the arena; 4 when the parsed model was still alive then, or while it was serialized
    # again for the compiled-model cache key)
    assert peak_kb < 2.5 * weights_kb, (peak_kb, weights_kb)
