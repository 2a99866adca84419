"""Seeded ONNX models for tests and benchmarks, built with ``onnx.helper`` (nothing downloaded).

- ``resnet18(seed)``: ResNet-18 v1 (Conv, BatchNormalization, Relu, MaxPool, Add residuals,
  GlobalAveragePool, Flatten, Gemm), opset 9.
- ``mobilenet_v2(seed)``: MobileNetV2 (depthwise Conv, BatchNormalization, Clip-11 with min/max
  as inputs, Add residuals, GlobalAveragePool, Reshape, Gemm), opset 13.
- ``bert_encoder(num_layers, hidden, heads, seq, seed)``: a BERT-style encoder as exporters write
  it: Gather embeddings of an int64 ``input_ids`` input, shape subgraphs
  ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, attention with MatMul/Div/Softmax, an
  additive mask built with Equal/Where/Cast/Unsqueeze, LayerNormalization decomposed into
  ReduceMean/Sub/Pow/Sqrt/Div (or the opset-17 ``LayerNormalization`` op with
  ``fused_layer_norm=True``), Erf-GELU, a Tanh pooler on a Slice/Squeeze of the first token,
  Expand/ConstantOfShape for position and token-type ids. Opset 11 to 21 (default 14).
- ``gpt2_decoder(num_layers, hidden, heads, seq, vocab, seed)``: a GPT-2-style decoder
  (pre-LayerNorm causal self-attention, GELU MLP, untied LM head), opset 14.
- ``bert_base(seq)``: 12 layers, hidden 768, 12 heads (for benchmarks).
- ``light_model(name)``: the onnx package's light models (``onnx/backend/test/data/light``),
  with ``light_model_inputs``, ``light_model_expected`` and ``light_model_tolerance`` (the
  input onnx's backend runner feeds them, the output shipped beside them and the tolerance of
  ``onnx/backend/test/data/real/test_*/data.json``).

Weights are seeded random, scaled so that activations stay O(1) through the whole network
(He-scaled convolutions, batch-norm statistics near the identity, 1/sqrt(fan_in) projections).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..zoo import LIGHT_MODELS, light_model_path

__all__ = ["resnet18", "mobilenet_v2", "bert_encoder", "bert_base", "gpt2_decoder", "LIGHT_MODELS",
           "light_model", "light_model_path", "light_model_inputs", "light_model_expected",
           "light_model_tolerance"]


class _GraphBuilder:
    """Accumulates ONNX nodes and seeded initializers with generated unique names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def init(self, hint: str, arr) -> str:
        """Add an initializer; returns its name."""
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def const_node(self, hint: str, arr) -> str:
        """A ``Constant`` node (as exporters write small constants); returns its output."""
        out = self.name(hint)
        self.nodes.append(helper.make_node("Constant", [], [out], name=out + "_node",
                                           value=numpy_helper.from_array(np.asarray(arr))))
        return out

    def op(self, op_type: str, inputs, n_out: int = 1, hint: str | None = None, **attrs):
        """Add a node; returns its output name (a list when ``n_out > 1``)."""
        base = self.name(hint or op_type.lower())
        outs = [base if n_out == 1 else f"{base}_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=base + "_node",
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs, outputs, opset: int) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="ember.testing.models")
        m.ir_version = min(m.ir_version, 8 if opset <= 18 else 9)
        onnx.checker.check_model(m)
        return m

    # weights ----------------------------------------------------------------------------------
    def normal(self, shape, std) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape, lo, hi) -> np.ndarray:
        return self.rng.uniform(lo, hi, shape).astype(np.float32)


# convolutional networks ------------------------------------------------------------------------

