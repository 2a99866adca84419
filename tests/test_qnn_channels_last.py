"""The channels-last int8 kernel (``qnn.conv2d`` with ``w_layout="blocked"``: NHWC, the NCHW
stem, dense rows; ``ember.codegen.microkernel_qgemm``) against the integer NumPy reference,
bit-exact, on the scalar, the AVX2 (vpmaddwd) and the AVX-512 VNNI micro-kernels: per-channel and per-tensor
scales, zero points, uint8/int8 activations, odd shapes (channel tails of the 16-lane vectors,
pixel tails of the register block, K not a multiple of 4), strides, padding, dilation, ReLU,
the integer requantization, and the fused residual add (dequantize, add, ReLU, quantize). The
channels-last reference is checked against the NCHW one (test_qnn_conv checks that against a
float64 convolution), the fused residual against the separate QDQ reference operators."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph.builder import FunctionBuilder
from ember.graph.ir import IRModule, TensorType
from ember.ops.qnn import dequantize_ref, quantize_ref
from ember.ops.qnn_conv import dense_k_weight, pack_weight_blocked, qconv_reference
from ember.tir.schedule.rules.qnn import qconv_isa
from op_cases_qnn import qconv_case

HAS_VNNI = qconv_isa(ember.Target("llvm")) == "avx512vnni"
HAS_AVX2 = ember.Target("llvm").isa in ("avx512", "avx2")
ISAS = ["scalar"] + (["avx2"] if HAS_AVX2 else []) + (["native"] if HAS_VNNI else [])


def channels_last_case(rng, layout="nhwc", skip=None, fixed=False, dense=False, scales=None,
                       float_out=False, **kw):
    """``(inputs, attrs, nchw_inputs, nchw_attrs)``: a ``qconv_case`` in the channels-last
    form (and the same layer in the NCHW / tap form); ``skip``: the residual's dtype;
    ``dense``: the stem's dense reduction order (``k_layout="dense"``)."""
    base = "rows" if layout == "rows" else "nchw"
    x, wq, bias, mult, attrs = qconv_case(rng, layout=base, **kw)
    if fixed:
        attrs.update(requant="fixed", rq_mult=int(rng.integers(200, 3000)), rq_shift=22)
    cout = wq.shape[0]
    coutp = -(-cout // 16) * 16
    pad = lambda a: np.concatenate([a, np.zeros(coutp - cout, a.dtype)])  # noqa: E731
    a2 = dict(attrs, layout=layout, w_layout="blocked", cout=cout)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout == "nhwc" else x
    if dense:
        a2["k_layout"] = "dense"
        wq_cl = dense_k_weight(wq, kw["k"], kw["k"], kw["c"])
    else:
        wq_cl = wq
    ins = [xl, pack_weight_blocked(wq_cl), pad(bias), pad(mult)]
    if skip is not None:
        nchw_out = qconv_reference(x, wq, bias, mult, attrs)
        shp = nchw_out.shape if layout == "rows" else tuple(np.array(nchw_out.shape)[[0, 2, 3, 1]])
        lo, hi = (0, 255) if skip == "uint8" else (-128, 127)
        ins.append(rng.integers(lo, hi + 1, shp).astype(skip))
        a2.update(mid_dtype=attrs["out_dtype"], c_scale=float(rng.uniform(0.01, 0.05)),
                  s_scale=float(rng.uniform(0.01, 0.05)), s_zp=int(rng.integers(lo, hi + 1)),
                  o_scale=float(rng.uniform(0.02, 0.06)), o_zp=int(rng.integers(0, 40)),
                  out_dtype="uint8")
        a2["o_lo"] = a2["o_zp"] if kw.get("relu") else 0
        if scales is not None:  # (c_scale, s_scale, o_scale)
            a2.update(c_scale=scales[0], s_scale=scales[1], o_scale=scales[2])
        if float_out:  # the float sum, [relu], no requantization
            a2.update(out_dtype="float32", o_relu=bool(kw.get("relu")))
    return ins, a2, (x, wq, bias, mult), attrs


def _run(ins, attrs, target):
    fb = FunctionBuilder()
    names = ["x", "w", "b", "m", "s"][:len(ins)]
    vs = [fb.param(nm, TensorType(a.shape, str(a.dtype))) for nm, a in zip(names, ins)]
    y = fb.call("qnn.conv2d", vs, attrs)
    mod = IRModule({"main": fb.finish([y])})
    tgt = "llvm" if target == "native" else f"llvm -isa={target}"
    consts = dict(zip(["w", "b", "m"], ins[1:4]))
    feeds = {"x": ins[0]}
    if len(ins) > 4:
        feeds["s"] = ins[4]
    return ember.build(mod, tgt, consts).run(feeds)[0]


CASES = [
    dict(n=1, c=3, h=9, w=7, cout=5, k=3, pad=1, layout="nchw_nhwc"),       # the stem form
    dict(n=2, c=16, h=8, w=8, cout=19, k=1),                                # 1x1 in place
    dict(n=1, c=16, h=9, w=9, cout=40, k=1, stride=2),                      # strided in place
    dict(n=1, c=7, h=11, w=13, cout=40, k=3, stride=2, pad=1, in_dtype="int8"),
    dict(n=1, c=5, h=10, w=10, cout=9, k=3, dil=2, per_channel=False, out_dtype="int8"),
    dict(n=1, c=36, h=6, w=7, cout=70, k=3, pad=1, relu=True),
    dict(n=1, c=24, h=5, w=5, cout=33, k=1, fixed=True, in_dtype="int8", out_dtype="int8"),
    dict(n=1, c=21, h=37, w=1, cout=23, k=1, layout="rows", in_dtype="int8"),
    dict(n=1, c=64, h=130, w=1, cout=35, k=1, layout="rows", relu=True),
    dict(n=1, c=32, h=7, w=7, cout=48, k=1, skip="uint8", relu=True),        # residual + ReLU
    dict(n=1, c=12, h=6, w=5, cout=21, k=3, pad=1, skip="int8"),             # residual, tails
    dict(n=1, c=40, h=3, w=1, cout=30, k=1, layout="rows", skip="uint8"),
    # the stem's dense reduction order (k = (kh, kw, c), padded to 4 once): 7x7 stride 2 as
    # ResNet's (two images), int8 input, dilation (per-tap copies), per-tensor, ReLU, a pixel
    # tile over several rows, 1 and 2 channels, the integer requantization, a fused residual
    dict(n=2, c=3, h=23, w=19, cout=40, k=7, stride=2, pad=3, layout="nchw_nhwc", dense=True),
    dict(n=1, c=3, h=16, w=16, cout=64, k=7, stride=2, pad=3, layout="nchw_nhwc", dense=True,
         in_dtype="int8"),
    dict(n=1, c=3, h=14, w=13, cout=20, k=3, pad=2, dil=2, layout="nchw_nhwc", dense=True,
         relu=True),
    dict(n=1, c=3, h=40, w=9, cout=21, k=3, stride=1, pad=1, layout="nchw_nhwc", dense=True,
         per_channel=False, out_dtype="int8"),
    dict(n=1, c=1, h=12, w=11, cout=17, k=5, stride=1, pad=2, layout="nchw_nhwc", dense=True),
    dict(n=1, c=2, h=9, w=10, cout=16, k=3, stride=2, pad=0, layout="nchw_nhwc", dense=True,
         fixed=True, in_dtype="int8"),
    dict(n=1, c=3, h=11, w=12, cout=33, k=3, pad=1, layout="nchw_nhwc", dense=True,
         skip="uint8", relu=True),
    # residual scales whose quotients (v - zp) / 2 + (s - zs) / 4 sit on and next to the
    # halves: the AVX-512 epilogue's reciprocal must fall back to the division there
    dict(n=1, c=32, h=9, w=9, cout=64, k=1, skip="uint8", scales=(0.02, 0.01, 0.04)),
    dict(n=1, c=16, h=8, w=7, cout=48, k=1, skip="int8", scales=(0.3, 0.1, 0.6)),
    # a residual read in float32 (ResNet's last add, before the global average pool)
    dict(n=1, c=64, h=7, w=7, cout=80, k=1, skip="uint8", relu=True, float_out=True),
    dict(n=1, c=12, h=5, w=6, cout=21, k=3, pad=1, skip="int8", float_out=True),
]


@pytest.mark.parametrize("target", ISAS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_channels_last_kernel_is_bit_exact(case, target):
    rng = np.random.default_rng(100 + case)
    ins, attrs, _, _ = channels_last_case(rng, **CASES[case])
    want = qconv_reference(*ins, attrs)
    got = _run(ins, attrs, target)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 8  # the case exercises the output range


@pytest.mark.parametrize("case", range(len(CASES)))
def test_channels_last_reference_matches_nchw(case):
    """The channels-last reference is the NCHW reference transposed; with a residual, it is
    the NCHW output followed by the QDQ operators' own references (dequantize, add, ReLU,
    quantize)."""
    rng = np.random.default_rng(100 + case)
    spec = CASES[case]
    ins, attrs, nchw_ins, nchw_attrs = channels_last_case(rng, **spec)
    y = qconv_reference(*nchw_ins, nchw_attrs)
    if spec.get("layout", "nhwc") != "rows":
        y = y.transpose(0, 2, 3, 1)
    if len(ins) > 4:
        zc, zs = np.array(attrs["y_zp"], y.dtype), np.array(attrs["s_zp"], ins[4].dtype)
        h = dequantize_ref(y, np.float32(attrs["c_scale"]), zc) + \
            dequantize_ref(ins[4], np.float32(attrs["s_scale"]), zs)
        if spec.get("relu"):
            h = np.maximum(h, np.float32(0))
        y = h if spec.get("float_out") else \
            quantize_ref(h, np.float32(attrs["o_scale"]), np.array(attrs["o_zp"], np.uint8))
    np.testing.assert_array_equal(qconv_reference(*ins, attrs), y)


def test_isa_selection_and_no_saturating_multiply():
    """``-isa`` picks the qgemm micro-kernel; the AVX2 one multiplies with vpmaddwd on int16
    (never vpmaddubsw, which saturates at int16)."""
    from dataclasses import astuple
    from ember.codegen.microkernel import microkernel_source
    from ember.ops.qnn_conv import geometry
    from ember.tir.schedule.rules.qnn import qgemm_isa
    assert qgemm_isa(ember.Target("llvm -isa=scalar")) == "scalar"
    if HAS_AVX2:
        assert qgemm_isa(ember.Target("llvm -isa=avx2")) == "avx2"
    ins, attrs, _, _ = channels_last_case(np.random.default_rng(0), **CASES[6])
    _, g = geometry([TensorType(a.shape, str(a.dtype)) for a in ins], attrs)
    src = microkernel_source("k", ("qgemm", "avx2", "int8:none") + astuple(g))
    assert "_mm256_madd_epi16" in src and "maddubs" not in src
    src = microkernel_source("k", ("qgemm", "avx512vnni", "int8:none") + astuple(g))
    assert "vpdpbusd" in src
