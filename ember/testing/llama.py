"""A Llama-style decoder written with ``onnx.helper`` (seeded random weights, nothing downloaded),
for tests and benchmarks of the transformer operators.

``llama_decoder(seq, past=0, ...)`` builds ``layers`` pre-norm decoder blocks (Touvron et al.,
"LLaMA", arXiv:2302.13971) as exporters write them at opset 23:

    h = RMSNormalization(x);  q, k, v = h @ Wq, h @ Wk, h @ Wv        (3-D, heads packed)
    q, k = RotaryEmbedding(q | k, cos, sin, position_ids, num_heads=...)
    a, present_key, present_value = Attention(q, k, v, past_key, past_value, is_causal=1,
                                              q_num_heads=heads, kv_num_heads=kv_heads)
    x = x + a @ Wo
    h = RMSNormalization(x);  x = x + (SiLU(h @ Wg) * (h @ Wu)) @ Wd

then a final RMSNormalization. SiLU-gating is ``Mul(Sigmoid)`` (onnxruntime 1.32 runs opset 23
but not SwiGLU-28, whose function body needs Swish-24), or the native ``SwiGLU`` op at opset 28
with ``native_swiglu=True``.

Inputs: ``x (1, seq, d)`` float32, ``position_ids (1, seq)`` int64 (``past + arange(seq)``)
and, with ``past > 0``, ``past_key_<l>`` / ``past_value_<l>`` ``(1, kv_heads, past, d/heads)``
per layer. Outputs: ``y (1, seq, d)``, then ``present_key_<l>`` / ``present_value_<l>``
``(1, kv_heads, past + seq, d/heads)`` per layer.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["llama_decoder", "llama_inputs"]


def llama_decoder(seq: int, past: int = 0, d: int = 512, heads: int = 8, kv_heads: int = 2,
                  ffn: int = 1408, layers: int = 2, max_pos: int = 4096, seed: int = 0,
                  native_swiglu: bool = False) -> onnx.ModelProto:
    """The decoder of the module doc; weights ``N(0, 1/fan_in)``, norm scales near 1,
    rotary caches for ``theta = 10000``.

    Raises:
        ValueError: ``d`` not a multiple of ``heads``, ``heads`` not of ``kv_heads``, or
            ``past + seq > max_pos``."""
    if d % heads or heads % kv_heads or past + seq > max_pos:
        raise ValueError(f"llama_decoder: need d % heads == 0, heads % kv_heads == 0 and "
                         f"past + seq <= max_pos (d={d}, heads={heads}, kv_heads={kv_heads}, "
                         f"past={past}, seq={seq}, max_pos={max_pos})")
    rng = np.random.default_rng(seed)
    dh = d // heads
    F = TensorProto.FLOAT
    nodes, inits = [], []

    def w(name, shape, scale=None):
        a = rng.standard_normal(shape).astype(np.float32)
        a *= scale if scale is not None else 1.0 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array(a, name))
        return name

    def norm_scale(name):
        inits.append(numpy_helper.from_array(
            (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32), name))
        return name

    def op(kind, ins, outs, **attrs):
        nodes.append(helper.make_node(kind, ins, outs, **attrs))
        return outs[0]

    inv = 1.0 / (10000.0 ** (np.arange(0, dh, 2) / dh))
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    inits.append(numpy_helper.from_array(np.cos(ang).astype(np.float32), "rope_cos"))
    inits.append(numpy_helper.from_array(np.sin(ang).astype(np.float32), "rope_sin"))
    inputs = [helper.make_tensor_value_info("x", F, [1, seq, d]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, seq])]
    outputs = []
    x = "x"
    for li in range(layers):
        p = f"l{li}_"
        h = op("RMSNormalization", [x, norm_scale(p + "attn_norm")], [p + "h"], axis=-1,
               epsilon=1e-5)
        q = op("MatMul", [h, w(p + "wq", (d, d))], [p + "q"])
        k = op("MatMul", [h, w(p + "wk", (d, kv_heads * dh))], [p + "k"])
        v = op("MatMul", [h, w(p + "wv", (d, kv_heads * dh))], [p + "v"])
        q = op("RotaryEmbedding", [q, "rope_cos", "rope_sin", "position_ids"], [p + "q_rot"],
               num_heads=heads)
        k = op("RotaryEmbedding", [k, "rope_cos", "rope_sin", "position_ids"], [p + "k_rot"],
               num_heads=kv_heads)
        att_in = [q, k, v]
        if past:
            att_in += ["", f"past_key_{li}", f"past_value_{li}"]
            for kind in ("key", "value"):
                inputs.append(helper.make_tensor_value_info(f"past_{kind}_{li}", F,
                                                            [1, kv_heads, past, dh]))
        a = op("Attention", att_in, [p + "att", f"present_key_{li}", f"present_value_{li}"],
               is_causal=1, q_num_heads=heads, kv_num_heads=kv_heads)
        for kind in ("key", "value"):
            outputs.append(helper.make_tensor_value_info(f"present_{kind}_{li}", F,
                                                         [1, kv_heads, past + seq, dh]))
        x = op("Add", [x, op("MatMul", [a, w(p + "wo", (d, d))], [p + "o"])], [p + "x1"])
        h = op("RMSNormalization", [x, norm_scale(p + "mlp_norm")], [p + "h2"], axis=-1,
               epsilon=1e-5)
        gate = op("MatMul", [h, w(p + "wg", (d, ffn))], [p + "gate"])
        up = op("MatMul", [h, w(p + "wu", (d, ffn))], [p + "up"])
        if native_swiglu:
            act = op("SwiGLU", [gate, up], [p + "act"])
        else:
            silu = op("Mul", [gate, op("Sigmoid", [gate], [p + "sig"])], [p + "silu"])
            act = op("Mul", [silu, up], [p + "act"])
        x = op("Add", [x, op("MatMul", [act, w(p + "wd", (ffn, d))], [p + "down"])],
               [p + "x2"])
    op("RMSNormalization", [x, norm_scale("final_norm")], ["y"], axis=-1, epsilon=1e-5)
    outputs.insert(0, helper.make_tensor_value_info("y", F, [1, seq, d]))
    g = helper.make_graph(nodes, "llama_decoder", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 28 if native_swiglu
                                                                   else 23)],
                             producer_name="ember.testing.llama")


def llama_inputs(model: onnx.ModelProto, seed: int = 1) -> dict:
    """Feeds for ``llama_decoder``'s model: ``x ~ N(0, 1)``, ``position_ids = past +
    arange(seq)``, past caches ``~ N(0, 1)``."""
    rng = np.random.default_rng(seed)
    feeds = {}
    past = 0
    for i in model.graph.input:
        shape = [dd.dim_value for dd in i.type.tensor_type.shape.dim]
        if i.name.startswith("past_"):
            past = shape[2]
    for i in model.graph.input:
        shape = [dd.dim_value for dd in i.type.tensor_type.shape.dim]
        if i.name == "position_ids":
            feeds[i.name] = (past + np.arange(shape[1], dtype=np.int64))[None, :]
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds
