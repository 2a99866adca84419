"""The transformer kernels (streaming attention, RMS/group normalization, rotary embedding) on
odd shapes (head sizes that are not multiples of the vector width, sequence tails past the key
tile, grouped-query heads, causal attention with a past cache, a single decode step), through
``ember.compile``, against onnx's reference evaluator (``onnx.reference``)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.tir.schedule.rules.attention import BK


def _model(op, inputs, outputs, opset, **attrs):
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _ in outputs], **attrs)
    g = helper.make_graph([node], op.lower(),
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, native, rtol=1e-4, atol=1e-5):
    cm = ember.compile(model)
    assert native + "(" in cm.graph_text
    got = cm.run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return cm


F = TensorProto.FLOAT


@pytest.mark.parametrize("b,h,hkv,s,past,d,dv,causal,mask,softcap", [
    (2, 6, 2, 19, 11, 13, 7, 1, "float3d", 0.0),     # GQA, odd head sizes, causal with past
    (1, 4, 1, BK * 2 + 3, 0, 20, 20, 1, None, 0.0),  # MQA, two key tiles + a tail
    (1, 8, 2, 1, 70, 16, 16, 1, None, 0.0),          # one decode step on a 70-key cache
    (1, 3, 3, 17, 5, 9, 11, 0, "bool", 30.0),        # bool mask with padding keys, softcap
])
def test_attention_odd_shapes(b, h, hkv, s, past, d, dv, causal, mask, softcap):
    rng = np.random.default_rng(0)
    t = s + past
    ins = [("Q", F, [b, h, s, d]), ("K", F, [b, hkv, s, d]), ("V", F, [b, hkv, s, dv])]
    feeds = {"Q": rng.standard_normal((b, h, s, d), np.float32),
             "K": rng.standard_normal((b, hkv, s, d), np.float32),
             "V": rng.standard_normal((b, hkv, s, dv), np.float32)}
    if mask == "float3d":
        ins.append(("attn_mask", F, [h, s, t]))
        feeds["attn_mask"] = rng.standard_normal((h, s, t)).astype(np.float32)
    elif mask == "bool":
        ins.append(("attn_mask", TensorProto.BOOL, [s, t - 2]))  # the last 2 keys padded
        feeds["attn_mask"] = rng.random((s, t - 2)) > 0.3
    else:
        ins.append(("", F, []))
    outs = [("Y", [b, h, s, dv])]
    if past:
        ins += [("past_key", F, [b, hkv, past, d]), ("past_value", F, [b, hkv, past, dv])]
        feeds["past_key"] = rng.standard_normal((b, hkv, past, d), np.float32)
        feeds["past_value"] = rng.standard_normal((b, hkv, past, dv), np.float32)
        outs += [("present_key", [b, hkv, t, d]), ("present_value", [b, hkv, t, dv])]
    ins = [i for i in ins if i[0]] if not past else ins
    node_inputs = [n for n, _, _ in ins]
    graph_inputs = [(n, ty, sh) for n, ty, sh in ins if n]
    node = helper.make_node("Attention", node_inputs, [n for n, _ in outs], is_causal=causal,
                            softcap=softcap)
    g = helper.make_graph([node], "att", [helper.make_tensor_value_info(n, ty, sh)
                                          for n, ty, sh in graph_inputs],
                          [helper.make_tensor_value_info(n, F, sh) for n, sh in outs])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    _check(model, feeds, "nn.attention")


def test_rms_norm_odd_row():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 37), np.float32)
    w = rng.standard_normal((37,), np.float32)
    m = _model("RMSNormalization", [("X", F, [3, 5, 37]), ("W", F, [37])], [("Y", [3, 5, 37])],
               23, epsilon=1e-6)
    _check(m, {"X": x, "W": w}, "nn.rms_norm")


def test_rms_norm_uses_row_reduction_schedule():
    from ember.graph.ir import TensorType
    from ember.ops import get_op
    from ember.tir.schedule.rules import schedule_default
    import ember.te as tem
    op = get_op("nn.rms_norm")
    x, w = tem.placeholder((64, 37), name="x"), tem.placeholder((37,), name="w")
    attrs = op.normalize_attrs({"axis": -1})
    y = op.compute([x, w], attrs, [TensorType((64, 37), "float32")])[0]
    f = schedule_default(tem.create_prim_func([x, w, y], "rms"), "llvm")
    assert f.attrs["schedule_rule"] == "row_reduction_rule"


@pytest.mark.parametrize("interleaved,rd,three_d", [(0, 6, 1), (1, 10, 0), (0, 0, 0)])
def test_rotary_odd(interleaved, rd, three_d):
    rng = np.random.default_rng(2)
    b, h, s, dh = 2, 3, 11, 10
    x = rng.standard_normal((b, s, h * dh) if three_d else (b, h, s, dh)).astype(np.float32)
    half = (rd or dh) // 2
    cos = rng.standard_normal((32, half)).astype(np.float32)
    sin = rng.standard_normal((32, half)).astype(np.float32)
    pos = rng.integers(0, 32, (b, s)).astype(np.int64)
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rd}
    if three_d:
        attrs["num_heads"] = h
    m = _model("RotaryEmbedding", [("X", F, list(x.shape)), ("cos", F, [32, half]),
                                   ("sin", F, [32, half]), ("pos", TensorProto.INT64, [b, s])],
               [("Y", list(x.shape))], 23, **attrs)
    _check(m, {"X": x, "cos": cos, "sin": sin, "pos": pos}, "nn.rotary_embedding")


def test_rotary_position_out_of_range_is_an_error():
    b, h, s, dh = 1, 1, 2, 4
    m = _model("RotaryEmbedding", [("X", F, [b, h, s, dh]), ("cos", F, [4, 2]),
                                   ("sin", F, [4, 2]), ("pos", TensorProto.INT64, [b, s])],
               [("Y", [b, h, s, dh])], 23)
    cm = ember.compile(m)
    z = np.zeros((4, 2), np.float32)
    with pytest.raises(ember.errors.InputError):
        cm.run({"X": np.zeros((b, h, s, dh), np.float32), "cos": z, "sin": z,
                "pos": np.array([[0, 9]], np.int64)})


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm_opsets(opset):
    rng = np.random.default_rng(3)
    n, c, g = 2, 6, 3
    x = rng.standard_normal((n, c, 5, 7)).astype(np.float32)
    ps = g if opset == 18 else c
    sc = rng.standard_normal((ps,)).astype(np.float32)
    bi = rng.standard_normal((ps,)).astype(np.float32)
    m = _model("GroupNormalization", [("X", F, [n, c, 5, 7]), ("scale", F, [ps]),
                                      ("bias", F, [ps])], [("Y", [n, c, 5, 7])], opset,
               num_groups=g, epsilon=1e-4)
    _check(m, {"X": x, "scale": sc, "bias": bi}, "nn.group_norm")


def test_attention_bad_heads_is_a_typed_error():
    m = _model("Attention", [("Q", F, [1, 5, 12]), ("K", F, [1, 5, 12]), ("V", F, [1, 5, 12])],
               [("Y", [1, 5, 12])], 23, q_num_heads=5, kv_num_heads=2)
    with pytest.raises(ember.errors.ShapeMismatchError, match="q_num_heads"):
        ember.compile(m)
