"""A Llama-style decoder (``ember.testing.llama``: RMSNormalization, RotaryEmbedding,
Attention-23 with grouped-query heads and a KV cache, SiLU-gated MLP) through ``ember.compile``
against onnxruntime (1.32 runs opset-23 Attention, RMSNormalization and RotaryEmbedding), at
rtol 1e-4 / atol 1e-5, with the native operators in the compiled graph."""

import numpy as np
import pytest

import ember
from ember.testing.llama import llama_decoder, llama_inputs

ort = pytest.importorskip("onnxruntime")


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _compare(model, feeds, ref_model=None):
    cm = ember.compile(model)
    for op in ("nn.attention(", "nn.rms_norm(", "nn.rotary_embedding("):
        assert op in cm.graph_text, op
    got = cm.run(feeds)
    want = _ort(ref_model or model, feeds)
    assert len(got) == len(want)
    for g, w, o in zip(got, want, model.graph.output):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=o.name)
    return cm


def test_small_decoder_with_cache():
    m = llama_decoder(seq=40, past=24, d=128, heads=4, kv_heads=2, ffn=160, max_pos=128)
    _compare(m, llama_inputs(m))


def test_native_swiglu_matches_sigmoid_form():
    kw = dict(seq=9, past=0, d=64, heads=4, kv_heads=1, ffn=96, max_pos=64)
    native = llama_decoder(native_swiglu=True, **kw)
    cm = _compare(native, llama_inputs(native), ref_model=llama_decoder(**kw))
    assert "nn.swiglu(" in cm.graph_text


@pytest.mark.slow(reason="d=512 decoder, two compiles (~30 s)")
@pytest.mark.parametrize("seq,past", [(128, 0), (1, 128)])
def test_decoder_d512_seq128_and_decode(seq, past):
    m = llama_decoder(seq, past)
    _compare(m, llama_inputs(m))


@pytest.mark.slow(reason="d=512 decoder on 1024 tokens")
def test_decoder_d512_seq1024():
    m = llama_decoder(1024)
    _compare(m, llama_inputs(m))
