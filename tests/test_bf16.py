"""bf16 compute (``quantize="bf16"``, ToMixedPrecision with bfloat16): the ``vdpbf16ps`` gemm
micro-kernel against NumPy references that round the inputs to bf16 and accumulate in float
(tight tolerances: only the summation order differs), odd shapes and lane tails, the
vectorized bf16 rounding against ml_dtypes bit for bit, whole models against float32, and
the float32 fallback on a CPU without AVX512_BF16."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.graph.ir import IRModule
from ember.graph.passes import PassContext
from ember.target import Target
from ember.tir.schedule.rules.gemm import BF16_FEATURES

BF16 = ml_dtypes.bfloat16
UKR = "ember_ukr_gemm_avx512_bf16_"
HOST_BF16 = Target("llvm").isa == "avx512" and BF16_FEATURES <= Target("llvm").features
needs_bf16 = pytest.mark.skipif(not HOST_BF16, reason="the host CPU has no AVX512_BF16 "
                                                      "(vdpbf16ps)")


def _sum_bound(a, b):
    """|a| @ |b| in float64: the scale of a float32 accumulation error bound."""
    return np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))


def _dense_module(m, k, n, epilogue):
    tail = {"none": "  return %2",
            "bias_relu": (f"  %3 = add(%2, %b) : Tensor[({m}, {n}), float32]\n"
                          f"  %4 = nn.relu(%3) : Tensor[({m}, {n}), float32]\n  return %4")}
    return IRModule.from_text(f"""
def @main(%x: Tensor[({m}, {k}), bfloat16], %w: Tensor[({n}, {k}), bfloat16], %b: Tensor[({n},), float32]) {{
  %0 = cast(%x, dtype="float32") : Tensor[({m}, {k}), float32]
  %1 = cast(%w, dtype="float32") : Tensor[({n}, {k}), float32]
  %2 = nn.gemm(%0, %1, alpha=1.0, beta=1.0, trans_a=0, trans_b=1) : Tensor[({m}, {n}), float32]
{tail[epilogue]}
}}""")


@needs_bf16
@pytest.mark.parametrize("m,k,n,epilogue", [
    (64, 128, 96, "bias_relu"),   # full 16-lane vectors, ReLU/bias epilogue in float32
    (7, 18, 45, "none"),          # odd rows, a lane tail of 13 columns, 9 K pairs
    (33, 250, 17, "bias_relu"),   # a 1-lane tail vector, long odd-pair reduction
])
def test_bf16_gemm_microkernel_matches_rounded_reference(m, k, n, epilogue):
    rng = np.random.default_rng(m * k + n)
    x = rng.standard_normal((m, k)).astype(BF16)
    w = rng.standard_normal((n, k)).astype(BF16)
    b = rng.standard_normal(n).astype(np.float32)
    model = ember.build(_dense_module(m, k, n, epilogue), "llvm", {"w": w, "b": b})
    assert UKR in model.source, "the bf16 GEMM should run on the vdpbf16ps micro-kernel"
    y, = model.run({"x": x})
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    if epilogue == "bias_relu":
        ref = np.maximum(ref + b, 0)
    bound = _sum_bound(x, w.T) + np.abs(b)
    assert y.dtype == np.float32
    np.testing.assert_array_less(np.abs(y - ref), 1e-6 * bound + 1e-30)


def _conv_module(n, h, w_, c, o, k, pad, stride):
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w_ + 2 * pad - k) // stride + 1
    return IRModule.from_text(f"""