def _conv_bn(g: _GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int = 1,
             group: int = 1, gamma: tuple = (0.8, 1.2), pads: int | None = None) -> str:
    """Conv (no bias) + BatchNormalization with He-scaled weights and near-identity stats."""
    fan_in = cin // group * k * k
    w = g.init("conv_w", g.normal((cout, cin // group, k, k), np.sqrt(2.0 / fan_in)))
    p = k // 2 if pads is None else pads
    y = g.op("Conv", [x, w], hint="conv", kernel_shape=[k, k], strides=[stride, stride],
             pads=[p, p, p, p], group=group)
    scale = g.init("bn_scale", g.uniform((cout,), *gamma))
    bias = g.init("bn_bias", g.normal((cout,), 0.1))
    mean = g.init("bn_mean", g.normal((cout,), 0.1))
    var = g.init("bn_var", g.uniform((cout,), 0.8, 1.2))
    return g.op("BatchNormalization", [y, scale, bias, mean, var], hint="bn", epsilon=1e-5)


def _classifier(g: _GraphBuilder, x: str, c: int, num_classes: int, flatten: str,
                fc_scale: float = 1.0) -> str:
    pooled = g.op("GlobalAveragePool", [x], hint="gap")
    if flatten == "Flatten":
        flat = g.op("Flatten", [pooled], hint="flatten", axis=1)
    else:
        shape = g.init("flat_shape", np.array([0, -1], np.int64))
        flat = g.op("Reshape", [pooled, shape], hint="reshape")
    w = g.init("fc_w", g.normal((num_classes, c), fc_scale / np.sqrt(c)))
    b = g.init("fc_b", g.normal((num_classes,), 0.1))
    return g.op("Gemm", [flat, w, b], hint="fc", alpha=1.0, beta=1.0, transB=1)


def resnet18(seed: int = 0, batch: int = 1, image_size: int = 224, num_classes: int = 1000,
             opset: int = 9) -> onnx.ModelProto:
    """ResNet-18 v1 (basic blocks [2, 2, 2, 2]) with seeded random weights.

    Input ``data``: float32 ``(batch, 3, image_size, image_size)``; output ``logits``:
    ``(batch, num_classes)``. Opset 7 to 21 (default 9).
    """
    g = _GraphBuilder(seed)
    x = g.op("Relu", [_conv_bn(g, "data", 3, 64, 7, stride=2)], hint="relu")
    x = g.op("MaxPool", [x], hint="maxpool", kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512]):
        for block in range(2):
            stride = 2 if (stage > 0 and block == 0) else 1
            y = g.op("Relu", [_conv_bn(g, x, cin, cout, 3, stride)], hint="relu")
            # the last BN of a residual branch starts small, as in zero-init-gamma training
            y = _conv_bn(g, y, cout, cout, 3, gamma=(0.1, 0.3))
            short = x if (stride == 1 and cin == cout) else _conv_bn(g, x, cin, cout, 1, stride,
                                                                     pads=0)
            x = g.op("Relu", [g.op("Add", [y, short], hint="residual")], hint="relu")
            cin = cout
    _classifier(g, x, cin, num_classes, "Flatten", fc_scale=0.3)  # features are ~3x unit scale
    g.nodes[-1].output[0] = "logits"
    inp = helper.make_tensor_value_info("data", TensorProto.FLOAT,
                                        [batch, 3, image_size, image_size])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, num_classes])
    return g.model("resnet18", [inp], [out], opset)


_MBV2_SETTINGS = [  # expansion t, channels c, repeats n, first stride s
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
    (6, 320, 1, 1)]


