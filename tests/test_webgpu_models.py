"""Whole models compiled for ``Target("webgpu")`` and run on the WebGPU adapter (lavapipe in
CI) against onnxruntime at rtol 1e-4 / atol 1e-5 (float32), the runtime's errors, and
``ember run --target webgpu``. Image models run at 32x32 (lavapipe is a CPU)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.errors import DeviceError, InputError
from ember.testing import assert_close
from ember.testing import models as M
from webgpu_util import needs_adapter


def ort_run(model: onnx.ModelProto, feeds: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_model(model, feeds):
    cm = ember.compile(model, target="webgpu")
    got = cm.run(feeds)
    exp = ort_run(model, feeds)
    assert len(got) == len(exp)
    for k, (g, e) in enumerate(zip(got, exp)):
        assert_close(g, e, 1e-4, 1e-5, f"output {k}")
    return cm


def small_cnn() -> onnx.ModelProto:
    """Conv-Relu-MaxPool-Conv-GlobalAveragePool-Gemm-Softmax, seeded weights."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * .3, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * .2, "w2")
    wf = numpy_helper.from_array(rng.standard_normal((10, 16)).astype(np.float32), "wf")
    bf = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "bf")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["l"], transB=1),
             helper.make_node("Softmax", ["l"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "small_cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])],
                          [w1, b1, w2, wf, bf])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@needs_adapter
def test_small_cnn_matches_onnxruntime():
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    cm = check_model(small_cnn(), {"x": x})
    assert cm.info["num_dispatches"] >= cm.info["num_kernels"]
    # the weights stay on the device: a second run with other inputs is right too
    x2 = x[::-1].copy()
    assert_close(cm.run({"x": x2})[0], ort_run(small_cnn(), {"x": x2})[0], 1e-4, 1e-5)


@needs_adapter
def test_transformer_layer_matches_onnxruntime():
    m = M.bert_encoder(num_layers=1, hidden=64, heads=2, seq=16)
    check_model(m, M.bert_inputs(m))


@needs_adapter
@pytest.mark.slow(reason="a whole ResNet-18 and MobileNetV2 on lavapipe (about 30 s)")
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_image_models_at_32px_match_onnxruntime(name):
    m = getattr(M, name)(image_size=32, num_classes=10)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    check_model(m, {m.graph.input[0].name: x})


@needs_adapter
def test_bad_inputs_are_input_errors():
    cm = ember.compile(small_cnn(), target="webgpu")
    with pytest.raises(InputError, match="shape"):
        cm.run({"x": np.zeros((1, 3, 16, 16), np.float32)})
    with pytest.raises(InputError, match="missing"):
        cm.run({})


@needs_adapter
def test_int64_input_outside_int32_is_an_input_error():
    from ember.testing import op_module
    cm = ember.build(op_module("add", [np.zeros(3, np.int64)] * 2), "webgpu")
    x = np.array([1, 2, 3], np.int64)
    np.testing.assert_array_equal(cm.run({"x0": x, "x1": x})[0], x + x)
    with pytest.raises(InputError, match="do not fit the int32"):
        cm.run({"x0": np.array([2**40, 0, 0], np.int64), "x1": x})


def test_no_adapter_is_a_device_error(monkeypatch):
    wgpu = pytest.importorskip("wgpu", reason="the wgpu package is not installed")
    from ember.runtime import webgpu as rt
    monkeypatch.setattr(rt, "_DEVICE", None)
    monkeypatch.setattr(wgpu.gpu, "request_adapter_sync", lambda **kw: None)
    with pytest.raises(DeviceError, match="no WebGPU adapter: install mesa-vulkan-drivers"):
        ember.compile(small_cnn(), target="webgpu")


@needs_adapter
def test_cli_run_on_webgpu(tmp_path, capsys):
    from ember.cli import main
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    assert main(["run", str(path), "--target", "webgpu"]) in (0, None)
    out = capsys.readouterr().out
    assert "y" in out


@needs_adapter
def test_out_of_range_gather_index_is_an_input_error():
    from ember.testing import op_module
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    cm = ember.build(op_module("take", [data, np.array([0, 3], np.int64)], {"axis": 0}),
                     "webgpu")
    np.testing.assert_array_equal(cm.run({"x0": data, "x1": np.array([3, -1], np.int64)})[0],
                                  data[[3, -1]])
    with pytest.raises(InputError, match="index is out of range"):
        cm.run({"x0": data, "x1": np.array([0, 4], np.int64)})
    # the next run is fine again (the status is reset)
    np.testing.assert_array_equal(cm.run({"x0": data, "x1": np.array([1, 2], np.int64)})[0],
                                  data[[1, 2]])


@needs_adapter
def test_profile_reports_device_time_per_kernel(tmp_path, capsys):
    from ember.cli import main
    from ember.runtime.profiler import profile
    from ember.runtime.webgpu import get_device
    if "timestamp-query" not in get_device()[1].features:
        pytest.skip("the WebGPU adapter has no timestamp-query feature")
    cm = ember.compile(small_cnn(), target="webgpu")
    x = {"x": np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)}
    rep = profile(cm, x, repeat=3, warmup=1)
    assert [k.op for k in rep.kernels] == [st["op"] for st in cm.plan["steps"]]
    assert all(k.ms >= 0 for k in rep.kernels) and rep.total_ms > 0
    assert rep.end_to_end_ms > 0
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    assert main(["profile", str(path), "--target", "webgpu", "--repeat", "2"]) in (0, None)
    assert "nn.conv" in capsys.readouterr().out