def @main(%x: Tensor[({n}, {h}, {w_}, {c}), bfloat16], %w: Tensor[({o}, {c}, {k}, {k}), bfloat16]) {{
  %0 = cast(%x, dtype="float32") : Tensor[({n}, {h}, {w_}, {c}), float32]
  %1 = cast(%w, dtype="float32") : Tensor[({o}, {c}, {k}, {k}), float32]
  %2 = nn.conv(%0, %1, strides=[{stride}, {stride}], pads=[{pad}, {pad}, {pad}, {pad}], dilations=[1, 1], group=1, data_layout="NHWC", out_layout=null) : Tensor[({n}, {oh}, {ow}, {o}), float32]
  return %2
}}"""), oh, ow


@needs_bf16
@pytest.mark.parametrize("h,c,o,k,pad,stride", [
    (9, 16, 40, 3, 1, 1),   # padded 3x3 (the pad stage stays bf16), tail of 8 lanes
    (11, 6, 32, 1, 0, 2),   # strided 1x1, 3 channel pairs
    (8, 64, 64, 3, 0, 1),   # unpadded 3x3
    (7, 1024, 64, 1, 0, 1),  # a bf16 1x1 over 1024 channels: not K-blocked (KBLOCK_MIN_K x 2)
    (7, 2048, 32, 1, 0, 1),  # over 2048: K-blocked (the whole image's accumulators)
])
def test_bf16_conv_nhwc_matches_rounded_reference(h, c, o, k, pad, stride):
    rng = np.random.default_rng(h + c + o)
    mod, oh, ow = _conv_module(1, h, h, c, o, k, pad, stride)
    x = rng.standard_normal((1, h, h, c)).astype(BF16)
    w = rng.standard_normal((o, c, k, k)).astype(BF16)
    model = ember.build(mod, "llvm", {"w": w})
    assert UKR in model.source
    if c * k * k >= 1024:  # K-blocked: one float32 buffer of the whole image per channel tile
        blocked = any(int(v) >= oh * ow * 16 for v in
                      re.findall(r"float acc\d+\[(\d+)\]", model.source))
        assert blocked == (c * k * k >= 2048), c * k * k
    y, = model.run({"x": x})
    xp = np.pad(x.astype(np.float64), [(0, 0), (pad, pad), (pad, pad), (0, 0)])
    cols = np.stack([xp[0, i * stride:i * stride + k, j * stride:j * stride + k, :]
                     for i in range(oh) for j in range(ow)])          # (P, k, k, C)
    wm = w.astype(np.float64).transpose(2, 3, 1, 0).reshape(k * k * c, o)
    a = cols.reshape(len(cols), -1)
    ref = (a @ wm).reshape(1, oh, ow, o)
    bound = (np.abs(a) @ np.abs(wm)).reshape(ref.shape)
    np.testing.assert_array_less(np.abs(y - ref), 1e-6 * bound + 1e-30)


def test_vectorized_bf16_rounding_matches_ml_dtypes():
    # 40 elements: two 16-lane vector steps and a scalar remainder of 8 (same bits both ways)
    x = np.array([1.0, 1.00390625, 1.01171875, -3.3e-5, 65504.0, np.inf, -np.inf, 3.4e38,
                  1.0078125, 1.0234375, -2.5, 0.0, -0.0, 1e-3, 7.0, 3.0] * 2
                 + [1.00390625, 1.01171875, -1e10, 5e-3, 2.0, 9.9, -7.7, 1.5], np.float32)
    n = len(x)
    mod = IRModule.from_text(f"""
