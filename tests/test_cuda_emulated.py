"""The printed CUDA C computes the right numbers: models compiled for ``nvidia/h200`` are run
on the CPU by ``cuda_emulator`` (the module compiled as C++ with CUDA's built-ins defined,
every block and thread in turn, the runtime's own launches and memory layout) and compared
with the NumPy references of their operators and with onnxruntime. On a GPU the same kernels
run through the driver: ``bench/gpu.py``."""

import numpy as np
import onnxruntime as ort
import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra (cuda-bindings, NVRTC) is not "
                                                  "installed")

import ember  # noqa: E402
from ember.graph.passes import PassContext  # noqa: E402
from ember.testing import assert_close, op_module  # noqa: E402
from ember.testing import models as M  # noqa: E402
from ember.testing import _reference_and_types  # noqa: E402
import cuda_emulator  # noqa: E402

pytestmark = pytest.mark.skipif(cuda_emulator.cxx() is None,
                                reason="no host C++ compiler (g++) to emulate CUDA kernels")

rng = np.random.default_rng(0)
CASES = [
    ("nn.softmax", [rng.standard_normal((4, 33)).astype(np.float32)], {"axis": -1}),
    ("matmul", [rng.standard_normal((7, 16)).astype(np.float32),
                rng.standard_normal((16, 5)).astype(np.float32)], {}),
    ("nn.conv", [rng.standard_normal((1, 2, 9, 9)).astype(np.float32),
                 rng.standard_normal((3, 2, 3, 3)).astype(np.float32)],
     {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("erf", [rng.standard_normal(300).astype(np.float32)], {}),
    ("divide", [rng.integers(-50, 50, 40), rng.integers(-3, 4, 40)], {}),
    ("mod", [rng.integers(-50, 50, 40).astype(np.int32),
                   rng.integers(-3, 4, 40).astype(np.int32)], {}),
    ("maximum", [np.array([1.0, np.nan, -2.0, 3.0], np.float32),
                 np.array([0.5, 1.0, np.nan, -np.inf], np.float32)], {}),
    ("add", [rng.standard_normal(1000).astype(np.float16),
             rng.standard_normal(1000).astype(np.float16)], {}),
    ("nn.max_pool", [rng.standard_normal((1, 3, 8, 8)).astype(np.float32)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("op,inputs,attrs", CASES, ids=[c[0] for c in CASES])
def test_op_on_emulated_cuda_matches_numpy(op, inputs, attrs):
    with PassContext(opt_level=0):
        cm = ember.build(op_module(op, inputs, attrs), "nvidia/h200")
    if op == "nn.softmax":  # a cooperative row reduction: shared memory and barriers
        assert "__syncthreads();" in cm.source and "__shared__" in cm.source
    got, status = cuda_emulator.emulate(cm, {f"x{k}": a for k, a in enumerate(inputs)})
    expected, _ = _reference_and_types(op, inputs, attrs)
    assert status == [0] * len(status)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        tol = (1e-3, 1e-3) if e.dtype == np.float16 else (1e-5, 1e-6)
        assert_close(g, e, *tol, op)


def test_gather_index_check_sets_the_status():
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    cm = ember.build(op_module("take", [data, np.array([0, 3], np.int64)], {"axis": 0}),
                     "nvidia/h200")
    got, status = cuda_emulator.emulate(cm, {"x0": data, "x1": np.array([3, -1], np.int64)})
    np.testing.assert_array_equal(got[0], data[[3, -1]])
    assert status == [0]
    _, status = cuda_emulator.emulate(cm, {"x0": data, "x1": np.array([0, 4], np.int64)})
    assert status == [1]


def _check_model(model, feeds, rtol=1e-4, atol=1e-5):
    cm = ember.compile(model, target="nvidia/h200")
    got, _ = cuda_emulator.emulate(cm, feeds)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        assert_close(g, w, rtol, atol)


def test_transformer_layer_on_emulated_cuda_matches_onnxruntime():
    m = M.bert_encoder(num_layers=1, hidden=32, heads=2, seq=8)
    _check_model(m, M.bert_inputs(m))


def test_small_resnet_on_emulated_cuda_matches_onnxruntime():
    m = M.resnet18(image_size=32, num_classes=10)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    _check_model(m, {"data": x})


@pytest.mark.parametrize("op,shape", [("nn.softmax", (3, 256)), ("sum", (5, 100)),
                                      ("argmax", (4, 64))])
def test_warp_shuffle_reduction_equals_the_shared_memory_tree(op, shape, monkeypatch):
    import ember.codegen.cuda as cg
    x = rng.standard_normal(shape).astype(np.float32)
    attrs = {"axis": -1} if op == "nn.softmax" else {"axes": [1]} if op == "sum" else {"axis": 1}
    with PassContext(opt_level=0):
        cm = ember.build(op_module(op, [x], attrs), "nvidia/h200")
    got, _ = cuda_emulator.emulate(cm, {"x0": x})
    expected, _ = _reference_and_types(op, [x], attrs)
    assert_close(got[0], expected[0], 1e-5, 1e-6, op)
    monkeypatch.setattr(cg, "warp_reductions", lambda stmts, block, warp: stmts)
    with PassContext(opt_level=0):
        tree = ember.build(op_module(op, [x], attrs), "nvidia/h200")
    if op != "argmax":  # argmax combines (value, index) pairs: not one shuffled value
        assert "__shfl_down_sync" in cm.source and "__shfl_down_sync" not in tree.source
    got_tree, _ = cuda_emulator.emulate(tree, {"x0": x})
    np.testing.assert_array_equal(got[0], got_tree[0])  # same combination order, same bits