@needs_adapter
def test_save_load_and_cli_compile_run(tmp_path, capsys):
    from ember.cli import main
    from ember.runtime.webgpu import WebGPUModel
    x = {"x": np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)}
    cm = ember.compile(small_cnn(), target="webgpu")
    want = ort_run(small_cnn(), x)[0]
    cm.save(tmp_path / "m.ember")
    back = ember.load(tmp_path / "m.ember")
    assert isinstance(back, WebGPUModel) and back.target == cm.target
    assert_close(back.run(x)[0], want, 1e-4, 1e-5, "loaded model")
    # the command line: compile to an artifact, run it (no --target: the artifact knows)
    onnx.save(small_cnn(), tmp_path / "cnn.onnx")
    out = tmp_path / "cli.ember"
    assert main(["compile", str(tmp_path / "cnn.onnx"), "--target", "webgpu", "-o",
                 str(out)]) in (0, None)
    assert "wrote" in capsys.readouterr().out
    assert main(["run", str(out)]) in (0, None)
    assert "y" in capsys.readouterr().out
    np.testing.assert_array_equal(ember.load(out).run(x)[0], back.run(x)[0])


def test_truncated_webgpu_artifact_is_an_artifact_error(tmp_path):
    import zipfile
    from ember.errors import ArtifactError
    from ember.runtime.webgpu import ARTIFACT_FORMAT
    p = tmp_path / "bad.ember"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("manifest.json", '{"format": "%s", "version": 1}' % ARTIFACT_FORMAT)
    with pytest.raises(ArtifactError, match="not a readable ember WebGPU artifact"):
        ember.load(p)


@needs_adapter
def test_tensor_beyond_the_adapters_binding_size_names_the_node(monkeypatch):
    from ember.runtime import webgpu as rt
    adapter, device = rt.get_device()

    class SmallDevice:  # the real device with a smaller max-storage-buffer-binding-size
        limits = dict(device.limits, **{"max-storage-buffer-binding-size": 4096})

        def __getattr__(self, name):
            return getattr(device, name)
    monkeypatch.setattr(rt, "get_device", lambda: (adapter, SmallDevice()))
    with pytest.raises(DeviceError, match=r"of node .*nn.conv.* above the adapter's "
                                          r"max-storage-buffer-binding-size=4096"):
        ember.compile(small_cnn(), target="webgpu")


@needs_adapter
def test_gpt2_decoder_matches_onnxruntime():
    m = M.gpt2_decoder(num_layers=2, hidden=64, heads=4, seq=16)
    ids = np.random.default_rng(3).integers(0, 256, (1, 16)).astype(np.int64)
    check_model(m, {"input_ids": ids})


# the smallest resolution each light model accepts (a fixed-size flatten before the classifier,
# or a fixed 7x7 average pool, pins the others to 224)
LIGHT_SIZE = {"densenet121": 64, "squeezenet": 64}


@needs_adapter
@pytest.mark.slow(reason="the nine ONNX light models on lavapipe (seconds to minutes each; "
                         "seven only run at 224x224)")
@pytest.mark.parametrize("name", ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2",
                                  "resnet50", "shufflenet", "squeezenet", "vgg19", "zfnet512"])
def test_light_models_match_onnxruntime(name):
    from ember.zoo import at_resolution, default_model_input, randomized_light_model
    m = at_resolution(randomized_light_model(name), LIGHT_SIZE.get(name, 224))
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(v.shape).astype(np.float32)
             for k, v in default_model_input(m).items()}
    # AlexNet, VGG-19, ZFNet-512: their first classifier weight (151-411 MB) is over lavapipe's
    # 128 MiB max-storage-buffer-binding-size; SplitDense splits it into output-feature chunks
    check_model(m, feeds)
