"""Every kernel of whole models compiles for CUDA without a GPU: ``ember.compile(...,
target="nvidia/h200")`` prints and builds them (NVRTC -> PTX -> sm_90 cubin), and the same
module builds for sm_80 (A100) too; ptxas reports no spills (``MAX_SPILL_BYTES`` = 0) and no
kernel above 255 registers or the block's register file on either arch (``check_resources``).
Numbers on a GPU against onnxruntime: ``bench/gpu.py``."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra (cuda-bindings, NVRTC) is not "
                                                  "installed")

import ember  # noqa: E402
from ember.codegen.nvrtc import build_cuda, check_resources  # noqa: E402
from ember.target import Target  # noqa: E402
from ember.testing import models as M  # noqa: E402
from ember.zoo import LIGHT_MODELS, randomized_light_model  # noqa: E402


def gpt2_layer(seq: int = 16, hidden: int = 64, heads: int = 2, seed: int = 0):
    """One GPT-2 decoder block (pre-LayerNorm, causal self-attention, tanh-GELU MLP,
    residuals; Radford et al. 2019) on ``x`` float32 ``(1, seq, hidden)``, opset 17."""
    rng = np.random.default_rng(seed)
    dh = hidden // heads
    inits, nodes = [], []

    def w(name, *shape, scale=0.05):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(kind, ins, out, **attrs):
        nodes.append(helper.make_node(kind, ins, [out], **attrs))
        return out

    def ln(x, tag):
        return op("LayerNormalization", [x, c(f"{tag}_g", np.ones(hidden, np.float32)),
                                         c(f"{tag}_b", np.zeros(hidden, np.float32))],
                  f"{tag}_out", axis=-1, epsilon=1e-5)

    h = ln("x", "ln1")
    qkv = op("Add", [op("MatMul", [h, w("w_qkv", hidden, 3 * hidden)], "qkv0"),
                     w("b_qkv", 3 * hidden)], "qkv")
    q, k, v = (op("Slice", [qkv, c(f"s{n}", np.array([n * hidden])),
                            c(f"e{n}", np.array([(n + 1) * hidden])), c(f"a{n}", np.array([2]))],
                  f"{name}0") for n, name in enumerate("qkv"))
    shape = c("heads_shape", np.array([1, seq, heads, dh]))

    def split(t, perm):
        return op("Transpose", [op("Reshape", [t, shape], f"{t}_r")], f"{t}_t", perm=perm)
    qh, kh, vh = split(q, [0, 2, 1, 3]), split(k, [0, 2, 3, 1]), split(v, [0, 2, 1, 3])
    scores = op("Mul", [op("MatMul", [qh, kh], "qk"),
                        c("scale", np.array(1 / np.sqrt(dh), np.float32))], "scores")
    mask = np.triu(np.full((seq, seq), -1e4, np.float32), 1)
    probs = op("Softmax", [op("Add", [scores, c("causal", mask)], "masked")], "probs", axis=-1)
    ctx = op("Reshape", [op("Transpose", [op("MatMul", [probs, vh], "ctx0")], "ctx1",
                            perm=[0, 2, 1, 3]), c("merge", np.array([1, seq, hidden]))], "ctx")
    x1 = op("Add", ["x", op("MatMul", [ctx, w("w_proj", hidden, hidden)], "proj")], "x1")
    u = op("MatMul", [ln(x1, "ln2"), w("w_fc", hidden, 4 * hidden)], "fc")
    cube = op("Mul", [op("Pow", [u, c("three", np.array(3.0, np.float32))], "u3"),
                      c("k044", np.array(0.044715, np.float32))], "u3k")
    inner = op("Mul", [op("Add", [u, cube], "u_c"),
                       c("s2pi", np.array(np.sqrt(2 / np.pi), np.float32))], "inner")
    gelu = op("Mul", [op("Mul", [u, c("half", np.array(0.5, np.float32))], "uh"),
                      op("Add", [op("Tanh", [inner], "th"), c("one", np.array(1.0, np.float32))],
                         "th1")], "gelu")
    op("Add", [x1, op("MatMul", [gelu, w("w_out", 4 * hidden, hidden)], "mlp")], "y")
    g = helper.make_graph(nodes, "gpt2_layer",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def check_builds_everywhere(model, shapes=None, quantize=None):
    """Compile for the H200 (``quantize="fp16"``: mixed precision, tensor-core GEMMs), rebuild
    its module for sm_80 too, check every kernel's resources on both."""
    cm = ember.compile(model, target="nvidia/h200", shapes=shapes, quantize=quantize)
    assert cm.info["archs"] == ["sm_90"]
    names = {k["name"] for st in cm.steps for k in st["kernels"]}
    threads = {k["name"]: int(np.prod(k["block"])) for st in cm.steps for k in st["kernels"]}
    b = build_cuda(cm.source, ["sm_90", "sm_80"])
    assert set(b.cubins) == {"sm_80", "sm_90"} and ".target sm_80" in b.ptx
    for arch in ("sm_80", "sm_90"):
        assert set(b.resources[arch]) == names  # every kernel reported on both
        assert max(r.spill_bytes for r in b.resources[arch].values()) == 0
    check_resources(b, {n: (n, threads[n]) for n in names}, Target("nvidia/a100"))
    return cm


def test_bert_layer_builds_for_sm90_and_sm80():
    cm = check_builds_everywhere(M.bert_encoder(num_layers=1, hidden=64, heads=2, seq=16))
    assert cm.info["num_kernels"] > 5


@pytest.mark.parametrize("quantize", [None, "fp16"])
def test_gpt2_layer_builds_for_sm90_and_sm80(quantize):
    m = gpt2_layer()
    import onnxruntime  # the reference graph is valid ONNX
    sess = onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.zeros((1, 16, 64), np.float32)})[0].shape == (1, 16, 64)
    cm = check_builds_everywhere(m, quantize=quantize)
    # fp16: the QKV, projection and MLP GEMMs and the attention batch matmuls on tensor cores
    assert (cm.info["tensor_core_kernels"] >= 4) == (quantize == "fp16")


def test_mobilenet_v2_at_32px_builds_for_sm90_and_sm80():
    check_builds_everywhere(M.mobilenet_v2(image_size=32, num_classes=10))


@pytest.mark.slow(reason="whole models through NVRTC and nvJitLink twice (10-30 s each)")
@pytest.mark.parametrize("quantize", [None, "fp16"])
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_builds_for_sm90_and_sm80(name, quantize):
    check_builds_everywhere(randomized_light_model(name), quantize=quantize)


@pytest.mark.slow(reason="MobileNetV2 at 224x224 and a BERT-base layer (hidden 768, seq 128)")
@pytest.mark.parametrize("quantize", [None, "fp16"])
@pytest.mark.parametrize("which", ["mobilenet_v2", "bert_base_layer"])
def test_full_size_models_build_for_sm90_and_sm80(which, quantize):
    if which == "mobilenet_v2":
        check_builds_everywhere(M.mobilenet_v2(), quantize=quantize)
    else:
        cm = check_builds_everywhere(M.bert_encoder(num_layers=1, hidden=768, heads=12,
                                                    seq=128), quantize=quantize)
        assert (cm.info["tensor_core_kernels"] >= 6) == (quantize == "fp16")