def @main(%x: Tensor[({n},), float32]) {{
  %0 = cast(%x, dtype="bfloat16") : Tensor[({n},), bfloat16]
  %1 = add(%0, %0) : Tensor[({n},), bfloat16]
  return %1
}}""")
    with PassContext(opt_level=2):
        model = ember.build(mod)
    assert "ember_vst_bf16_" in model.source or Target("llvm").isa == "scalar"
    got, = model.run({"x": x})
    xb = x.astype(BF16)
    want = (xb.astype(np.float32) + xb.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def _ref_bf16_bits(u):
    """The reference float32 -> bfloat16 rounding (``ember_enc_bfloat16``) on uint32 bit
    patterns: round to nearest even, denormals rounded like any value, NaN quieted (bit 6)."""
    u = u.astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    q = ((u >> 16) | 0x40) & 0xFFFF
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, q, r).astype(np.uint16)


def _rounding_patterns():
    """Bit patterns for the native (``vcvtneps2bf16``) rounding: every edge class (zeros,
    denormals around each rounding boundary, the smallest normals, ties to even both ways,
    overflow to infinity, infinities, signalling and quiet NaNs with payloads only in the low
    half), 16-lane blocks mixing denormal and normal lanes (the fallback blend), a strided
    sweep of all 2^32 patterns, and a length that leaves a scalar remainder."""
    edge = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00007FFF, 0x00008000, 0x00008001,
            0x00017FFF, 0x00018000, 0x00018001, 0x007F7FFF, 0x007F8000, 0x007FFFFF, 0x807FFFFF,
            0x00800000, 0x80800000, 0x00808000, 0x00818000, 0x3F808000, 0x3F818000, 0x3F808001,
            0x3F7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
            0x7F800001, 0x7F80FFFF, 0x7FBFFFFF, 0x7FC00000, 0xFFC00001, 0xFFFFFFFF, 0x7F810000]
    rng = np.random.default_rng(7)
    mixed = rng.integers(0, 1 << 32, 16 * 64, dtype=np.uint64)
    den = rng.random(len(mixed)) < 0.3
    mixed[den] &= 0x807FFFFF  # a zero exponent: a denormal (or zero) in some lanes
    sweep = np.arange(0, 1 << 32, 65521 * 7, dtype=np.uint64)
    pats = np.concatenate([np.array(edge * 3, np.uint64), mixed, sweep,
                           np.arange(0, 1 << 32, (1 << 32) // 4099, dtype=np.uint64)[:4099]])
    return pats.astype(np.uint32)


def test_vectorized_bf16_rounding_matches_reference_bits():
    # the rounding as the vectorized code emits it: a store (vst) and an in-register rounding
    # read back as float32 (vrnd: here the doubling's operand), on vcvtneps2bf16 where the
    # compiler targets AVX512_BF16 (with the fallback for denormal lanes), else the integer code
    u = _rounding_patterns()
    x = u.view(np.float32)
    n = len(x)
    mod = IRModule.from_text(f"""