def mobilenet_v2(seed: int = 0, batch: int = 1, image_size: int = 224, num_classes: int = 1000,
                 opset: int = 13) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0) with seeded random weights; ReLU6 is ``Clip`` with ``min``/``max``
    inputs (opset >= 11), alternately from initializers and ``Constant`` nodes.

    Input ``input``: float32 ``(batch, 3, image_size, image_size)``; output ``output``:
    ``(batch, num_classes)``. Opset 11 to 21 (default 14).
    """
    if opset < 11:
        raise ValueError("mobilenet_v2 uses Clip with min/max inputs: opset >= 11")
    g = _GraphBuilder(seed)
    lo_i, hi_i = g.init("clip_min", np.array(0.0, np.float32)), \
        g.init("clip_max", np.array(6.0, np.float32))
    lo_c, hi_c = g.const_node("clip_min", np.array(0.0, np.float32)), \
        g.const_node("clip_max", np.array(6.0, np.float32))
    count = [0]

    def relu6(t):
        count[0] += 1
        lo, hi = (lo_i, hi_i) if count[0] % 2 else (lo_c, hi_c)
        return g.op("Clip", [t, lo, hi], hint="relu6")

    x = relu6(_conv_bn(g, "input", 3, 32, 3, stride=2))
    cin = 32
    for t, c, n, s in _MBV2_SETTINGS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = relu6(_conv_bn(g, y, cin, hidden, 1, pads=0))
            y = relu6(_conv_bn(g, y, hidden, hidden, 3, stride, group=hidden))
            y = _conv_bn(g, y, hidden, c, 1, pads=0, gamma=(0.3, 0.6))
            if stride == 1 and cin == c:
                y = g.op("Add", [x, y], hint="residual")
            x, cin = y, c
    x = relu6(_conv_bn(g, x, cin, 1280, 1, pads=0))
    _classifier(g, x, 1280, num_classes, "Reshape")
    g.nodes[-1].output[0] = "output"
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                        [batch, 3, image_size, image_size])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, num_classes])
    return g.model("mobilenet_v2", [inp], [out], opset)


# BERT-style encoder ------------------------------------------------------------------------------

class _Bert:
    """Helpers that write ONNX the way framework exporters do, for a given opset."""

    def __init__(self, g: _GraphBuilder, opset: int):
        self.g = g
        self.opset = opset

    def i64(self, hint, values) -> str:
        return self.g.init(hint, np.array(values, np.int64))

    def unsqueeze(self, x, axes):
        if self.opset >= 13:
            return self.g.op("Unsqueeze", [x, self.i64("axes", axes)], hint="unsqueeze")
        return self.g.op("Unsqueeze", [x], hint="unsqueeze", axes=list(axes))

    def squeeze(self, x, axes):
        if self.opset >= 13:
            return self.g.op("Squeeze", [x, self.i64("axes", axes)], hint="squeeze")
        return self.g.op("Squeeze", [x], hint="squeeze", axes=list(axes))

    def reduce_mean(self, x, axes):
        if self.opset >= 18:
            return self.g.op("ReduceMean", [x, self.i64("axes", axes)], hint="mean", keepdims=1)
        return self.g.op("ReduceMean", [x], hint="mean", axes=list(axes), keepdims=1)

    def dim(self, x, axis) -> str:
        """``Unsqueeze(Gather(Shape(x), axis), 0)``: one dim of x as a 1-element int64 tensor."""
        shp = self.g.op("Shape", [x], hint="shape")
        d = self.g.op("Gather", [shp, self.g.const_node("axis", np.array(axis, np.int64))],
                      hint="dim", axis=0)
        return self.unsqueeze(d, [0])

    def reshape(self, x, parts) -> str:
        """Reshape to ``Concat(parts)``: each part a dim() output or a constant list."""
        ins = [p if isinstance(p, str) else self.i64("shape_part", p) for p in parts]
        shape = self.g.op("Concat", ins, hint="target_shape", axis=0)
        return self.g.op("Reshape", [x, shape], hint="reshape")

    def linear(self, x, din, dout, std=None) -> str:
        w = self.g.init("W", self.g.normal((din, dout), std or 1.0 / np.sqrt(din)))
        b = self.g.init("b", self.g.normal((dout,), 0.02))
        return self.g.op("Add", [self.g.op("MatMul", [x, w], hint="matmul"), b], hint="bias")

    def layer_norm(self, x, hidden, fused: bool) -> str:
        g = self.g
        gamma = g.init("ln_gamma", g.uniform((hidden,), 0.8, 1.2))
        beta = g.init("ln_beta", g.normal((hidden,), 0.05))
        if fused:
            return g.op("LayerNormalization", [x, gamma, beta], hint="layer_norm", axis=-1,
                        epsilon=1e-12)
        mean = self.reduce_mean(x, [-1])
        d = g.op("Sub", [x, mean], hint="centered")
        var = self.reduce_mean(g.op("Pow", [d, g.const_node("two", np.array(2.0, np.float32))],
                                    hint="sq"), [-1])
        std = g.op("Sqrt", [g.op("Add", [var, g.init("eps", np.array(1e-12, np.float32))],
                                 hint="var_eps")], hint="std")
        y = g.op("Div", [d, std], hint="normed")
        return g.op("Add", [g.op("Mul", [y, gamma], hint="scaled"), beta], hint="ln_out")

    def attention(self, x, hidden, heads, mask, scale, bdim, sdim) -> str:
        """Multi-head self-attention of ``x`` (Q/K/V projections, ``Softmax(QK^T / scale +
        mask) V``, output projection); ``bdim``/``sdim`` are reshape parts for batch and seq."""
        g, dh = self.g, hidden // heads

        def heads_view(t, perm):
            r = self.reshape(t, [bdim, sdim, [heads], [dh]])
            return g.op("Transpose", [r], hint="heads", perm=perm)

        q = heads_view(self.linear(x, hidden, hidden), [0, 2, 1, 3])
        k = heads_view(self.linear(x, hidden, hidden), [0, 2, 3, 1])
        v = heads_view(self.linear(x, hidden, hidden), [0, 2, 1, 3])
        scores = g.op("Div", [g.op("MatMul", [q, k], hint="qk"), scale], hint="scores")
        probs = g.op("Softmax", [g.op("Add", [scores, mask], hint="masked")], hint="probs",
                     axis=-1 if self.opset >= 13 else 3)
        ctx = g.op("MatMul", [probs, v], hint="context")
        ctx = g.op("Transpose", [ctx], hint="context_t", perm=[0, 2, 1, 3])
        ctx = self.reshape(ctx, [bdim, sdim, [hidden]])
        return self.linear(ctx, hidden, hidden)

    def gelu(self, x) -> str:
        g = self.g
        e = g.op("Erf", [g.op("Div", [x, g.init("sqrt2", np.array(np.sqrt(2.0), np.float32))],
                              hint="gelu_div")], hint="erf")
        one = g.init("one", np.array(1.0, np.float32))
        half = g.init("half", np.array(0.5, np.float32))
        return g.op("Mul", [g.op("Mul", [x, g.op("Add", [e, one], hint="gelu_add")],
                                 hint="gelu_mul"), half], hint="gelu")


def _transformer_start(hidden, heads, intermediate, seed, opset):
    """``(intermediate size, head dim, graph builder, exporter helpers)`` of a transformer."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not divisible by heads {heads}")
    g = _GraphBuilder(seed)
    return intermediate or 4 * hidden, hidden // heads, g, _Bert(g, opset)


