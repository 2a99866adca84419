"""SplitDense (ember/graph/passes/split_dense.py): dense layers whose constant weight exceeds a
byte budget become output-feature chunks plus a concatenate; graph text in and out, the budget
from the target or the PassContext config, and the split models on WebGPU (lavapipe in CI)
against NumPy and onnxruntime."""

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontend.onnx import from_onnx
from ember.graph.passes import PassContext
from ember.graph.passes.bind_params import bind_params
from ember.graph.passes.pipeline import optimize, pipeline_names
from ember.graph.passes.split_dense import split_dense_function, target_budget
from ember.testing import assert_close
from webgpu_util import needs_adapter


def dense_model(k=64, n=50, m=3, trans_b=0, relu=True, matmul=False, seed=0):
    """``relu(x @ W + B)`` (Gemm, or MatMul + Add) with seeded weights; x ``(m, k)`` float32."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    if matmul:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["g"])]
        inits = [numpy_helper.from_array(w, "W")]
    else:
        nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["g"], transB=trans_b)]
        inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")]
    nodes.append(helper.make_node("Relu" if relu else "Identity", ["g"], ["y"]))
    g = helper.make_graph(nodes, "dense",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def bound_main(model):
    mod, params = from_onnx(model)
    return bind_params(mod, params).main


def test_split_graph_text_gemm_with_bias():
    # 4 x 6 float32 weight (96 bytes), budget 40 bytes = 2 features: 3 chunks of 2
    model = dense_model(k=4, n=6)
    out = split_dense_function(bound_main(model), 40)
    text = str(out)
    assert re.findall(r"nn\.gemm\(%x, const\(float32, \[(\d+), (\d+)\].*?, const\(float32, "
                      r"\[(\d+)\].*?trans_b=0\) : Tensor\[\(3, (\d+)\)", text) == [
        ("4", "2", "2", "2")] * 3
    assert re.search(r"= concatenate\(%g_0, %g_1, %g_2, axis=1\) : Tensor\[\(3, 6\), float32\]",
                     text)
    assert re.search(r"nn\.relu\(%g_3\) : Tensor\[\(3, 6\), float32\]", text)
    w = numpy_helper.to_array(model.graph.initializer[0])
    bias = numpy_helper.to_array(model.graph.initializer[1])
    gemms = [b.call for b in out.bindings if b.call.op == "nn.gemm"]
    for j, c in enumerate(gemms):  # the chunks are the original's column slices
        np.testing.assert_array_equal(c.args[1].data, w[:, 2 * j:2 * j + 2])
        np.testing.assert_array_equal(c.args[2].data, bias[2 * j:2 * j + 2])


def test_split_keeps_trans_b_layout_and_leaves_small_weights():
    model = dense_model(k=4, n=6, trans_b=1)
    out = split_dense_function(bound_main(model), 40)
    w = numpy_helper.to_array(model.graph.initializer[0])  # (6, 4): rows are features
    gemms = [b.call for b in out.bindings if b.call.op == "nn.gemm"]
    assert [c.attrs["trans_b"] for c in gemms] == [1, 1, 1]
    for j, c in enumerate(gemms):
        np.testing.assert_array_equal(c.args[1].data, w[2 * j:2 * j + 2])
    # 64 x 50 at 4,096 bytes (16 features): 4 balanced chunks, not 16 + 16 + 16 + 2
    text = str(split_dense_function(bound_main(dense_model()), 4096))
    assert re.findall(r"nn\.gemm\(.*?\) : Tensor\[\(3, (\d+)\)", text) == [
        "13", "13", "13", "11"]
    # under the budget, or one feature (K values) alone over it: unchanged
    whole = bound_main(dense_model())
    assert str(split_dense_function(whole, 12800)) == str(whole)
    assert str(split_dense_function(whole, 255)) == str(whole)


def test_budget_from_target_and_config():
    assert target_budget("webgpu") == 128 * 1024 * 1024  # WebGPU's maxStorageBufferBindingSize
    assert target_budget("webgpu -max_storage_buffer_binding_size=4096") == 4096
    assert target_budget("cuda") is None and target_budget("llvm") is None
    assert "SplitDense" in pipeline_names("webgpu") and "SplitDense" in pipeline_names("cuda")
    assert "SplitDense" not in pipeline_names("llvm")
    mod, params = from_onnx(dense_model())
    small, _ = optimize(mod, "webgpu -max_storage_buffer_binding_size=4096", dict(params))
    assert str(small).count("nn.gemm(") == 4
    default, _ = optimize(mod, "webgpu", dict(params))
    assert str(default).count("nn.gemm(") == 1
    with PassContext(config={"SplitDense.max_weight_bytes": 6400}):
        cfg, _ = optimize(mod, "webgpu", dict(params))
    assert str(cfg).count("nn.gemm(") == 2


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


@needs_adapter
@pytest.mark.parametrize("kw", [{}, {"trans_b": 1, "relu": False}, {"matmul": True}],
                         ids=["gemm_relu", "gemm_trans_b", "matmul_relu"])
def test_split_dense_on_webgpu_matches_onnxruntime(kw):
    model = dense_model(**kw)
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    with PassContext(config={"SplitDense.max_weight_bytes": 4096}):
        cm = ember.compile(model, target="webgpu")
    assert cm.graph_text.count("nn.gemm(") + cm.graph_text.count("matmul(") == 4
    got = cm.run({"x": x})[0]
    assert_close(got, _ort(model, {"x": x}), 1e-4, 1e-5, "split dense")
    # and NumPy's reference of the same layer
    w = numpy_helper.to_array(model.graph.initializer[0])
    ref = x @ (w.T if kw.get("trans_b") else w)
    if not kw.get("matmul"):
        ref = ref + numpy_helper.to_array(model.graph.initializer[1])
    if kw.get("relu", True):
        ref = np.maximum(ref, 0)
    assert_close(got, ref, 1e-4, 1e-5, "split dense vs numpy")


@needs_adapter
def test_chunks_over_the_adapters_real_limit_still_raise(monkeypatch):
    from ember.errors import DeviceError
    from ember.runtime import webgpu as rt
    adapter, device = rt.get_device()

    def with_limit(n):
        class SmallDevice:  # the real device with a smaller max-storage-buffer-binding-size
            limits = dict(device.limits, **{"max-storage-buffer-binding-size": n})

            def __getattr__(self, name):
                return getattr(device, name)
        monkeypatch.setattr(rt, "get_device", lambda: (adapter, SmallDevice()))

    model = dense_model()  # 12,800-byte weight, chunks of 3,328 bytes at a 4,096-byte budget
    target = "webgpu -max_storage_buffer_binding_size=4096"
    with_limit(2048)
    with pytest.raises(DeviceError, match=r"of node .*nn\.gemm.* above the adapter's "
                                          r"max-storage-buffer-binding-size=2048.*"
                                          r"-max_storage_buffer_binding_size=2048"):
        ember.compile(model, target=target)
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    # the message's advice: the adapter's limit as the target's budget
    got = ember.compile(model, target="webgpu -max_storage_buffer_binding_size=2048").run(
        {"x": x})[0]
    assert_close(got, _ort(model, {"x": x}), 1e-4, 1e-5, "split at the adapter's limit")
    with_limit(8192)
    got = ember.compile(model, target=target).run({"x": x})[0]
    assert_close(got, _ort(model, {"x": x}), 1e-4, 1e-5, "split under the adapter's limit")