def @main(%x: Tensor[({n},), float32]) {{
  %0 = cast(%x, dtype="bfloat16") : Tensor[({n},), bfloat16]
  %1 = add(%0, %0) : Tensor[({n},), bfloat16]
  return %0, %1
}}""")
    with PassContext(opt_level=2):
        model = ember.build(mod)
    if HOST_BF16:
        assert "_mm512_cvtneps_pbh" in model.source
    y0, y1 = model.run({"x": x})
    want0 = _ref_bf16_bits(u)
    np.testing.assert_array_equal(y0.view(np.uint16), want0)
    r = (want0.astype(np.uint32) << 16).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        d = r + r
    want1 = _ref_bf16_bits(d.view(np.uint32))
    got1 = y1.view(np.uint16)
    nan = np.isnan(d)
    np.testing.assert_array_equal(got1[~nan], want1[~nan])
    assert np.isnan(y1[nan].astype(np.float32)).all()


def _bf16_round(a):
    return np.asarray(a, np.float32).astype(BF16).astype(np.float64)


def _conv_ref(x, w, pad=0, stride=1):
    """NCHW convolution in float64 (``x`` (N, C, H, W), ``w`` (O, C, k, k))."""
    n, c, h, w_ = x.shape
    o, _, k, _ = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = (h + 2 * pad - k) // stride + 1, (w_ + 2 * pad - k) // stride + 1
    cols = np.stack([xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                     for i in range(k) for j in range(k)], axis=2)       # N, C, k*k, oh, ow
    wm = w.reshape(o, c, k * k)
    return np.einsum("nckhw,ock->nohw", cols, wm), np.einsum(
        "nckhw,ock->nohw", np.abs(cols), np.abs(wm))


@needs_bf16
def test_quantize_bf16_rounds_each_epilogue_once():
    # conv -> +bias -> ReLU (h1), conv(h1) -> +bias -> +h1 -> ReLU (h2), 1x1 conv(h2) (y):
    # inputs and weights in {-1, 0, 1} and biases in 64ths (9 significant bits: not bf16 values)
    # keep every accumulation exact in float32, so each stored activation is determined: the
    # float32 epilogue result (bias in float32) rounded to bf16 once. A rounding after the bias
    # and again after the residual add, or a bias rounded to bf16, differ in some elements.
    rng = np.random.default_rng(11)

    def bias(n):
        return (rng.choice([-1, 1], n) * rng.integers(256, 512, n) / 64).astype(np.float32)
    x = rng.integers(-1, 2, (1, 16, 10, 10)).astype(np.float32)
    w1 = rng.integers(-1, 2, (32, 16, 3, 3)).astype(np.float32)
    w2 = rng.integers(-1, 2, (32, 32, 3, 3)).astype(np.float32)
    w3 = rng.integers(-1, 2, (24, 32, 1, 1)).astype(np.float32)
    b1, b2 = bias(32), bias(32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["h1"]),
         helper.make_node("Conv", ["h1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c2", "h1"], ["s2"]),
         helper.make_node("Relu", ["s2"], ["h2"]),
         helper.make_node("Conv", ["h2", "w3"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 10, 10])],
        [numpy_helper.from_array(a, n) for a, n in
         ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3"))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    q = ember.compile(model, quantize="bf16")
    assert q.info["quantization"]["bf16_kernels"] == 3
    got, = q.run({"x": x})
    c1, s1 = _conv_ref(x.astype(np.float64), w1.astype(np.float64), pad=1)
    h1 = _bf16_round(np.maximum(c1 + b1[:, None, None], 0))
    c2, s2 = _conv_ref(h1, w2.astype(np.float64), pad=1)
    h2 = _bf16_round(np.maximum(c2 + b2[:, None, None] + h1, 0))
    ref, s3 = _conv_ref(h2, w3.astype(np.float64))
    for s_ in (s1, s2, s3):  # every partial sum a multiple of 1/64 under 2^18: exact in float32
        assert s_.max() + 8 < 2 ** 17
    assert (h1 != np.maximum(c1 + b1[:, None, None], 0)).any()  # the roundings are not moot
    assert (h2 != np.maximum(c2 + b2[:, None, None] + h1, 0)).any()
    np.testing.assert_array_equal(got, ref)  # the output itself is float32, not rounded


@needs_bf16
@pytest.mark.parametrize("h,stride,pad,k,o", [(20, 2, 3, 7, 64), (9, 1, 1, 3, 24)])
def test_quantize_bf16_three_channel_stem_runs_on_vdpbf16ps(h, stride, pad, k, o):
    # a 3-channel convolution (ResNet's 7x7 stem; an odd 3x3 with a lane tail of 8): padded to
    # 4 channels (a zero input channel and zero weights), so the pair loop applies
    rng = np.random.default_rng(h + o)
    x = rng.standard_normal((1, 3, h, h)).astype(np.float32)
    w = rng.standard_normal((o, 3, k, k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    oh = (h + 2 * pad - k) // stride + 1
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, oh, oh])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    q = ember.compile(model, quantize="bf16")
    assert q.info["quantization"]["bf16_kernels"] == 1
    got, = q.run({"x": x})
    ref, bound = _conv_ref(_bf16_round(x), _bf16_round(w), pad=pad, stride=stride)
    ref = np.maximum(ref + b[:, None, None], 0)
    assert got.shape == ref.shape
    np.testing.assert_array_less(np.abs(got - ref), 1e-6 * (bound + np.abs(b)[:, None, None])
                                 + 1e-30)


def _onnx_conv_model():
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    b1 = rng.standard_normal(32).astype(np.float32)
    w2 = (rng.standard_normal((32, 32, 1, 1)) * 0.1).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Conv", ["r", "w2"], ["c2"]),
         helper.make_node("Add", ["c2", "r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 12, 12])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
         numpy_helper.from_array(w2, "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@needs_bf16
def test_quantize_bf16_compiles_convs_onto_vdpbf16ps():
    model = _onnx_conv_model()
    x = np.random.default_rng(1).standard_normal((1, 16, 12, 12)).astype(np.float32)
    q = ember.compile(model, quantize="bf16")
    info = q.info["quantization"]
    assert info["dtype"] == "bf16" and info["applied"] and info["bf16_kernels"] == 2
    want, = ember.compile(model).run({"x": x})
    got, = q.run({"x": x})
    assert got.dtype == np.float32
    # bf16 inputs (8 bits of mantissa), activations stored as bf16 between the layers
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2 * np.abs(want).max())


def test_quantize_bf16_without_avx512_bf16_falls_back_to_float32():
    model = _onnx_conv_model()
    x = np.random.default_rng(2).standard_normal((1, 16, 12, 12)).astype(np.float32)
    tgt = "llvm -isa=avx2" if "avx2" in Target("llvm").features else "llvm -isa=scalar"
    q = ember.compile(model, target=tgt, quantize="bf16")
    info = q.info["quantization"]
    assert info["applied"] is False and "AVX512_BF16" in info["reason"]
    assert UKR not in q.source
    want, = ember.compile(model, target=tgt).run({"x": x})
    np.testing.assert_array_equal(q.run({"x": x})[0], want)


@needs_bf16
@pytest.mark.parametrize("name", ["resnet", "resnet18", "attention", "bert"])
def test_quantize_bf16_models_agree_with_float32(name):
    import sys
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "passes"))
    from small_models import MODELS, inputs_for
    model = MODELS[name]()
    x = inputs_for(model)
    want = ember.compile(model).run(x)
    q = ember.compile(model, quantize="bf16")
    assert q.info["quantization"]["bf16_kernels"] >= 1
    for g, w in zip(q.run(x), want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=0, atol=3e-2 * np.abs(w).max())
        if name.startswith("resnet"):  # class scores: the same top-1
            assert (g.reshape(g.shape[0], -1).argmax(-1) ==
                    w.reshape(w.shape[0], -1).argmax(-1)).all()


@needs_bf16
def test_bf16_gemm_exposes_the_tuning_knobs_of_the_fp32_rule():
    from ember.graph.lower import constant_args, lower_binding
    from ember.graph.passes import optimize
    from ember.tir.schedule.rules import rule_knobs, schedule_config
    from ember.tir.stmt import KernelCall
    rng = np.random.default_rng(3)
    w = rng.standard_normal((96, 128)).astype(BF16)
    b = rng.standard_normal(96).astype(np.float32)
    tgt = Target("llvm")
    mod, params = optimize(_dense_module(64, 128, 96, "bias_relu"), tgt, {"w": w, "b": b})
    bd = mod.main.bindings[0]
    k = lower_binding(bd, "k0", mod)
    k.attrs["constant_params"] = constant_args(bd, params)
    name, knobs = rule_knobs(k, tgt)
    assert name == "gemm_rule" and len(knobs["tile"]) > 1
    for mr, nr in knobs["tile"]:
        f = schedule_config(k, tgt, name, {"tile": [mr, nr]})
        calls = []

        def visit(s):
            if isinstance(s, KernelCall):
                calls.append(s.name)
            for c in getattr(s, "stmts", None) or [getattr(s, "body", None)]:
                if c is not None and not isinstance(c, (int, float, str)):
                    visit(c)
        visit(f.body)
        assert any(c.startswith(f"{UKR}{mr}x{nr}_") for c in calls), (mr, nr, calls)


@needs_bf16
@pytest.mark.slow(reason="compiles ResNet-50 twice (about a minute on 2 shared cores)")
def test_quantize_bf16_resnet50_keeps_top1():
    from ember.zoo import default_model_input, randomized_light_model
    model = randomized_light_model("resnet50", seed=0)
    x = default_model_input(model)
    want, = ember.compile(model).run(x)
    q = ember.compile(model, quantize="bf16")
    got, = q.run(x)
    # every convolution (the 3-channel stem padded to 4 channels) and the classifier
    assert q.info["quantization"]["bf16_kernels"] >= 54
    assert got.argmax() == want.argmax()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max())


@needs_bf16
def test_cli_compile_quantize_bf16_writes_an_artifact_that_runs(tmp_path):
    from ember.cli import main
    path, art = tmp_path / "conv.onnx", tmp_path / "conv.bf16.ember"
    onnx.save(_onnx_conv_model(), str(path))
    assert main(["compile", str(path), "--quantize", "bf16", "-o", str(art)]) == 0
    x = np.random.default_rng(4).standard_normal((1, 16, 12, 12)).astype(np.float32)
    got, = ember.load(str(art)).run({"x": x})
    want, = ember.compile(str(path), quantize="bf16").run({"x": x})
    np.testing.assert_array_equal(got, want)
    assert main(["profile", str(art), "--repeat", "2"]) == 0


def test_coalesce_reduction_loops_merges_contiguous_runs_only():
    from ember.tir.schedule.tensorize import coalesce_reduction_loops
    # NHWC 7x7 stem on 4 channels, pairs folded: kh (row stride), kw (4 elements, 2 pairs of
    # B columns), channel pairs (2, 2, 2 * nr): kw and the pairs are one run of 14 pair steps
    nr = 32
    red = [(7, 4 * 230, 7 * 4 * nr), (7, 4, 4 * nr), (2, 2, 2 * nr)]
    assert coalesce_reduction_loops(red) == [(7, 4 * 230, 7 * 4 * nr), (14, 2, 2 * nr)]
    # a padded row (A's stride is not extent x stride) or B's stride off: kept apart
    assert coalesce_reduction_loops([(3, 70, 64 * nr), (32, 2, 2 * nr)]) == \
        [(3, 70, 64 * nr), (32, 2, 2 * nr)]
    assert coalesce_reduction_loops([(3, 64, 65 * nr), (32, 2, 2 * nr)]) == \
        [(3, 64, 65 * nr), (32, 2, 2 * nr)]
    assert coalesce_reduction_loops([(3, 64, 64 * nr), (32, 2, 2 * nr)]) == [(96, 2, 2 * nr)]


@needs_bf16
def test_quantize_bf16_stem_stores_bf16_before_the_max_pool():
    # stem conv -> ReLU -> max pool -> conv: the stem's epilogue rounds once and stores bf16,
    # the pool runs on bf16 (max commutes with the rounding) and the next conv reads its output
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((32, 3, 7, 7)) * 0.2).astype(np.float32)
    b1 = rng.standard_normal(32).astype(np.float32)
    w2 = (rng.standard_normal((16, 32, 1, 1)) * 0.2).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[3] * 4, strides=[2, 2]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], pads=[1] * 4,
                          strides=[2, 2]),
         helper.make_node("Conv", ["p", "w2"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    q = ember.compile(model, quantize="bf16")
    assert q.info["quantization"]["bf16_kernels"] == 2
    pool = [s for s in q.plan["steps"] if "max_pool" in s["op"]]
    assert len(pool) == 1
    assert re.search(rf"int32_t {pool[0]['symbol']}\(const uint16_t\* restrict p0, "
                     rf"uint16_t\* restrict p1\)", q.source)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    got, = q.run({"x": x})
    c, _ = _conv_ref(_bf16_round(x), _bf16_round(w1), pad=3, stride=2)
    r = _bf16_round(np.maximum(c + b1[:, None, None], 0))
    rp = np.pad(r, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    p = np.max([rp[:, :, i:i + 16:2, j:j + 16:2] for i in range(3) for j in range(3)], axis=0)
    ref, bound = _conv_ref(p, _bf16_round(w2))
    # the stem's float32 sums may round to the neighbouring bf16 value (an ulp, 2^-8)
    np.testing.assert_array_less(np.abs(got - ref), 2 ** -7 * bound + 1e-30)


@needs_bf16
@pytest.mark.parametrize("c,hw", [(64, 20), (48, 9)])
def test_bf16_max_pool_keeps_its_running_max_in_float32_and_matches_bit_for_bit(c, hw):
    # a bf16 NHWC max pool (3x3, stride 2, pad 1: ResNet's): the running max lives in a float32
    # tile (the pooling rule's float32 cache_write), rounded once on the way out; max of bf16
    # values is a bf16 value, so the result equals NumPy's max over the padded windows exactly
    oh = (hw + 2 - 3) // 2 + 1
    mod = IRModule.from_text(f"""
def @main(%x: Tensor[(1, {hw}, {hw}, {c}), bfloat16]) {{
  %0 = nn.max_pool(%x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=null, ceil_mode=0, data_layout="NHWC") : Tensor[(1, {oh}, {oh}, {c}), bfloat16]
  return %0
}}""")
    model = ember.build(mod, "llvm", {})
    assert re.search(r"float acc\d+\[\d+\]", model.source), "no float32 running-max tile"
    rng = np.random.default_rng(c + hw)
    x = rng.standard_normal((1, hw, hw, c)).astype(BF16)
    x[0, 0, 0, :4] = -np.inf
    got = np.asarray(model.run({"x": x})[0])
    xp = np.pad(x.astype(np.float32), [(0, 0), (1, 1), (1, 1), (0, 0)], constant_values=-np.inf)
    ref = np.max([xp[:, i:i + 2 * oh:2, j:j + 2 * oh:2] for i in range(3) for j in range(3)],
                 axis=0).astype(BF16)
    assert got.dtype == ref.dtype and got.view(np.uint16).tolist() == ref.view(np.uint16).tolist()