def bert_encoder(num_layers: int = 4, hidden: int = 256, heads: int = 4, seq: int = 128,
                 seed: int = 0, batch: int = 1, vocab: int = 1000, max_position: int = 512,
                 intermediate: int | None = None, opset: int = 14,
                 fused_layer_norm: bool = False) -> onnx.ModelProto:
    """A BERT-style encoder with seeded random weights, written as exporters write BERT.

    Inputs: ``input_ids`` int64 ``(batch, seq)`` (values in ``[0, vocab)``) and
    ``attention_mask`` int64 ``(batch, seq)`` (1 = attend, 0 = padding). Outputs:
    ``last_hidden_state`` float32 ``(batch, seq, hidden)`` and ``pooler_output`` float32
    ``(batch, hidden)``. ``fused_layer_norm`` uses the ``LayerNormalization`` op (opset >= 17)
    instead of its ReduceMean/Sub/Pow/Sqrt/Div decomposition. Opset 11 to 21.
    """
    if not 11 <= opset <= 21:
        raise ValueError(f"bert_encoder supports opsets 11 to 21, not {opset}")
    if fused_layer_norm and opset < 17:
        raise ValueError("LayerNormalization needs opset >= 17")
    inter, dh, g, b = _transformer_start(hidden, heads, intermediate, seed, opset)

    # embeddings: word + position (Slice of a range, Expand to the batch) + token type (zeros)
    word = g.op("Gather", [g.init("word_embeddings", g.normal((vocab, hidden), 0.5)),
                           "input_ids"], hint="word_emb", axis=0)
    seq_len = b.dim("input_ids", 1)
    pos_ids = g.op("Slice", [g.init("position_ids", np.arange(max_position, dtype=np.int64)[None]),
                             b.i64("starts", [0]), seq_len, b.i64("axes", [1])], hint="pos_ids")
    pos_ids = g.op("Expand", [pos_ids, g.op("Shape", [ "input_ids"], hint="ids_shape")],
                   hint="pos_ids_b")
    pos = g.op("Gather", [g.init("position_embeddings", g.normal((max_position, hidden), 0.5)),
                          pos_ids], hint="pos_emb", axis=0)
    type_ids = g.op("ConstantOfShape", [g.op("Shape", ["input_ids"], hint="ids_shape")],
                    hint="token_type_ids",
                    value=numpy_helper.from_array(np.zeros(1, np.int64)))
    typ = g.op("Gather", [g.init("token_type_embeddings", g.normal((2, hidden), 0.5)), type_ids],
               hint="type_emb", axis=0)
    x = g.op("Add", [g.op("Add", [word, pos], hint="emb_sum"), typ], hint="emb")
    x = b.layer_norm(x, hidden, fused_layer_norm)

    # additive attention mask (batch, 1, 1, seq): 0 where attended, -10000 at padding
    pad = g.op("Equal", ["attention_mask", b.i64("zero", 0)], hint="is_pad")
    neg = g.op("Cast", [g.op("Where", [pad, b.i64("neg", -10000), b.i64("zero", 0)],
                             hint="mask_i64")], hint="mask_f", to=TensorProto.FLOAT)
    mask = b.unsqueeze(neg, [1, 2])
    scale = g.init("sqrt_dh", np.array(np.sqrt(dh), np.float32))

    for _ in range(num_layers):
        bdim, sdim = b.dim(x, 0), b.dim(x, 1)

        attn = b.attention(x, hidden, heads, mask, scale, bdim, sdim)
        x = b.layer_norm(g.op("Add", [attn, x], hint="attn_residual"), hidden, fused_layer_norm)
        h = b.gelu(b.linear(x, hidden, inter))
        ffn = b.linear(h, inter, hidden)
        x = b.layer_norm(g.op("Add", [ffn, x], hint="ffn_residual"), hidden, fused_layer_norm)

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output_node"))
    first = g.op("Slice", [x, b.i64("starts", [0]), b.i64("ends", [1]), b.i64("axes", [1])],
                 hint="first_token")
    first = b.squeeze(first, [1])
    pooled = g.op("Tanh", [b.linear(first, hidden, hidden)], hint="pooler")
    g.nodes.append(helper.make_node("Identity", [pooled], ["pooler_output"], name="pooler_node"))

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, seq])]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                             [batch, seq, hidden]),
               helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [batch, hidden])]
    return g.model("bert_encoder", inputs, outputs, opset)


