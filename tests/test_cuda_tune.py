"""Tuning CUDA kernels without a GPU (``ember.tune.cuda_measure``): the tensor-core rule's
config space (warp tile, warps per block, unroll) as a ``rule`` task, candidates built through
NVRTC to sm_90 cubins, the runner's typed ``DeviceError`` without a GPU, and a CUDA record in
the usual format replayed by ``apply_history_best`` (its cost is written by the test: what is
checked is that the recorded configuration is the one compiled, not a timing)."""

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra (cuda-bindings, NVRTC) is not "
                                                  "installed")

import ember  # noqa: E402
import ember.driver as driver  # noqa: E402
from ember.codegen.nvrtc import CUDABinary  # noqa: E402
from ember.errors import DeviceError  # noqa: E402
from ember.target import Target  # noqa: E402
from ember.tune.cuda_measure import CUDABuilder, CUDARunner  # noqa: E402
from ember.tune.dispatch import apply_history_best  # noqa: E402
from ember.tune.extract import register_workload  # noqa: E402
from ember.tune.measure import MeasureErrorNo, MeasureInput, MeasureResult  # noqa: E402
from ember.tune.records import encode, load_records  # noqa: E402
from ember.tune.task import Task  # noqa: E402

H200 = "nvidia/h200"


def _model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["o"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                          [helper.make_tensor_value_info("o", TensorProto.FLOAT, [64, 64])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def gemm_task(monkeypatch):
    seen = []
    orig = driver.schedule_kernels

    def spy(kernels, tgt, level, *rest):
        seen.extend(kernels)
        return orig(kernels, tgt, level, *rest)
    monkeypatch.setattr(driver, "schedule_kernels", spy)
    monkeypatch.setenv("EMBER_NO_MODEL_CACHE", "1")  # compile for real: the spy sees kernels
    ember.compile(_model(), target=H200, quantize="fp16")
    (k,) = [k for k in seen if "gemm" in k.attrs.get("op", "")]
    # the task's target argument is the expanded target, as ``apply_best_schedules`` keys it
    return Task("rule", [register_workload(k), str(Target(H200))], H200)


def test_tensorcore_config_space(gemm_task):
    space = gemm_task.config_space
    knobs = {k: len(v) for k, v in space.space_map.items()} if hasattr(space, "space_map") \
        else None
    first = space.get(0).values()
    assert set(first) == {"warp_tile", "warps", "unroll"}
    assert first == {"warp_tile": [2, 2], "warps": 4, "unroll": 0}  # the untuned decision
    assert len(space) >= 12, knobs
    tiles = {tuple(c.values()["warp_tile"]) for c in space}
    assert {(1, 1), (2, 2), (2, 4), (4, 2)} <= tiles and (4, 4) not in tiles  # <= 8 fragments


def test_candidates_build_through_nvrtc(gemm_task, tmp_path):
    space = gemm_task.config_space
    picks, tiles = [], set()
    for c in space:  # one configuration per warp tile, and one per warp count
        v = c.values()
        if v["unroll"] == 0 and (tuple(v["warp_tile"]) not in tiles or v["warp_tile"] == [2, 2]):
            tiles.add(tuple(v["warp_tile"]))
            picks.append(c)
    builds = CUDABuilder(str(tmp_path)).build([MeasureInput(gemm_task.target, gemm_task, c)
                                               for c in picks])
    ok = [(c, b) for c, b in zip(picks, builds) if b.error_no == MeasureErrorNo.NO_ERROR]
    assert len(ok) >= 4, [b.error_msg for b in builds]
    for c, b in ok:
        doc = json.loads(open(b.lib).read())
        binary = CUDABinary.from_bytes(doc["binary"].encode())
        assert binary.cubins["sm_90"][:4] == b"\x7fELF"
        (k,) = [k for k in doc["kernels"] if "wmma" in binary.ptx]
        # threads per block = 32 lanes x the configuration's warps
        assert k["block"] == [32, c.values()["warps"], 1]
        assert all(r.spill_bytes == 0 for r in binary.resources["sm_90"].values())
        assert doc["specs"][-1] == [[64, 64], "float32"]
    # another warp tile is another wmma function
    for c, b in ok:
        fm, fn = c.values()["warp_tile"]
        assert f"ember_wmma_f16_f32f16_{fm}x{fn}(" in json.loads(open(b.lib).read())["source"]


def _no_gpu() -> bool:
    try:
        from ember.runtime.cuda import _driver
        _driver()
        return False
    except DeviceError:
        return True


@pytest.mark.skipif(not _no_gpu(), reason="a CUDA GPU is present: the no-GPU error is not raised")
def test_measurement_without_a_gpu_is_a_device_error(gemm_task, tmp_path):
    inp = MeasureInput(gemm_task.target, gemm_task, gemm_task.config_space.get(0))
    builds = CUDABuilder(str(tmp_path)).build([inp])
    with pytest.raises(DeviceError, match="no CUDA driver / no GPU"):
        CUDARunner().run([inp], builds)


def test_a_cuda_record_is_replayed_by_apply_history_best(gemm_task, tmp_path):
    space = gemm_task.config_space
    cfg = next(c for c in space if c.values() == {"warp_tile": [1, 1], "warps": 2,
                                                  "unroll": 1})
    path = tmp_path / "cuda.jsonl"
    res = MeasureResult([1e-6, 1e-6], MeasureErrorNo.NO_ERROR, "", 1.0, 0.0)
    path.write_text(encode(MeasureInput(gemm_task.target, gemm_task, cfg), res) + "\n")
    (rec,) = load_records(path)
    assert rec.ok and rec.target == str(Target(H200))
    with apply_history_best(str(path)) as ctx:
        cm = ember.compile(_model(), target=H200, quantize="fp16")
    assert ctx.applied == 1
    (step,) = [st for st in cm.steps if any("k_" in k["name"] for k in st["kernels"])]
    assert step["kernels"][-1]["block"] == [32, 2, 1]
    assert "ember_wmma_f16_f32f16_1x1" in cm.source and "#pragma unroll" in cm.source


def test_runner_path_with_a_stand_in_driver(gemm_task, tmp_path, monkeypatch):
    """``CUDARunner`` against the recording stand-in driver of ``test_cuda_profile``: the
    candidate's kernels are launched with the configuration's block, timed between events,
    and its output (the stand-in copies nothing back: zeros) is refused as a wrong answer
    against the CPU reference."""
    import ember.runtime.cuda as rcuda
    from test_cuda_profile import FakeDriver
    fake = FakeDriver()
    monkeypatch.setattr(rcuda, "_driver", lambda: fake)
    cfg = next(c for c in gemm_task.config_space if c.values()["warps"] == 2)
    inp = MeasureInput(gemm_task.target, gemm_task, cfg)
    (b,) = CUDABuilder(str(tmp_path)).build([inp])
    (res,) = CUDARunner(number=4, repeat=2).run([inp], [b])
    assert res.error_no == MeasureErrorNo.WRONG_ANSWER and "max abs error" in res.error_msg
    launches = [e for e in fake.log if e[0] == "launch"]
    assert len(launches) == 1 + 4 * 2  # the check run, then number x repeat
    assert ("load", b"\x7fELF") in fake.log
