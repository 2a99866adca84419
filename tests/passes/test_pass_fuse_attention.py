"""FuseAttention: matmul / scale / mask add / softmax / matmul attention becomes one
``nn.attention``; chains that are not exactly that stay. Checked as IR text, against the NumPy
references (``check_pass``) and, compiled, against onnxruntime on odd lengths."""

import numpy as np
import pytest

from ember.graph import IRModule
from ember.graph.passes import get_pass

SIG = ("%q: Tensor[(1, 3, 13, 5), float32], %k: Tensor[(1, 13, 3, 5), float32], "
       "%v: Tensor[(1, 3, 13, 7), float32], %m: Tensor[(1, 1, 1, 13), float32]")
ATT = "causal=0, past=0, softcap=0.0, has_nonpad=0, qk_mode=-1, window=[-1, -1]"


def test_scaled_masked_attention_becomes_nn_attention(check_pass):
    # BERT's form: k^T from a (B, T, H, D) transpose, q pre-scaled, scores divided, mask added
    check_pass(get_pass("FuseAttention"), f"""
def @main({SIG}) {{
  %kt = transpose(%k, perm=[0, 2, 3, 1]) : Tensor[(1, 3, 5, 13), float32]
  %qs = multiply(%q, const(float32, [1], [0.5])) : Tensor[(1, 3, 13, 5), float32]
  %s = matmul(%qs, %kt) : Tensor[(1, 3, 13, 13), float32]
  %d = divide(%s, const(float32, [], [2.0])) : Tensor[(1, 3, 13, 13), float32]
  %b = add(%d, %m) : Tensor[(1, 3, 13, 13), float32]
  %p = nn.softmax(%b, axis=-1) : Tensor[(1, 3, 13, 13), float32]
  %y = matmul(%p, %v) : Tensor[(1, 3, 13, 7), float32]
  return %y
}}""", f"""
def @main({SIG}) {{
  %kt = transpose(%k, perm=[0, 2, 3, 1]) : Tensor[(1, 3, 5, 13), float32]
  %qs = multiply(%q, const(float32, [1], [0.5])) : Tensor[(1, 3, 13, 5), float32]
  %s = matmul(%qs, %kt) : Tensor[(1, 3, 13, 13), float32]
  %d = divide(%s, const(float32, [], [2.0])) : Tensor[(1, 3, 13, 13), float32]
  %b = add(%d, %m) : Tensor[(1, 3, 13, 13), float32]
  %p = nn.softmax(%b, axis=-1) : Tensor[(1, 3, 13, 13), float32]
  %y_0 = transpose(%k, perm=[0, 2, 1, 3]) : Tensor[(1, 3, 13, 5), float32]
  %y_1 = nn.attention(%q, %y_0, %v, %m, scale=0.25, has_mask=1, {ATT}) : Tensor[(1, 3, 13, 7), float32]
  return %y_1
}}""", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("why, body", [
    ("the probabilities are an output too", """
  %s = matmul(%q, %kt) : Tensor[(1, 3, 13, 13), float32]
  %p = nn.softmax(%s, axis=-1) : Tensor[(1, 3, 13, 13), float32]
  %y = matmul(%p, %v) : Tensor[(1, 3, 13, 7), float32]
  return %y, %p"""),
    ("the scale applies after the mask", """
  %s = matmul(%q, %kt) : Tensor[(1, 3, 13, 13), float32]
  %b = add(%s, %m) : Tensor[(1, 3, 13, 13), float32]
  %d = multiply(%b, const(float32, [], [0.5])) : Tensor[(1, 3, 13, 13), float32]
  %p = nn.softmax(%d, axis=-1) : Tensor[(1, 3, 13, 13), float32]
  %y = matmul(%p, %v) : Tensor[(1, 3, 13, 7), float32]
  return %y"""),
    ("a softmax over the queries", """
  %s = matmul(%q, %kt) : Tensor[(1, 3, 13, 13), float32]
  %p = nn.softmax(%s, axis=2) : Tensor[(1, 3, 13, 13), float32]
  %y = matmul(%p, %v) : Tensor[(1, 3, 13, 7), float32]
  return %y"""),
    ("a scale that is not a scalar", """
  %s = matmul(%q, %kt) : Tensor[(1, 3, 13, 13), float32]
  %d = multiply(%s, %m) : Tensor[(1, 3, 13, 13), float32]
  %p = nn.softmax(%d, axis=-1) : Tensor[(1, 3, 13, 13), float32]
  %y = matmul(%p, %v) : Tensor[(1, 3, 13, 7), float32]
  return %y"""),
])
def test_other_chains_stay(check_pass, why, body):
    text = f"""
def @main(%q: Tensor[(1, 3, 13, 5), float32], %kt: Tensor[(1, 3, 5, 13), float32], %v: Tensor[(1, 3, 13, 7), float32], %m: Tensor[(1, 1, 1, 13), float32]) {{{body}
}}"""
    check_pass(get_pass("FuseAttention"), text, text)


def _attention_onnx(s, t, heads, d, dv, mask_shape):
    """An exporter's attention (ViT / GPT-2 form): ``softmax((q * c) @ (k^T * c) + mask) @ v``."""
    from onnx import TensorProto, helper as h
    f = TensorProto.FLOAT
    ins = [h.make_tensor_value_info("q", f, [1, heads, s, d]),
           h.make_tensor_value_info("k", f, [1, heads, t, d]),
           h.make_tensor_value_info("v", f, [1, heads, t, dv]),
           h.make_tensor_value_info("m", f, list(mask_shape))]
    c = float(d) ** -0.25
    nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             h.make_node("Mul", ["q", "c"], ["qs"]), h.make_node("Mul", ["kt", "c"], ["ks"]),
             h.make_node("MatMul", ["qs", "ks"], ["sc"]), h.make_node("Add", ["sc", "m"], ["b"]),
             h.make_node("Softmax", ["b"], ["p"], axis=-1),
             h.make_node("MatMul", ["p", "v"], ["y"])]
    g = h.make_graph(nodes, "att", ins, [h.make_tensor_value_info("y", f, [1, heads, s, dv])],
                     [h.make_tensor("c", f, [1], [c])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("s, t, heads, d, dv, mask_shape", [
    (197, 197, 3, 64, 64, (1, 1, 1, 197)),   # ViT-Ti: 197 tokens, a key-tile tail
    (13, 71, 2, 9, 5, (1, 2, 13, 71)),       # odd everything, a full mask
    (7, 7, 1, 16, 16, (7, 1)),               # a rank-2 mask broadcast along the keys
])
def test_fused_attention_compiles_and_matches_onnxruntime(s, t, heads, d, dv, mask_shape):
    ort = pytest.importorskip("onnxruntime")
    import ember
    from ember.frontend import from_onnx
    from ember.graph.passes import PassContext
    from ember.graph.passes.pipeline import optimize
    m = _attention_onnx(s, t, heads, d, dv, mask_shape)
    mod, params = from_onnx(m)
    with PassContext(opt_level=3, disabled_pass=["FuseOps"]):
        opt, _ = optimize(mod, "llvm", params)
    assert "nn.attention" in opt.text() and "nn.softmax" not in opt.text()
    rng = np.random.default_rng(0)
    x = {"q": rng.standard_normal((1, heads, s, d)), "k": rng.standard_normal((1, heads, t, d)),
         "v": rng.standard_normal((1, heads, t, dv)),
         "m": np.where(rng.random(mask_shape) < 0.2, -1e4, 0.0)}
    x = {k: v.astype(np.float32) for k, v in x.items()}
    got = ember.compile(m, target="llvm -num-threads=2", executor="static").run(x)[0]
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