def bert_base(seq: int = 128, seed: int = 0, batch: int = 1, opset: int = 14
              ) -> onnx.ModelProto:
    """BERT-base shaped encoder (12 layers, hidden 768, 12 heads, vocab 30522) for benchmarks."""
    return bert_encoder(num_layers=12, hidden=768, heads=12, seq=seq, seed=seed, batch=batch,
                        vocab=30522, opset=opset)


def gpt2_decoder(num_layers: int = 2, hidden: int = 64, heads: int = 4, seq: int = 16,
                 seed: int = 0, batch: int = 1, vocab: int = 256, max_position: int = 64,
                 intermediate: int | None = None, opset: int = 14) -> onnx.ModelProto:
    """A GPT-2-style decoder with seeded random weights (Radford et al., 2019): token and
    position embeddings (Gather), pre-LayerNorm blocks of causal self-attention (separate Q/K/V
    projections, an additive causal mask, Softmax) and an Erf-GELU MLP with residuals, a final
    LayerNorm and an untied LM head (MatMul to the vocabulary).

    Input: ``input_ids`` int64 ``(batch, seq)`` in ``[0, vocab)``. Output: ``logits`` float32
    ``(batch, seq, vocab)``. Opset 11 to 16 (LayerNorm decomposed).
    """
    inter, dh, g, b = _transformer_start(hidden, heads, intermediate, seed, opset)
    tok = g.op("Gather", [g.init("wte", g.normal((vocab, hidden), 0.5)), "input_ids"],
               hint="tok_emb", axis=0)
    pos = g.op("Gather", [g.init("wpe", g.normal((max_position, hidden), 0.5)),
                          g.init("position_ids", np.arange(seq, dtype=np.int64)[None])],
               hint="pos_emb", axis=0)
    x = g.op("Add", [tok, pos], hint="emb")
    causal = np.triu(np.full((seq, seq), -10000.0, np.float32), 1)[None, None]
    mask = g.init("causal_mask", causal)
    scale = g.init("sqrt_dh", np.array(np.sqrt(dh), np.float32))

    for _ in range(num_layers):
        h = b.layer_norm(x, hidden, False)
        x = g.op("Add", [x, b.attention(h, hidden, heads, mask, scale, [batch], [seq])],
                 hint="attn_residual")
        h = b.layer_norm(x, hidden, False)
        x = g.op("Add", [x, b.linear(b.gelu(b.linear(h, hidden, inter)), inter, hidden)],
                 hint="mlp_residual")
    x = b.layer_norm(x, hidden, False)
    lm = g.init("lm_head", g.normal((hidden, vocab), 1.0 / np.sqrt(hidden)))
    g.nodes.append(helper.make_node("MatMul", [x, lm], ["logits"], name="lm_head_node"))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, vocab])]
    return g.model("gpt2_decoder", inputs, outputs, opset)


def bert_inputs(model: onnx.ModelProto, seed: int = 0, pad: int = 0) -> dict[str, np.ndarray]:
    """Seeded ``input_ids`` (below the embedding table's size) and an ``attention_mask`` whose
    last ``pad`` positions are padding, shaped as the model's inputs."""
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in model.graph.input}
    vocab = next(numpy_helper.to_array(t).shape[0] for t in model.graph.initializer
                 if t.name.startswith("word_embeddings"))
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, shapes["input_ids"]).astype(np.int64)
    mask = np.ones(shapes["attention_mask"], np.int64)
    if pad:
        mask[..., -pad:] = 0
    return {"input_ids": ids, "attention_mask": mask}


# the onnx package's light models ---------------------------------------------------------------

def _onnx_data_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def light_model(name: str) -> onnx.ModelProto:
    """The onnx package's light model ``name`` (e.g. ``"resnet50"``): the real architecture
    with its weights as ``ConstantOfShape`` nodes (``ember.zoo.randomized_light_model`` gives
    it random weights).

    Raises:
        ModelLoadError: unknown name.
    """
    return onnx.load(light_model_path(name))


def light_model_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The input onnx's backend test runner feeds a light model: for each graph input (not an
    initializer), ``arange(n) / n`` in float32 shaped as the input (unknown dims as 1)."""
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                      for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        out[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return out


def light_model_expected(name: str) -> list[np.ndarray]:
    """The reference outputs shipped beside the light model (``light_<name>_output_0.pb``...)."""
    base = light_model_path(name)[:-len(".onnx")]
    outs, k = [], 0
    while True:
        p = f"{base}_output_{k}.pb"
        if not os.path.exists(p):
            break
        outs.append(numpy_helper.to_array(onnx.load_tensor(p)))
        k += 1
    return outs


def light_model_tolerance(name: str) -> tuple[float, float]:
    """``(rtol, atol)`` from ``onnx/backend/test/data/real/test_<name>/data.json`` (the onnx
    backend runner's defaults 1e-3 / 1e-7 where a field is missing)."""
    name = os.path.basename(light_model_path(name))[len("light_"):-len(".onnx")]
    p = os.path.join(_onnx_data_dir(), "real", f"test_{name}", "data.json")
    with open(p) as f:
        data = json.load(f)
    return float(data.get("rtol", 1e-3)), float(data.get("atol", 1e-7))
